# Region: scope of `with unflatten_safe():` / @unflatten_safe -- code OUTSIDE the block in
# another thread or another asyncio task must still run the rebuild checks it runs plain
# (row 3: outside unflatten_safe -> checked).  plain mode: the blocks are no-ops.
# MODES: block
import common
from common import show
import asyncio, threading, jax, jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped

if common.MODE == "block":
    import typecheck_guard
    U = typecheck_guard.unflatten_safe
else:
    import contextlib
    U = lambda f=None: contextlib.nullcontext() if f is None else f


@jaxtyped(typechecker=beartype)
@struct.dataclass
class S:
    x: Float[Array, "n"]


def outside_rebuild():
    try:
        jax.tree.map(lambda v: v.astype(jnp.int32), S(jnp.ones(2)))
        return "passed"
    except Exception as e:
        return type(e).__name__


def main():
    inside, done = threading.Event(), threading.Event()

    def a():
        with U():
            inside.set()
            done.wait(10)

    t = threading.Thread(target=a)
    t.start()
    inside.wait(10)
    show("thread B outside while A in block", outside_rebuild, count=False)
    done.set()
    t.join()

    @U
    async def task_a(ev, go):
        ev.set()
        await go.wait()
        return "a"

    async def task_b(ev, go):
        await ev.wait()
        r = outside_rebuild()
        go.set()
        return r

    async def both():
        ev, go = asyncio.Event(), asyncio.Event()
        return await asyncio.gather(task_a(ev, go), task_b(ev, go))

    show("task B outside while task A suspended in @unflatten_safe", lambda: asyncio.run(both()), count=False)

    def gen():
        with U():
            yield 1
            yield 2

    g = gen()
    next(g)
    show("caller between items of a generator holding a block", outside_rebuild, count=False)
    g.close()

    @U
    def gen2():
        yield 1
        yield 2

    g2 = gen2()
    next(g2)
    show("caller between items of @unflatten_safe generator", outside_rebuild, count=False)
    show("main after everything", outside_rebuild, count=False)


main()
