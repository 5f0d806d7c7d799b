# Family B10 (block scope under concurrency): `with unflatten_safe():` is "scoped to the frame it
# is entered in"; inside a generator "the block covers every resumption of its body, not the
# caller's code between two items".  Attack: code that is NOT in the block runs while a block is
# open elsewhere -- the caller between a generator's items, another asyncio task while a
# coroutine awaits inside its block, another thread, a callback scheduled from inside the block
# -- and rebuilds a class whose check fails (tree.map to int32).  Plain: raises; it must still.
# (mode wrap = the program's own unflatten_safe blocks are real; plain = nullcontext)
# MODES: wrap
import common
from common import show, out
import asyncio, contextlib, threading
import jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped
from flax import struct


def block():
    if common.MODE == "wrap":
        import typecheck_guard
        return typecheck_guard.unflatten_safe()
    return contextlib.nullcontext()


@jaxtyped(typechecker=beartype)
@struct.dataclass
class S:
    x: Float[Array, " n"]


s = S(jnp.ones(2))


def to_int():
    try:
        jax.tree.map(lambda v: v.astype(jnp.int32), s)
        return "built"
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


def gen():
    with block():
        yield 1
        yield 2


@(__import__("typecheck_guard").unflatten_safe if common.MODE == "wrap" else (lambda f: f))
def gen_deco():
    yield 1
    yield 2


async def in_block(ev_in, ev_out):
    with block():
        ev_in.set()
        await ev_out.wait()


async def outsider(ev_in, ev_out, res):
    await ev_in.wait()
    res.append(to_int())
    ev_out.set()


async def amain():
    ev_in, ev_out, res = asyncio.Event(), asyncio.Event(), []
    await asyncio.gather(in_block(ev_in, ev_out), outsider(ev_in, ev_out, res))
    return res


def main():
    g = gen()
    next(g)
    out("caller between items of a generator with a block inside", to_int())
    next(g)
    out("caller between items (2)", to_int())
    g.close()
    out("after close", to_int())
    g2 = gen()
    next(g2)
    del g2  # suspended generator dropped without close in the block
    out("after dropping a suspended generator", to_int())
    h = gen_deco()
    next(h)
    out("caller between items of @unflatten_safe generator", to_int())
    out("another asyncio task while a coroutine waits in its block", asyncio.run(amain()))
    res = []
    ready, done = threading.Event(), threading.Event()

    def th():
        ready.wait()
        res.append(to_int())
        done.set()

    t = threading.Thread(target=th)
    t.start()
    with block():
        ready.set()
        done.wait()
    t.join()
    out("another thread while main is in a block", res)
    # a contextvars.copy_context() taken inside a block, run outside
    import contextvars
    with block():
        ctx = contextvars.copy_context()
    out("copied context run outside", ctx.run(to_int))

    async def co_to_int():
        return to_int()

    loop = asyncio.new_event_loop()
    with block():
        task = loop.create_task(co_to_int())  # a task created in the block, not run there
    out("task created in a block, run after it by run_until_complete", loop.run_until_complete(task))
    loop.close()

    def mk():
        with block():
            return contextvars.copy_context()

    ctx2 = mk()  # the block and the frame that entered it are gone
    out("context copied in a finished helper's block, run later", ctx2.run(to_int))
    r = []
    t = threading.Thread(target=lambda: r.append(ctx2.run(to_int)))
    t.start(); t.join()
    out("same, run by another thread", r)
    # a loop.call_soon callback scheduled from inside a block
    async def sched():
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with block():
            loop.call_soon(lambda: fut.set_result(to_int()))
        return await fut
    out("call_soon scheduled in a block", asyncio.run(sched()))
    async def task_in_block():
        with block():
            t = asyncio.ensure_future(asyncio.sleep(0, result=None))
            t2 = asyncio.get_running_loop().create_task(_wrap())
        return await t2
    async def _wrap():
        await asyncio.sleep(0)
        return to_int()
    out("task created in a block, run after", asyncio.run(task_in_block()))


common.main(main)
