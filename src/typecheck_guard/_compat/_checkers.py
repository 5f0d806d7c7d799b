"""Recognising the wrapper layers that runtime typecheckers put around a function.

A typechecked `__init__` is a stack of wrappers linked by `__wrapped__`
(`functools.wraps`): jaxtyping's `wrapped_fn`, beartype's generated wrapper,
typeguard 2's `wrapper`, and under them the function that does the work. To run an
`__init__` without its check we call the function just below the innermost checker
layer. We only peel checker layers: a foreign layer above a checker (something we
don't know how to skip) makes the function unpeelable, and we say so instead of
guessing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["CheckerLayers", "checker_of", "peel"]


def checker_of(fn: Any) -> str | None:
    """Which typechecker produced this one wrapper layer, or `None`.

    **Arguments:**

    - `fn`: any callable.

    **Returns:**

    `"jaxtyping"`, `"beartype"`, `"typeguard"` (2.x wrapper or 4.x instrumented code)
    or `None` when `fn` is not a checker's wrapper.
    """
    if getattr(fn, "__beartype_wrapper", False):
        return "beartype"
    globals_ = getattr(fn, "__globals__", None)
    if globals_ is not None:
        module = globals_.get("__name__")
        # jaxtyping recognises its own wrapper the same way
        # (`jaxtyping/_decorator.py`, `already_wrapped`).
        if module == "jaxtyping._decorator":
            return "jaxtyping"
        if module == "typeguard" and getattr(fn, "__name__", None) == "wrapper":
            return "typeguard"
    code = getattr(fn, "__code__", None)
    # typeguard 4 does not wrap: it recompiles the function with calls to
    # `typeguard._functions.check_argument_types` inlined, and the instrumented code
    # refers to its memo class by name.
    if code is not None and "TypeCheckMemo" in code.co_names:
        return "typeguard"
    return None


class CheckerLayers(NamedTuple):
    """What `peel` found on a function."""

    checkers: tuple[str, ...]
    """Checker names, outermost first; empty when the function is unchecked."""
    unchecked: Callable[..., Any] | None
    """The function below the innermost checker layer; `None` when a layer we can't
    skip sits above a checker, or when the function is unchecked."""
    blocker: Any = None
    """The foreign layer that made the function unpeelable, if any."""


def peel(fn: Any) -> CheckerLayers:
    """Walk `fn`'s `__wrapped__` chain and find its checker layers."""
    checkers: list[str] = []
    layer = fn
    # Index (in the chain) of the first layer below the innermost checker.
    below_innermost_checker = None
    chain = []
    seen = set()
    while layer is not None and id(layer) not in seen:
        seen.add(id(layer))
        chain.append(layer)
        name = checker_of(layer)
        if name is not None:
            checkers.append(name)
            below_innermost_checker = len(chain)
        layer = getattr(layer, "__wrapped__", None)
    if not checkers:
        return CheckerLayers((), None)
    assert below_innermost_checker is not None
    for outer in chain[: below_innermost_checker - 1]:
        if checker_of(outer) is None:
            return CheckerLayers(tuple(checkers), None, outer)
    if below_innermost_checker < len(chain):
        return CheckerLayers(tuple(checkers), chain[below_innermost_checker])
    # typeguard 4 instruments in place: there is no unchecked function below it, so we
    # run the instrumented function with typeguard's own switch turned off.
    return CheckerLayers(tuple(checkers), _typeguard4_suppressed(chain[-1]))


def _typeguard4_suppressed(fn: Callable[..., Any]) -> Callable[..., Any]:
    # `typeguard.suppress_type_checks` is a process-wide counter (typeguard 4 has no
    # per-thread switch), so for the microseconds this call lasts, instrumented code
    # in other threads is not checked either. We accept that for typeguard 4 only;
    # jaxtyping, beartype and typeguard 2 are skipped per call, with no global state.
    from typeguard import suppress_type_checks  # pyright: ignore  (typeguard>=4)

    def unchecked(*args: Any, **kwargs: Any) -> Any:
        with suppress_type_checks():
            return fn(*args, **kwargs)

    return unchecked
