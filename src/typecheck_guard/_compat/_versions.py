"""The versions of the libraries we patch or read from, and the check each part of
typecheck_guard runs when it starts. The same ranges are in `pyproject.toml` and the
README."""

from __future__ import annotations

import re
from typing import Final

from .._errors import UNSUPPORTED_VERSION, Unsupported

# package -> (oldest supported, first unsupported); None for "no upper bound yet".
# Each lower bound is what our code needs, not what our test suite needs: tests that
# need a newer release skip on older ones and say why (`tests/helpers.py`,
# `requires`). `noxfile.py`'s session "oldest" runs the suite with every floor at
# once, on Python 3.10. Why each floor is not lower:
# - jax 0.4.36: the first where `jax.tree_util.register_dataclass` infers its fields
#   from a dataclass and takes `drop_fields` (the signature the adapter patches),
#   and where `jax._src.core.trace_ctx` tells whether JAX is tracing in O(1) (the
#   guards and the runtime guard read it). jaxlib is released in lockstep.
# - jaxtyping 0.2.36: the oldest whose `PyTree` instance check and shape memo
#   (`_compat/_jaxtyping.py`) have the shape the cache reads, and whose `jaxtyped`
#   wrapper the runtime guard recognises. (jaxtyping itself checks nothing on a
#   dataclass whose annotations are strings before 0.3.0, and can't resolve optax's
#   `ArrayTree` forward reference in a `TrainState` subclass before 0.3.3: those
#   are jaxtyping's limits, which we neither fix nor depend on.)
# - flax 0.10.0: the first whose `flax.struct.dataclass` registers through
#   `jax.tree_util.register_dataclass` on our jax floor (so `install()` adapts it),
#   and whose `flax.nnx.jit` the runtime guard wraps. (`flax.nnx.Pytree` is 0.11.1+;
#   only its tests need it.)
# - chex 0.1.87: the oldest whose `chex._src.dataclass` has the registration
#   function, `_flatten_with_path` and `_dataclass_unflatten(dcls, keys, values)`
#   the chex adapter replaces, and that installs with our jax floor.
# - equinox 0.11.5: 0.11.0-0.11.4 fail to import on jax >= 0.4.34
#   (`jax.core.pp_eqn_rules` is gone); the runtime guard wraps `filter_jit`.
# - beartype 0.15.0, typeguard 2.13.3: the oldest checkers we test with (typeguard
#   4.x too; 3.x is untested). They are not checked at `install()`: we only
#   recognise their wrappers, and a user may have either installed without using it.
SUPPORTED: Final[dict[str, tuple[str, str | None]]] = {
    "jax": ("0.4.36", None),
    "jaxtyping": ("0.2.36", None),
    "flax": ("0.10.0", None),
    "chex": ("0.1.87", None),
    "equinox": ("0.11.5", None),
    "beartype": ("0.15.0", None),
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
    # Imported here: `importlib.metadata` costs a few milliseconds, and `install()`
    # checks versions only when a library is imported.
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def problem(package: str, found: str | None = None) -> str | None:
    """What is wrong with the installed `package` (or with version `found`), or
    `None` when it is missing or in range."""
    found = installed(package) if found is None else found
    if found is None:
        return None
    low, high = SUPPORTED[package]
    version = parse(found)
    if version < parse(low) or (high is not None and version >= parse(high)):
        return UNSUPPORTED_VERSION.format(
            package=package, supported=spec(package), found=found
        )
    return None


def check(package: str, found: str | None = None) -> None:
    """Raise `Unsupported` when `package` is installed at an unsupported version.
    Each part of typecheck_guard checks the libraries it relies on itself, when it
    starts."""
    message = problem(package, found)
    if message is not None:
        raise Unsupported(message)
