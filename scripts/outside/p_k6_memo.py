# Known family 6: a skipped check also skips its side effects (jaxtyping's dimension memo).
# MODES: install
import common
from common import show
import dataclasses, jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped


@jax.tree_util.register_pytree_node_class
@beartype
@dataclasses.dataclass
class B:
    x: Float[Array, "n"]

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


@jaxtyped(typechecker=beartype)
def g(b: B):
    b2 = jax.tree.map(lambda v: v, b)  # plain: rebuild binds n inside g's memo
    B(jnp.ones(5))  # inconsistent n: plain raises
    return "ok"


def main():
    show("g", lambda: g(B(jnp.ones(3))))

common.main(main)
