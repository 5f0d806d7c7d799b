"""The versions of the libraries we patch or read from, and the check that runs at
`install()`. The same ranges are in `pyproject.toml` and the README."""

from __future__ import annotations

import importlib.metadata
import re
from typing import Final

from ._errors import UNSUPPORTED_VERSION

# package -> (oldest supported, first unsupported); None for "no upper bound yet".
SUPPORTED: Final[dict[str, tuple[str, str | None]]] = {
    "jax": ("0.4.36", None),
    "jaxtyping": ("0.2.36", None),
    "flax": ("0.10.0", None),
    "chex": ("0.1.88", None),
    "equinox": ("0.11.10", None),
    "beartype": ("0.19.0", None),
    "typeguard": ("2.13.3", None),
}


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
