"""The versions of the libraries we patch or read from, and the check that runs at
`install()`. The same ranges are in `pyproject.toml` and the README."""

from __future__ import annotations

import importlib.metadata
import re
from typing import Final

from ._errors import UNSUPPORTED_VERSION

# package -> (oldest supported, first unsupported); None for "no upper bound yet".
# Each lower bound is the oldest release on which the whole test suite passes on
# Python 3.11 (`noxfile.py`, session "oldest"); the reason it is not older:
# - jax 0.6.0: the oldest jax that flax 0.11.1 (below) and equinox 0.12.0 accept.
#   (jax 0.4.36 is where `register_dataclass` infers fields and `core.trace_ctx`
#   appears, both of which we need.)
# - jaxtyping 0.3.3: 0.3.0-0.3.2 can't resolve the forward reference `ArrayTree` in
#   a typechecked `TrainState` subclass, and 0.2.x silently skips the check of a
#   dataclass whose annotations are strings (`from __future__ import annotations`).
# - flax 0.11.1: the first with `flax.nnx.Pytree`.
# - equinox 0.12.0: 0.11.x breaks on jax 0.6 (`jax.core.Primitive` is gone).
# - chex 0.1.90: 0.1.89 and older use `jax.util.unzip2`, deprecated in jax 0.6.
# - beartype 0.15.0, typeguard 2.13.3: the checkers we test with (typeguard 4.x
#   too; 3.x is untested). They are not checked at `install()`: we only recognise
#   their wrappers, and a user may have either installed without using it.
SUPPORTED: Final[dict[str, tuple[str, str | None]]] = {
    "jax": ("0.6.0", None),
    "jaxtyping": ("0.3.3", None),
    "flax": ("0.11.1", None),
    "chex": ("0.1.90", None),
    "equinox": ("0.12.0", None),
    "beartype": ("0.15.0", None),
    "typeguard": ("2.13.3", None),
}

# The libraries whose code we patch or whose behaviour we rely on; `install()`
# refuses to run with any of them outside its range.
CHECKED_AT_INSTALL: Final = ("jax", "jaxtyping", "flax", "chex", "equinox")


def parse(version: str) -> tuple[int, ...]:
    """`"0.4.36.dev1+g1"` -> `(0, 4, 36)`: the leading numeric release segment."""
    parts = []
    for piece in version.split("."):
        match = re.match(r"\d+", piece)
        if match is None:
            break
        parts.append(int(match.group()))
        if match.end() != len(piece):
            break
    return tuple(parts)


def spec(package: str) -> str:
    low, high = SUPPORTED[package]
    return f">={low}" + (f",<{high}" if high else "")


def installed(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def check(package: str, found: str | None = None) -> None:
    """Raise `RuntimeError` when `package` is installed at an unsupported version."""
    found = installed(package) if found is None else found
    if found is None:
        return
    low, high = SUPPORTED[package]
    version = parse(found)
    if version < parse(low) or (high is not None and version >= parse(high)):
        raise RuntimeError(
            UNSUPPORTED_VERSION.format(
                package=package, supported=spec(package), found=found
            )
        )


def check_all() -> None:
    """`check` every library in `CHECKED_AT_INSTALL` that is installed. Reads package
    metadata only: nothing is imported."""
    __tracebackhide__ = True
    for package in CHECKED_AT_INSTALL:
        check(package)
