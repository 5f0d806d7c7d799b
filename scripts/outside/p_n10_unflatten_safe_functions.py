# New region: @unflatten_safe on a function / generator / coroutine / async generator,
# and `with unflatten_safe():` -- must behave like the undecorated function / plain block.
# MODES: install
import common
from common import show
import asyncio, copy, functools, inspect, pickle, sys, threading
import cloudpickle
import jax, jax.numpy as jnp

if common.MODE == "plain":
    def U(f=None):
        if f is None:
            import contextlib
            return contextlib.nullcontext()
        return f
else:
    import typecheck_guard
    U = typecheck_guard.unflatten_safe


@U
def plain_fn(a, b=2, *args, c, **kw):
    """doc"""
    return (a, b, args, c, sorted(kw))


@U
def gen(n):
    got = []
    try:
        for i in range(n):
            x = yield i
            got.append(x)
    except ValueError as e:
        yield ("caught", str(e))
    finally:
        got.append("fin")
    return got


@U
def delegating():
    r = yield from gen(2)
    return ("delegated", r)


@U
async def coro(x):
    await asyncio.sleep(0)
    return x * 2


@U
async def agen(n):
    for i in range(n):
        v = yield i
        if v:
            yield ("sent", v)


class K:
    @U
    def meth(self, x):
        return ("meth", type(self).__name__, x)

    @U
    @staticmethod
    def sm(x):
        return ("sm", x)

    @classmethod
    @U
    def cm(cls, x):
        return ("cm", cls.__name__, x)


def drive_gen():
    g = gen(3)
    out = [next(g), g.send("a"), g.send("b")]
    try:
        g.send("c")
    except StopIteration as e:
        out.append(("stop", e.value))
    return out


def drive_throw():
    g = gen(3)
    next(g)
    r = g.throw(ValueError("boom"))
    g.close()
    return r


def drive_delegating():
    g = delegating()
    out = [next(g), g.send(1)]
    try:
        g.send(2)
    except StopIteration as e:
        out.append(e.value)
    return out


async def drive_agen():
    g = agen(3)
    out = [await g.__anext__(), await g.asend("x"), await g.__anext__()]
    await g.aclose()
    return out


def main():
    show("fn call", lambda: plain_fn(1, c=3, z=4))
    show("fn sig", lambda: str(inspect.signature(plain_fn)))
    show("fn names", lambda: (plain_fn.__name__, plain_fn.__qualname__, plain_fn.__doc__, plain_fn.__module__))
    show("fn defaults", lambda: (getattr(plain_fn, "__defaults__", "-"), getattr(plain_fn, "__kwdefaults__", "-")))
    show("fn pickle", lambda: pickle.loads(pickle.dumps(plain_fn))(1, c=2))
    show("fn cloudpickle", lambda: pickle.loads(cloudpickle.dumps(plain_fn))(1, c=2))
    show("fn copy", lambda: (copy.copy(plain_fn) is plain_fn, copy.deepcopy(plain_fn) is plain_fn))
    show("fn isfunction", lambda: inspect.isfunction(plain_fn))
    show("gen predicates", lambda: (inspect.isgeneratorfunction(gen), inspect.isgenerator(gen(1)), type(gen(1)).__name__))
    show("gen drive", drive_gen)
    show("gen throw", drive_throw)
    show("gen yield from", drive_delegating)
    show("gen list", lambda: list(gen(3)))
    show("gen name", lambda: gen(1).__name__)
    show("coro predicates", lambda: (inspect.iscoroutinefunction(coro), asyncio.iscoroutinefunction(coro)))
    show("coro run", lambda: asyncio.run(coro(21)))
    show("coro type", lambda: (lambda c: (type(c).__name__, c.close()))(coro(1)))
    show("agen predicates", lambda: (inspect.isasyncgenfunction(agen), type(agen(1)).__name__))
    show("agen drive", lambda: asyncio.run(drive_agen()))
    show("method", lambda: K().meth(1))
    show("staticmethod", lambda: K.sm(2))
    show("classmethod", lambda: K.cm(3))
    show("method unbound", lambda: K.meth(K(), 4))
    show("ctx exc propagates", lambda: (lambda: [None for _ in [0] if (lambda: (_ for _ in ()).throw(KeyError("k")))()])())
    def ctx_raise():
        with U():
            raise KeyError("inside")
    show("ctx raise", ctx_raise)
    def ctx_value():
        with U() as v:
            return v
    show("ctx as", ctx_value)
    def ctx_reuse():
        cm = U()
        with cm:
            with cm:
                pass
        with cm:
            pass
        return "ok"
    show("ctx reuse", ctx_reuse)
    def ctx_gen_exit():
        def g():
            with U():
                yield 1
                yield 2
        it = g()
        next(it)
        del it
        return "ok"
    show("ctx gen abandon", ctx_gen_exit)
    show("ctx decorator", lambda: U()(lambda: "decorated")() if hasattr(U(), "__call__") else "no call")

common.main(main)
