"""Fixtures shared by the suite.

`typecheck` runs a test once per checker we support (jaxtyping's own test suite
does the same): it hands out a typechecker that counts every check it performs, so
tests assert "how many checks ran", never how long anything took.
"""

import functools as ft
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest


class Checker:
    """A real typechecker (beartype or typeguard) that counts the checks it runs."""

    def __init__(
        self, name: str, decorate: Callable[[Any], Any], errors: tuple[type, ...]
    ):
        self.name = name
        self._decorate = decorate
        self.errors = errors
        self.calls = 0

    def __call__(self, fn: Any) -> Any:
        checked = self._decorate(fn)

        @ft.wraps(checked)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return checked(*args, **kwargs)

        return counted

    def reset(self) -> None:
        self.calls = 0

    def __repr__(self) -> str:
        return f"Checker({self.name})"


def _beartype() -> Checker:
    import beartype
    import beartype.roar
    import jaxtyping

    return Checker(
        "beartype",
        beartype.beartype,
        (jaxtyping.TypeCheckError, beartype.roar.BeartypeException),
    )


def _typeguard() -> Checker:
    import jaxtyping
    import typeguard

    if not typeguard.__dict__.get("typechecked"):
        pytest.skip("typeguard not installed")
    version = getattr(typeguard, "__version__", None)
    errors: tuple[type, ...] = (jaxtyping.TypeCheckError, TypeError)
    if hasattr(typeguard, "TypeCheckError"):  # 4.x
        errors += (typeguard.TypeCheckError,)  # pyright: ignore[reportAttributeAccessIssue]
    del version
    return Checker("typeguard", typeguard.typechecked, errors)


CHECKERS = {"beartype": _beartype, "typeguard": _typeguard}


@pytest.fixture(params=sorted(CHECKERS))
def typecheck(request: pytest.FixtureRequest) -> Checker:
    """A counting typechecker; the test runs once with each checker."""
    return CHECKERS[request.param]()


@pytest.fixture
def installed() -> Iterator[None]:
    """`typecheck_guard.install()` for the duration of one test."""
    import typecheck_guard

    with warnings.catch_warnings():
        # Classes left in JAX's registry by earlier tests are reported on install().
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    yield
    typecheck_guard.uninstall()


@pytest.fixture(autouse=True)
def _restore_typecheck_guard() -> Iterator[None]:
    # No test leaks patches or guards into the next one.
    yield
    import typecheck_guard

    typecheck_guard.uninstall()
    watch = sys.modules.get("typecheck_guard._guard._watch")
    if watch is not None:  # the level a test left to JAX's own threads
        watch._lent = None
