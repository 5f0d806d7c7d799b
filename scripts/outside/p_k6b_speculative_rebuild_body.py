# Known family 6 (second half): JAX rebuilds outputs with placeholder leaves while it traces
# and compiles; plain, the check rejects them before the __init__ body runs; with the plugin
# the check is skipped and the body (its side effects) runs.
# MODES: install
import common
from common import show
import jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped

BODY = {"n": 0}


@jax.tree_util.register_pytree_node_class
class C:
    @jaxtyped(typechecker=beartype)
    def __init__(self, x: Float[Array, "n"]):
        BODY["n"] += 1
        self.x = x

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


def main():
    c = C(jnp.ones(2))
    f = jax.jit(lambda c: C(c.x + 1))
    BODY["n"] = 0
    f(c)
    show("__init__ body runs during first jitted call", lambda: BODY["n"], count=False)
    BODY["n"] = 0
    f(c)
    show("__init__ body runs during cached call", lambda: BODY["n"], count=False)

common.main(main)
