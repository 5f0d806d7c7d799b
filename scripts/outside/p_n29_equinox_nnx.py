# Region: Equinox modules and Flax NNX objects registered after install() (they go through
# the patched registration funnel): constructions, __check_init__, converters, tree ops,
# filter_jit, nnx.split/merge/jit -- before and after the first unflatten.
# MODES: install wrap
import common
from common import show, cbeartype
import jax, jax.numpy as jnp, equinox as eqx
from flax import nnx
from jaxtyping import Array, Float, jaxtyped

LOG = []


@jaxtyped(typechecker=cbeartype)
class Lin(eqx.Module):
    w: Float[Array, "o i"]
    b: Float[Array, " o"] = eqx.field(converter=jnp.asarray)
    name: str = eqx.field(static=True, default="lin")

    def __check_init__(self):
        LOG.append("check_init")
        if self.w.shape[0] != self.b.shape[0]:
            raise ValueError("shape")

    def __call__(self, x):
        return self.w @ x + self.b


class Outer(eqx.Module):
    inner: Lin
    extra: Float[Array, " o"]

    def __init__(self, w):
        self.inner = Lin(w, jnp.zeros(w.shape[0]))
        self.extra = jnp.ones(w.shape[0])


class Model(nnx.Module):
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, din: int, dout: int, rngs: nnx.Rngs):
        self.lin = nnx.Linear(din, dout, rngs=rngs)

    def __call__(self, x):
        return self.lin(x)


def main():
    w = jnp.ones((2, 3))
    show("eqx good", lambda: Lin(w, [0.0, 0.0]).b.tolist())
    show("eqx bad", lambda: Lin(w, [0.0, 0.0, 0.0]))
    show("eqx bad type", lambda: Lin(jnp.ones(3), [0.0]))
    LOG.clear()
    m = Lin(w, [0.0, 0.0])
    f = common.jit(lambda m, x: m(x))
    show("eqx jit", lambda: f(m, jnp.ones(3)).tolist(), count=False)
    show("eqx tree.map", lambda: jax.tree.map(lambda v: v * 2, m).w.tolist(), count=False)
    show("eqx check_init calls", lambda: list(LOG), count=False)
    show("eqx tree_at", lambda: eqx.tree_at(lambda t: t.b, m, jnp.ones(2)).b.tolist(), count=False)
    show("eqx filter_jit", lambda: eqx.filter_jit(lambda m: m.w.sum())(m).tolist(), count=False)
    g = eqx.filter_jit(lambda m: jax.tree.map(lambda v: v + 1, m))
    show("eqx filter_jit returns", lambda: type(g(m)).__name__, count=False)
    show("eqx good after", lambda: Lin(w, [0.0, 0.0]).b.tolist())
    show("eqx bad after", lambda: Lin(w, [0.0, 0.0, 0.0]))
    show("eqx bad type after", lambda: Lin(jnp.ones(3), [0.0]))
    show("eqx outer", lambda: type(jax.tree.map(lambda v: v, Outer(w))).__name__, count=False)
    show("eqx outer after", lambda: Outer(w).inner.name)
    show("eqx outer bad", lambda: Outer(jnp.ones(3)))
    show("eqx partition/combine", lambda: type(eqx.combine(*eqx.partition(m, eqx.is_array))).__name__, count=False)
    show("eqx bound method", lambda: jax.tree.map(lambda v: v, m.__call__)(jnp.ones(3)).tolist(), count=False)
    model = Model(2, 3, rngs=nnx.Rngs(0))
    show("nnx bad", lambda: Model("2", 3, rngs=nnx.Rngs(0)))
    gd, st = nnx.split(model)
    show("nnx merge", lambda: nnx.merge(gd, st)(jnp.ones((1, 2))).shape, count=False)

    @nnx.jit
    def step(model, x):
        return model(x).sum()
    show("nnx jit", lambda: float(step(model, jnp.ones((1, 2)))) == float(step(model, jnp.ones((1, 2)))), count=False)
    show("nnx tree.map state", lambda: type(jax.tree.map(lambda v: v, st)).__name__, count=False)
    show("nnx bad after", lambda: Model("2", 3, rngs=nnx.Rngs(0)))
    show("nnx good after", lambda: type(Model(2, 3, rngs=nnx.Rngs(0))).__name__)

common.main(main)
