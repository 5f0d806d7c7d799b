"""jaxtyped with typeguard's decorator: under typeguard 4.x this checks nothing."""

import typeguard
from flax import struct
from jaxtyping import Array, Float, jaxtyped


@jaxtyped(typechecker=typeguard.typechecked)
@struct.dataclass
class Silent:
    x: Float[Array, " n"]
