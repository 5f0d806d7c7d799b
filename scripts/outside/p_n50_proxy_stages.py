# Region: the AOT stage objects from unflatten_safe(jax.jit(f)).lower/trace (their class is
# swapped for a same-named subclass) and the proxy's repr.
# MODES: wrap
import common
from common import show
import copy, pickle, jax, jax.numpy as jnp


def f(x):
    return x + 1


def main():
    j = common.jit(f)
    x = jnp.ones(2)
    show("repr", lambda: repr(j), count=False)
    show("str", lambda: str(j), count=False)
    lo = j.lower(x)
    tr = j.trace(x)
    co = lo.compile()
    for name, o, base in [("Lowered", lo, jax.stages.Lowered), ("Traced", tr, jax.stages.Traced), ("Compiled", co, jax.stages.Compiled)]:
        show(f"{name} type is", lambda: type(o) is base, count=False)
        show(f"{name} isinstance", lambda: isinstance(o, base), count=False)
        show(f"{name} qualname/module", lambda: (type(o).__qualname__, type(o).__module__), count=False)
        show(f"{name} copy type is", lambda: type(copy.copy(o)) is base, count=False)
        show(f"{name} subclasses", lambda: [c.__qualname__ for c in base.__subclasses__()], count=False)
    show("compiled call", lambda: co(x).tolist(), count=False)
    show("compiled as_text", lambda: len(co.as_text()) > 0, count=False)
    show("lowered as_text eq", lambda: lo.as_text() == jax.jit(f).lower(x).as_text(), count=False)
    show("traced lower", lambda: type(tr.lower()).__name__, count=False)
    show("cost_analysis", lambda: type(co.cost_analysis()).__name__, count=False)

common.main(main)
