import dataclasses

import equinox as eqx
import jax
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped

import typecheck_guard


@jaxtyped(typechecker=beartype)
class Model(eqx.Module):
    # Equinox unflattens with object.__new__.
    weight: Float[Array, "o i"]


@jaxtyped(typechecker=beartype)
@struct.dataclass
class Node:
    # Defined after install(): adapted.
    params: PyTree[Float[Array, "..."]]


@typecheck_guard.register_dataclass
@jaxtyped(typechecker=beartype)
@dataclasses.dataclass
class State:
    x: Float[Array, " n"]


@jax.tree_util.register_pytree_node_class
@jaxtyped(typechecker=beartype)
@dataclasses.dataclass
class NewBased:
    array: Float[Array, " n"]

    def tree_flatten(self):
        return (self.array,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.array = children[0]
        return obj
