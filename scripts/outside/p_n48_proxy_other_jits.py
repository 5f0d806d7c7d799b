# Region: unflatten_safe(...) over equinox.filter_jit / nnx.jit / jax.pmap / donation /
# static args, including as methods of Equinox modules (a common pattern).
# MODES: wrap
import common
from common import show
import functools, jax, jax.numpy as jnp, equinox as eqx
from flax import nnx

if common.MODE == "wrap":
    import typecheck_guard
    U = typecheck_guard.unflatten_safe
else:
    U = lambda f: f


class Mod(eqx.Module):
    w: jax.Array

    @U
    @eqx.filter_jit
    def __call__(self, x):
        return self.w * x

    @eqx.filter_jit
    def plain_method(self, x):
        return self.w + x


def main():
    m = Mod(jnp.ones(2))
    show("eqx method call", lambda: m(jnp.ones(2) * 2).tolist(), count=False)
    show("eqx method type", lambda: type(m.__call__).__name__, count=False)
    show("eqx tree of bound method", lambda: len(jax.tree.leaves(m.__call__)), count=False)
    fj = U(eqx.filter_jit(lambda x, n: x * n))
    show("filter_jit static int", lambda: fj(jnp.ones(2), 3).tolist(), count=False)
    show("filter_jit attrs", lambda: sorted(a for a in ["lower", "__wrapped__", "__name__"] if hasattr(fj, a)), count=False)
    pm = U(jax.pmap(lambda x: x * 2))
    show("pmap", lambda: pm(jnp.ones((1, 2))).tolist(), count=False)
    d = U(jax.jit(lambda x: x + 1, donate_argnums=0))
    xin = jnp.ones(3)
    show("donate result", lambda: d(xin).tolist(), count=False)
    show("donated deleted", lambda: xin.is_deleted(), count=False)
    s = U(jax.jit(lambda x, k: x * k, static_argnames="k"))
    show("static kw", lambda: s(jnp.ones(2), k=3).tolist(), count=False)
    show("static kw cache", lambda: (s(jnp.ones(2), k=3), s._cache_size() if hasattr(s, "_cache_size") else "n/a")[1], count=False)
    model = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
    nj = U(nnx.jit(lambda m, x: m(x).sum()))
    show("nnx.jit", lambda: round(float(nj(model, jnp.ones((1, 2)))), 4), count=False)
    show("partial of proxy", lambda: functools.partial(U(jax.jit(lambda a, b: a - b)), b=jnp.ones(1))(jnp.ones(1)).tolist(), count=False)

common.main(main)
