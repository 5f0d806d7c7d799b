# Known family 5: unflatten_safe(jitted) proxy used as a method; copy/deepcopy of it.
# MODES: wrap
import common
from common import show
import copy, jax, jax.numpy as jnp


def f(self, x):
    return x * 2


class M:
    step = common.jit(f, static_argnums=0)
    def __hash__(self): return 0
    def __eq__(self, o): return True


def main():
    m = M()
    show("bound call", lambda: m.step(jnp.ones(2)).tolist(), count=False)
    show("bound __name__", lambda: m.step.__name__, count=False)
    show("bound has __self__", lambda: hasattr(m.step, "__self__"), count=False)
    show("bound clear_cache", lambda: hasattr(m.step, "clear_cache"), count=False)
    show("bound lower", lambda: hasattr(m.step, "lower"), count=False)
    show("copy holder", lambda: type(copy.copy({"f": M.step})["f"]).__name__, count=False)
    show("deepcopy holder", lambda: type(copy.deepcopy({"f": M.step})["f"]).__name__, count=False)

common.main(main)
