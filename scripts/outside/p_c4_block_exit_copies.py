# "A block ends at its exit also for contexts copied / tasks created inside it" (and docs: "a task
# created in it, or a context copied in it, and run after the exit, is not covered").  New ways a
# context is copied inside a block and run after its exit: asyncio.to_thread, loop.run_in_executor
# with ctx.run, a task created with an explicit context, a context copied in a nested block,
# asyncio.TaskGroup, call_later, a copied context entered from a thread; and a copy made
# BEFORE a block and run after it.  Each rebuilds a class whose check fails (tree.map to int32):
# plain raises; a run after the exit must still raise.
# MODES: wrap
import common
from common import out
import asyncio, contextlib, contextvars, threading, time, concurrent.futures as cf, sys
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


async def a_main():
    loop = asyncio.get_running_loop()
    res = {}
    gate = threading.Event()

    def gated():
        gate.wait()
        return to_int()

    # to_thread: copies the context at call time (inside the block), runs after the exit
    with block():
        fut = asyncio.ensure_future(asyncio.to_thread(gated))
        await asyncio.sleep(0)
    gate.set()
    res["to_thread after exit"] = await fut

    # run_in_executor with a context copied in the block
    gate.clear()
    with block():
        ctx = contextvars.copy_context()
    f2 = loop.run_in_executor(None, ctx.run, gated)
    gate.set()
    res["executor ctx.run after exit"] = await f2

    # a task created after the exit with a context copied inside
    with block():
        ctx2 = contextvars.copy_context()

    async def co():
        return to_int()

    res["create_task(context=copied) after exit"] = await asyncio.create_task(co(), context=ctx2)

    # TaskGroup task created in block, runs after exit
    if sys.version_info >= (3, 11):
        async with asyncio.TaskGroup() as tg:
            with block():
                t = tg.create_task(co())
        res["TaskGroup task after exit"] = t.result()

    # call_later scheduled in block, fires after the exit
    done = loop.create_future()
    with block():
        loop.call_later(0.01, lambda: done.set_result(to_int()))
    res["call_later after exit"] = await done
    return res


def main():
    r = asyncio.run(a_main())
    for k, v in r.items():
        out(k, v)
    # nested: copy made inside an inner block, both blocks exited
    with block():
        with block():
            ctx = contextvars.copy_context()
    out("copy in nested block, run after both exits", ctx.run(to_int))
    # copy made BEFORE the block, run inside it (covered? plain raises anyway) and after
    pre = contextvars.copy_context()
    with block():
        pass
    out("copy before block, run after", pre.run(to_int))
    # a copied context entered in a thread while the block is still open in main
    res = {}
    with block():
        ctx3 = contextvars.copy_context()
        th = threading.Thread(target=lambda: res.setdefault("v", ctx3.run(to_int)))
        th.start()
        th.join()
    out("copied ctx run in a thread while main's block is open", res["v"])
    # the ctx copied inside a block, run again inside a new block, then after that one exits
    with block():
        ctx4 = contextvars.copy_context()
    with block():
        pass
    out("copied ctx run after a second block", ctx4.run(to_int))
    # in-block control (wrap: built, plain: error; expected and declared)
    with block():
        print("INFO in-block control:", to_int())


common.main(main)
