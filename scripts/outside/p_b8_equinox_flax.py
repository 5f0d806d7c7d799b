# Family B8 (library objects): equinox Module with __check_init__, converter fields,
# eqx.field(static=True), nested in a flax.struct; flax.struct .replace; TrainState.create /
# apply_gradients; nnx Module through nnx.jit and nnx.split/merge.  Constructions checked as
# plain (bad ones raise), values identical.
# MODES: install block wrap
import common
from common import show, out, cbeartype
import jax, jax.numpy as jnp
import equinox as eqx
import optax
from jaxtyping import Array, Float, jaxtyped
from flax import struct, nnx
from flax.core import freeze
from flax.training import train_state

CI = {"n": 0}


@jaxtyped(typechecker=cbeartype)
class E(eqx.Module):
    w: Float[Array, " n"] = eqx.field(converter=jnp.asarray)
    k: int = eqx.field(static=True, default=1)

    def __check_init__(self):
        CI["n"] += 1
        if self.k < 0:
            raise ValueError("k<0")


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class Outer:
    e: E
    y: Float[Array, ""]


class TS(train_state.TrainState):
    extra: Float[Array, ""] = struct.field(default_factory=lambda: jnp.zeros(()))


TS = jaxtyped(typechecker=cbeartype)(TS)


class Lin(nnx.Module):
    def __init__(self, rngs):
        self.w = nnx.Param(jnp.ones(2))

    def __call__(self, x):
        return self.w * x


def main():
    e = E([1.0, 2.0])
    show("eqx converter", lambda: e)
    show("eqx bad", lambda: E("no"))
    show("eqx check_init bad", lambda: E([1.0], k=-1))
    o = Outer(e, jnp.zeros(()))
    CI["n"] = 0
    show("outer tree.map", lambda: jax.tree.map(lambda v: v + 1, o))
    show("outer jit", lambda: common.jit(lambda q: q.replace(y=q.y + 1))(o))
    show("outer jit again", lambda: common.jit(lambda q: q.replace(y=q.y + 1))(o))
    out("check_init calls", CI["n"])
    show("outer replace bad", lambda: o.replace(y="no"))
    show("outer replace e bad", lambda: o.replace(e=1))
    show("filter_jit", lambda: eqx.filter_jit(lambda q: q)(o))
    show("eqx tree_at", lambda: eqx.tree_at(lambda q: q.e.w, o, jnp.zeros(2)))
    show("eqx tree_at bad", lambda: eqx.tree_at(lambda q: q.y, o, "no"))
    tx = optax.sgd(0.1)
    ts = TS.create(apply_fn=abs, params=freeze({"a": jnp.ones(2)}), tx=tx)
    show("TrainState create", lambda: ts.params)
    show("TrainState bad extra", lambda: TS.create(apply_fn=abs, params=freeze({"a": jnp.ones(2)}), tx=tx, extra="no"))
    step = common.jit(lambda s: s.apply_gradients(grads=freeze({"a": jnp.ones(2)})))
    show("TrainState step", lambda: step(step(ts)).params)
    m = Lin(nnx.Rngs(0))
    show("nnx jit", lambda: nnx.jit(lambda mm, x: mm(x))(m, jnp.ones(2)))
    g, st = nnx.split(m)
    show("nnx merge", lambda: nnx.merge(g, st)(jnp.ones(2)))


common.main(main)
