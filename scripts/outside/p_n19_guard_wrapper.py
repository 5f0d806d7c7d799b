# New: the runtime guard's wrapper of jax.jit functions (runtime_checks("log") on):
# clear_cache(), bound-method objects, __wrapped__.
# MODES: guard
import common
from common import show
import jax, jax.numpy as jnp


def f(x):
    return x + 1


def main():
    j = jax.jit(f)
    show("call", lambda: j(jnp.ones(1)).tolist(), count=False)
    show("clear_cache", lambda: j.clear_cache(), count=False)
    show("__wrapped__ is f", lambda: j.__wrapped__ is f, count=False)

    class M:
        @jax.jit
        def meth(self, v):
            return v * 2
    m = M()
    show("bound", lambda: m.meth(jnp.ones(1)).tolist(), count=False)
    show("bound __self__ is m", lambda: m.meth.__self__ is m, count=False)
    show("bound __func__", lambda: type(m.meth.__func__).__name__, count=False)
    show("bound type", lambda: type(m.meth).__name__, count=False)
    show("bound clear_cache", lambda: m.meth.clear_cache(), count=False)

common.main(main)
