"""Classes with a handwritten `@typeguard.typechecked` `__init__` for
`test_typeguard4.py`. typeguard 4 instruments a function by recompiling its source,
so these live in a module file; each factory makes a fresh class, so that a test can
define one after `install()`."""

import jax
from flax import struct
from typeguard import typechecked


def make_struct():
    """A flax.struct dataclass whose own typechecked `__init__` replaces the generated
    one (`dataclasses.dataclass` keeps an `__init__` the class defines)."""

    @struct.dataclass
    class Node:
        x: jax.Array
        scale: float = struct.field(pytree_node=False, default=1.0)

        @typechecked
        def __init__(self, x: jax.Array, scale: float = 1.0):
            object.__setattr__(self, "x", x)
            object.__setattr__(self, "scale", scale)

    return Node


def make_custom():
    """A hand-registered node whose unflatten calls the constructor."""

    @jax.tree_util.register_pytree_node_class
    class Custom:
        @typechecked
        def __init__(self, x: jax.Array, scale: float):
            self.x = x
            self.scale = scale

        def tree_flatten(self):
            return (self.x,), self.scale

        @classmethod
        def tree_unflatten(cls, scale, children):
            (x,) = children
            return cls(x, scale)

    return Custom
