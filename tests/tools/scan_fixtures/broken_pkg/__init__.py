from flax import struct


@struct.dataclass
class Fine:
    x: int


value = undefined_name + 1  # noqa: F821  # pyright: ignore[reportUndefinedVariable]
