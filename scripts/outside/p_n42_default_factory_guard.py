# Family 1 variant: dataclass fields with default_factory (the generated __init__'s default is
# dataclasses' _HAS_DEFAULT_FACTORY sentinel) on the guarded route, after the first unflatten.
# MODES: install
import common
from common import show, cbeartype
import dataclasses, jax, jax.numpy as jnp, chex
from flax import struct
from jaxtyping import Array, Float, jaxtyped

N = {"f": 0}


def fac():
    N["f"] += 1
    return jnp.zeros(2)


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class S:
    x: Float[Array, "n"]
    y: Float[Array, "n"] = struct.field(default_factory=fac)
    meta: dict = struct.field(pytree_node=False, default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "x", self.x * 1)


@jax.tree_util.register_pytree_node_class
@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class D:
    x: Float[Array, "n"]
    y: Float[Array, "n"] = dataclasses.field(default_factory=fac)

    def tree_flatten(self):
        return (self.x, self.y), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


def main():
    for K in (S, D):
        n = K.__name__
        show(f"{n} before", lambda: (K(jnp.ones(2)).y.tolist(), N["f"]))
        show(f"{n} unflatten", lambda: type(jax.tree.map(lambda v: v, K(jnp.ones(2)))).__name__, count=False)
        show(f"{n} after", lambda: (K(jnp.ones(2)).y.tolist(), N["f"]))
        show(f"{n} after meta is fresh", lambda: (K(jnp.ones(2)).meta is not K(jnp.ones(2)).meta) if K is S else "-")

common.main(main)
