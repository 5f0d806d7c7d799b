# New: after the class's first unflatten, a call that does not bind raises a different
# error (Python's own TypeError from the guard instead of the checker wrapper's).
# MODES: install
import common
from common import show, cbeartype
import dataclasses, jax, jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped


@jax.tree_util.register_pytree_node_class
class C:
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, x: Float[Array, "n"]):
        self.x = x

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class S:  # __post_init__ that does work: the marked cls(**fields) route
    x: Float[Array, "n"]

    def __post_init__(self):
        object.__setattr__(self, "x", self.x * 1)


def calls(K):
    show(f"{K.__name__} missing", lambda: K())
    show(f"{K.__name__} extra kw", lambda: K(jnp.ones(2), bogus=1))
    show(f"{K.__name__} too many", lambda: K(jnp.ones(2), 1, 2))
    show(f"{K.__name__} dup", lambda: K(jnp.ones(2), x=jnp.ones(2)))


def main():
    for K in (C, S):
        calls(K)
        jax.tree.map(lambda v: v, K(jnp.ones(2)))  # first unflatten
        calls(K)

common.main(main)
