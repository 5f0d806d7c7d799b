"""Classes whose unflatten runs a typecheck: the seed-000 flax.struct, and a custom
node whose `tree_unflatten` calls its typechecked constructor."""

import dataclasses

import jax
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped


@jaxtyped(typechecker=beartype)
@struct.dataclass
class Node:
    params: PyTree[Float[Array, "..."]]
    name: str = struct.field(pytree_node=False, default="node")


@jax.tree_util.register_pytree_node_class
@jaxtyped(typechecker=beartype)
@dataclasses.dataclass
class CustomArray:
    array: Float[Array, " n"]

    def tree_flatten(self):
        return (self.array,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@struct.dataclass
class Unchecked:
    # No checker on its constructor: nothing to re-run, not listed.
    x: jax.Array


@jaxtyped(typechecker=beartype)
@struct.dataclass
class Derived:
    # Its __post_init__ derives state: install() leaves it to JAX.
    x: Float[Array, " n"]

    def __post_init__(self):
        object.__setattr__(self, "double", self.x * 2)
