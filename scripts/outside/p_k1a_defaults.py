# Known family 1: the guard re-binds the call (omitted defaults are passed).
# MODES: install
import common
from common import show, cbeartype
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped


@jax.tree_util.register_pytree_node_class
class P:
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, a: Float[Array, "n"], b: Float[Array, "n"] = None, scale: float = 1):
        self.a, self.b, self.scale = a, b, scale

    def tree_flatten(self):
        return (self.a,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


def main():
    show("construct before", lambda: P(jnp.ones(3)).scale)
    f = common.jit(lambda p: P(p.a * 2))
    show("jit", lambda: f(P(jnp.ones(3))))
    show("construct after", lambda: P(jnp.ones(3)).scale)
    show("construct after kw", lambda: P(a=jnp.ones(3)).scale)

common.main(main)
