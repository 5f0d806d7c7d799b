# Known family 1: signature read through __wrapped__ (chex.dataclass + @jaxtyped + __post_init__ doing work).
# MODES: install
import common
from common import show, cbeartype
import dataclasses, jax, jax.numpy as jnp, chex
from jaxtyping import Array, Float, jaxtyped


@jaxtyped(typechecker=cbeartype)
@chex.dataclass
class C:
    x: Float[Array, "n"]
    y: Float[Array, "n"]

    def __post_init__(self):
        self.y = self.y + 0


def main():
    show("construct", lambda: C(x=jnp.ones(2), y=jnp.ones(2)))
    show("jit", lambda: common.jit(lambda c: c)(C(x=jnp.ones(2), y=jnp.ones(2))))
    show("construct after", lambda: C(x=jnp.ones(2), y=jnp.ones(2)))
    c = C(x=jnp.ones(2), y=jnp.ones(2))
    show("replace", lambda: c.replace(y=jnp.zeros(2)))
    show("dataclasses.replace", lambda: dataclasses.replace(c, y=jnp.zeros(2)))
    show("bad after", lambda: C(x=jnp.ones(2), y=jnp.ones(3)))

common.main(main)
