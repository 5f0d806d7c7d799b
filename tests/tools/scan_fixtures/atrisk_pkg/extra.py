"""Not imported by the package's `__init__`: only `scan -r` finds it."""

import jax
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped


class Pair:
    @jaxtyped(typechecker=beartype)
    def __init__(self, a: Float[Array, ""], b: Float[Array, ""]):
        self.a = a
        self.b = b


jax.tree_util.register_pytree_node(
    Pair, lambda p: ((p.a, p.b), None), lambda aux, ch: Pair(*ch)
)
