# New: row-7 cache (`with unflatten_safe():`) -- a cache hit skips the check and with it
# the dimension bindings a class checked by @beartype directly makes in the enclosing
# @jaxtyped function's memo; a later check in that function that should fail passes.
# MODES: block
import common
from common import show
import dataclasses, jax, jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped


@beartype
@struct.dataclass
class B:
    x: Float[Array, "n"]


@beartype
def helper(y: Float[Array, "n"]):
    return y.shape


@jaxtyped(typechecker=beartype)
def f(x, y):
    B(x)  # binds n from x
    return helper(y)  # must agree with n


def main():
    show("first call consistent", lambda: f(jnp.ones(3), jnp.ones(3)))
    show("second call inconsistent", lambda: f(jnp.ones(3), jnp.ones(4)))

common.main(main)
