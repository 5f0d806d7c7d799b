# Known family 2: the mark outlives its construction (object.__new__ unflatten, chex route);
# a construction of the same class inside __post_init__ during the unflatten is then skipped.
# MODES: install
import common
from common import show, cbeartype
import dataclasses, jax, jax.numpy as jnp, chex
from jaxtyping import Array, Float, jaxtyped

LOG = []


@jax.tree_util.register_pytree_node_class
@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class N:
    x: Float[Array, "n"]
    make_bad: bool = False

    def __post_init__(self):
        if self.make_bad:
            try:
                N(jnp.ones((2, 2)))  # bad: must be checked
                LOG.append("nested bad: passed")
            except Exception as e:
                LOG.append("nested bad: " + type(e).__name__)

    def tree_flatten(self):
        return (self.x,), self.make_bad

    @classmethod
    def tree_unflatten(cls, aux, ch):
        obj = object.__new__(cls)
        obj.x = ch[0]
        obj.make_bad = aux
        obj.__post_init__()
        return obj


@jaxtyped(typechecker=cbeartype)
@chex.dataclass
class K:
    x: Float[Array, "n"]
    make_bad: bool = dataclasses.field(default=False)

    def __post_init__(self):
        if self.make_bad:
            try:
                K(x=jnp.ones((2, 2)))
                LOG.append("chex nested bad: passed")
            except Exception as e:
                LOG.append("chex nested bad: " + type(e).__name__)


def main():
    n = N(jnp.ones(2), True)
    LOG.clear()
    show("custom unflatten", lambda: jax.tree.map(lambda v: v, n).x)
    show("log", lambda: list(LOG))
    k = K(x=jnp.ones(2), make_bad=True)
    LOG.clear()
    show("chex unflatten", lambda: jax.tree.map(lambda v: v, k).x)
    show("log", lambda: list(LOG))

common.main(main)
