"""A class whose jaxtyping annotations can't be resolved: `from __future__ import
annotations` makes them strings, and the names they use are imported inside the
function that defines the class, so jaxtyping checks nothing, silently."""

from __future__ import annotations


def make():
    from beartype import beartype
    from flax import struct
    from jaxtyping import Array, Float, jaxtyped

    @jaxtyped(typechecker=beartype)
    @struct.dataclass
    class Lost:
        x: Float[Array, " n"]

    return Lost


Lost = make()
