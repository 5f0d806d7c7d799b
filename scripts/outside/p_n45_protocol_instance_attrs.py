# New candidate: a runtime_checkable Protocol of methods is satisfied by INSTANCE attributes,
# so its verdict is not decided by the leaf's type (row-7 cache in `with unflatten_safe():`,
# and the PyTree cache on with install()).
# MODES: block install
import common
from common import show
from typing import Protocol, runtime_checkable
import jax, jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped


@runtime_checkable
class Closeable(Protocol):
    def close(self) -> None: ...


class Thing:
    pass


@jaxtyped(typechecker=beartype)
@struct.dataclass
class S:
    x: Float[Array, "n"]
    res: Closeable


@jaxtyped(typechecker=beartype)
def takes(t: PyTree[Closeable]):
    return "ok"


def main():
    a = Thing()
    a.close = lambda: None
    b = Thing()
    show("isinstance a, b", lambda: (isinstance(a, Closeable), isinstance(b, Closeable)), count=False)
    show("S(a)", lambda: type(S(jnp.ones(2), a)).__name__)
    show("S(b) must fail", lambda: type(S(jnp.ones(2), b)).__name__)
    show("takes([a])", lambda: takes([a]))
    show("takes([b]) must fail", lambda: takes([b]))
    show("isinstance PyTree a", lambda: isinstance([a], PyTree[Closeable]), count=False)
    show("isinstance PyTree b", lambda: isinstance([b], PyTree[Closeable]), count=False)

common.main(main)
