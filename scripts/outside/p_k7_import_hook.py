# Known family 7: under jaxtyping's import hook, tree_flatten / tree_unflatten themselves stay checked per call.
# MODES: install
import common
from common import show
import jax.numpy as jnp
import beartype
from jaxtyping import install_import_hook

N = {"n": 0}
orig = beartype.beartype


def counting(fn, *a, **k):
    checked = orig(fn, *a, **k)
    if not callable(checked) or isinstance(checked, type):
        return checked
    import functools

    @functools.wraps(checked)
    def w(*args, **kw):
        N["n"] += 1
        return checked(*args, **kw)
    return w


import sys, types
m = types.ModuleType("countbt")
m.beartype = counting
sys.modules["countbt"] = m

with install_import_hook("hookpkg", "countbt.beartype"):
    import hookpkg.mod as mod


def main():
    q = mod.step(mod.Q(jnp.ones(2)))
    N["n"] = 0
    for _ in range(5):
        q = mod.step(q)
    print("REBUILD checks per 5 calls:", N["n"])
    show("construct bad", lambda: mod.Q(jnp.ones((2, 2))))

common.main(main)
