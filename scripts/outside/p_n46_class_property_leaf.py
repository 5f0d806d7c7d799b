# New candidate: isinstance() consults obj.__class__ (a property here, as in proxies / mocks),
# so a plain-class annotation's verdict is not decided by type(leaf) -- row-7 cache (block) and
# the PyTree cache (install).
# MODES: block install
import common
from common import show
import jax, jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped


class Target:
    pass


class Other:
    pass


class Proxy:
    def __init__(self, as_):
        self._as = as_

    @property
    def __class__(self):
        return self._as


@jaxtyped(typechecker=beartype)
@struct.dataclass
class S:
    x: Float[Array, "n"]
    t: Target


@jaxtyped(typechecker=beartype)
def takes(t: PyTree[Target]):
    return "ok"


def main():
    a, b = Proxy(Target), Proxy(Other)
    show("isinstance a, b", lambda: (isinstance(a, Target), isinstance(b, Target)), count=False)
    show("S(a)", lambda: type(S(jnp.ones(2), a)).__name__)
    show("S(b) must fail", lambda: type(S(jnp.ones(2), b)).__name__)
    show("takes([a])", lambda: takes([a]))
    show("takes([b]) must fail", lambda: takes([b]))
    show("isinstance PyTree a, b", lambda: (isinstance([a], PyTree[Target]), isinstance([b], PyTree[Target])), count=False)

common.main(main)
