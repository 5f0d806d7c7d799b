"""Small helpers for tests: running jitted steps, counting checks, version skips."""

import functools as ft
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
from flax import struct

# At module level, not in `make_early`: jaxtyping resolves string annotations in the
# module's globals, and silently checks nothing when it can't.
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from typecheck_guard._compat import _versions


def run_script(directory: Path, source: str) -> subprocess.CompletedProcess:
    """Run `source` as a script of its own in a fresh Python, in `directory`, with
    this checkout of typecheck_guard importable; its output as text."""
    script = directory / "script.py"
    script.write_text(source)
    env = dict(os.environ, PYTHONPATH=str(Path(typecheck_guard.__file__).parents[1]))
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _too_old(package: str, version: str) -> tuple[bool, str]:
    found = _versions.installed(package)
    too_old = found is not None and _versions.parse(found) < _versions.parse(version)
    return too_old, f"needs {package} >= {version}; found {found}"


def requires(package: str, version: str, why: str) -> Any:
    """Skip a test on releases of `package` older than `version`: for tests of a
    library feature newer than our floor, which the product does not need."""
    import pytest

    too_old, needs = _too_old(package, version)
    return pytest.mark.skipif(too_old, reason=f"{needs} ({why})")


def require(package: str, version: str, why: str) -> None:
    """`requires`, inside a test: for one parametrization of it."""
    import pytest

    too_old, needs = _too_old(package, version)
    if too_old:
        pytest.skip(f"{needs} ({why})")


def older(package: str, version: str) -> bool:
    """Whether the installed `package` is older than `version`: for an assertion
    about a library's own behaviour that changed there."""
    return _too_old(package, version)[0]


def fresh(fn: Any) -> Any:
    """A copy of the function `fn`, for one test's `jax.jit(...)`.

    JAX caches what it traced per Python function, and on JAX 0.10 two classes
    registered with `register_dataclass` (every `make_early` class) have treedefs
    that compare equal when their fields do. A module-level step jitted by two
    tests can then return an instance of the earlier test's class, whose checker
    counts elsewhere (measured: 27 of 300 fresh classes on JAX 0.10.2; none on
    0.12). A copy is a function of its own, and so is its cache entry."""
    import types

    copy = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__qualname__ = fn.__qualname__
    return copy


def run_cached(step: Any, state: Any, n: int = 20) -> Any:
    """Call `step` once (trace and compile), then `n` more times (cache hits)."""
    state = step(state)
    for _ in range(n):
        state = step(state)
    return jax.block_until_ready(state)


class Counter:
    """A counting typechecker usable by name from import hooks
    (`jaxtyping.install_import_hook(..., "helpers.counted_beartype")`)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fn: Any) -> Any:
        import functools as ft

        from beartype import beartype

        checked = beartype(fn)

        @ft.wraps(checked)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return checked(*args, **kwargs)

        return counted


counted_beartype = Counter()


def count_beartype_calls(fn: Any, *args: Any) -> int:
    """How many beartype-generated wrappers ran during `fn(*args)`, for code that
    beartype decorated by itself (`beartype.claw`), where we can't wrap the checker."""
    import sys

    calls = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code.co_filename.startswith("<@beartype("):
            calls += 1

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return calls


def make_early(typecheck: Any) -> Any:
    """A jaxtyped flax.struct with two `Float[Array, " n"]` fields, checked by
    `typecheck`. Made outside `install()` it keeps JAX's own registration, so every
    unflatten calls its checked `__init__` unless `unflatten_safe` skips it."""

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Early:
        x: Float[Array, " n"]
        y: Float[Array, " n"]

    return Early


def make_chex(typecheck: Any) -> Any:
    """A chex dataclass whose `__post_init__` is checked by `typecheck` (chex calls
    it on every unflatten unless the class is adapted)."""
    import chex

    @chex.dataclass
    class C:
        x: jax.Array

        @jaxtyped(typechecker=typecheck)
        def __post_init__(self) -> None:
            pass

    return C


def passthrough(fn: Any) -> Any:
    """A decorator that is not a checker: it calls `fn` and returns what it returns
    (a logging or casting decorator, stripped to its shape)."""

    @ft.wraps(fn)
    def passing(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return passing
