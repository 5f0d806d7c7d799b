# New region: the object standing in for a jitted function -- unflatten_safe(jax.jit(f))'s proxy
# (wrap) and the runtime guard's wrapper (guard) -- against the plain PjitFunction.
# MODES: wrap guard
import common
from common import show
import copy, functools, inspect, pickle, weakref
import cloudpickle
import jax, jax.numpy as jnp


def f(x, y=2.0):
    """f doc"""
    return x * y


def main():
    j = common.jit(f)
    g = common.jit(f, static_argnames="y")
    x = jnp.ones(2)
    show("call", lambda: j(x).tolist(), count=False)
    show("type name", lambda: type(j).__name__, count=False)
    show("isinstance Wrapped", lambda: isinstance(j, jax.stages.Wrapped), count=False)
    show("callable", lambda: callable(j), count=False)
    show("names", lambda: (j.__name__, j.__qualname__, j.__doc__, j.__module__), count=False)
    show("wrapped is f", lambda: j.__wrapped__ is f, count=False)
    show("signature", lambda: str(inspect.signature(j)), count=False)
    show("eq self", lambda: (j == j, hash(j) == hash(j)), count=False)
    show("weakref", lambda: weakref.ref(j)() is j, count=False)
    show("pickle", lambda: pickle.loads(pickle.dumps(j))(x).tolist(), count=False)
    show("cloudpickle", lambda: pickle.loads(cloudpickle.dumps(j))(x).tolist(), count=False)
    show("copy", lambda: type(copy.copy(j)).__name__, count=False)
    show("deepcopy", lambda: type(copy.deepcopy(j)).__name__, count=False)
    show("deepcopy call", lambda: copy.deepcopy(j)(x).tolist(), count=False)
    show("lower text", lambda: "stablehlo" in j.lower(x).as_text() or "func" in j.lower(x).as_text(), count=False)
    show("lower type", lambda: type(j.lower(x)).__name__, count=False)
    show("compile call", lambda: j.lower(x).compile()(x).tolist(), count=False)
    show("compiled type", lambda: type(j.lower(x).compile()).__name__, count=False)
    show("trace type", lambda: type(j.trace(x)).__name__, count=False)
    show("eval_shape", lambda: j.eval_shape(x), count=False)
    show("cache size", lambda: j._cache_size(), count=False)
    show("clear_cache", lambda: j.clear_cache(), count=False)
    show("static call", lambda: g(x, y=3.0).tolist(), count=False)
    show("jit of jitted", lambda: jax.jit(j)(x).tolist(), count=False)
    show("vmap", lambda: jax.vmap(j)(jnp.ones((2, 2))).tolist(), count=False)
    show("grad", lambda: float(jax.grad(lambda v: j(v).sum())(x)[0]), count=False)
    show("dir subset", lambda: sorted(a for a in ["lower", "trace", "eval_shape", "clear_cache", "__wrapped__", "__get__"] if hasattr(j, a)), count=False)
    show("is pytree leaf", lambda: len(jax.tree.leaves([j])), count=False)
    show("as static arg", lambda: jax.jit(lambda fn, v: fn(v), static_argnums=0)(j, x).tolist(), count=False)
    show("partial", lambda: functools.partial(j, y=4.0)(x).tolist(), count=False)

    class M:
        meth = common.jit(lambda self, v: v + 1, static_argnums=0)
        def __hash__(self): return 1
        def __eq__(self, o): return True
    show("method", lambda: M().meth(x).tolist(), count=False)
    show("method self", lambda: type(M().meth).__name__, count=False)
    show("class attr", lambda: type(M.meth).__name__, count=False)

common.main(main)
