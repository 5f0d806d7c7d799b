# New: row-7 cache inside `with unflatten_safe():` -- checks whose result depends on
# something outside the key: the enclosing @jaxtyped memo (class checked by @beartype
# directly), a value-dependent __instancecheck__, a check that reads global config.
# MODES: block install
import common
from common import show
import dataclasses
import jax, jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped


@beartype
@struct.dataclass
class B:  # dimensions bind in the caller's memo
    x: Float[Array, "n"]


class PosMeta(type):
    def __instancecheck__(cls, x):
        return isinstance(x, jax.Array) and bool((x > 0).all())


class Positive(metaclass=PosMeta):
    pass


@jaxtyped(typechecker=beartype)
@struct.dataclass
class P:
    x: Positive


LIMIT = {"n": 3}


class SmallMeta(type):
    def __instancecheck__(cls, x):
        return isinstance(x, jax.Array) and x.shape[0] <= LIMIT["n"]


class Small(metaclass=SmallMeta):
    pass


@jaxtyped(typechecker=beartype)
@struct.dataclass
class Q:
    x: Small


@jaxtyped(typechecker=beartype)
def f(a: Float[Array, "n"]):
    return B(jnp.ones(3)).x.shape  # n from a


@jaxtyped(typechecker=beartype)
def g(a: Float[Array, "n"]) -> Float[Array, "n"]:
    b = B(a)  # binds nothing new
    return b.x


def main():
    show("f n=3", lambda: f(jnp.ones(3)))
    show("f n=4 (B(ones3) inconsistent)", lambda: f(jnp.ones(4)))
    show("P pos", lambda: P(jnp.ones(2)).x.tolist())
    show("P neg", lambda: P(-jnp.ones(2)).x.tolist())
    show("Q ok", lambda: Q(jnp.ones(3)).x.tolist())
    LIMIT["n"] = 2
    show("Q after limit change", lambda: Q(jnp.ones(3)).x.tolist())

common.main(main)
