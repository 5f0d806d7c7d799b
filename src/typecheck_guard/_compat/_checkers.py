"""Recognising typecheckers: the wrapper layers they put around a function, the code
that runs while they check, and the switches that turn them off. One recogniser for
the whole package: `unflatten_safe` and `install()` peel layers with it, `unadapted()`
and `scan` name them, and the runtime guard and the profiler see checks with it.

A typechecked `__init__` is a stack of wrappers linked by `__wrapped__`
(`functools.wraps`): jaxtyping's `wrapped_fn`, beartype's generated wrapper,
typeguard 2's `wrapper`, and under them the function that does the work. To run an
`__init__` without its check we call the function just below the innermost checker
layer. We only peel checker layers: a foreign layer above a checker (something we
don't know how to skip) makes the function unpeelable, and we say so instead of
guessing.

Each checker is recognised by what it cannot change without a new release, checked
against the installed version where we first read it:

- jaxtyping: functions defined in `jaxtyping._decorator` (jaxtyping recognises its own
  wrapper the same way, `already_wrapped`); its checks run in `jaxtyped`'s nested
  `wrapped_fn_impl`;
- beartype: the `<@beartype(...)` filename of the wrappers it generates; with `BeartypeConf(is_pep557_fields=True)` on a dataclass,
  the `__setattr__` it installs (`check_pep557_dataclass_field`);
- typeguard 2.x: the code objects of `typechecked`'s nested `wrapper` and
  `async_wrapper` (by identity: `functools.wraps` renames the wrapper after the
  function, so a name is no evidence);
- typeguard 4.x: code it instrumented in place, which refers to `TypeCheckMemo`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import CodeType
from typing import Any, Final, NamedTuple

__all__ = [
    "BEARTYPE_PREFIX",
    "INSTRUMENTED",
    "INSTRUMENTED_WHY",
    "CheckerLayers",
    "checker_of",
    "checks_switched_off",
    "nested_code",
    "peel",
    "typeguard2_wrappers",
]

# The filename of every wrapper beartype generates: `<@beartype(module.qualname) at
# 0x...>`.
BEARTYPE_PREFIX: Final = "<@beartype("
_PEP557_MODULE: Final = "beartype._decor._type._pep.decortypepep557"


def nested_code(code: CodeType, name: str) -> CodeType | None:
    """The code object of the function `name` defined (at any depth) inside `code`."""
    for const in code.co_consts:
        if isinstance(const, CodeType):
            if const.co_name == name:
                return const
            found = nested_code(const, name)
            if found is not None:
                return found
    return None


@functools.cache
def typeguard2_wrappers() -> frozenset[CodeType]:
    """The code of typeguard 2.x's `typechecked` wrappers; empty without typeguard 2."""
    typeguard = sys.modules.get("typeguard")
    if typeguard is None:
        import importlib.util

        if importlib.util.find_spec("typeguard") is None:
            return frozenset()
        import typeguard
    typechecked = getattr(typeguard, "typechecked", None)
    code = getattr(typechecked, "__code__", None)
    if code is None or hasattr(typeguard, "TypeCheckMemo"):  # 4.x instruments
        return frozenset()
    found = (nested_code(code, "wrapper"), nested_code(code, "async_wrapper"))
    return frozenset(c for c in found if c is not None)


def _is_pep557_setattr(fn: Any, code: CodeType) -> bool:
    return (
        code.co_name == "check_pep557_dataclass_field"
        and getattr(fn, "__module__", None) == _PEP557_MODULE
    )


def checker_of(fn: Any) -> str | None:
    """Which typechecker produced this one wrapper layer, or `None`.

    **Arguments:**

    - `fn`: any callable.

    **Returns:**

    `"jaxtyping"`, `"beartype"`, `"typeguard"` (2.x wrapper or 4.x instrumented code)
    or `None` when `fn` is not a checker's wrapper.
    """
    # Only what `functools.wraps` can't copy onto a foreign wrapper counts: its code
    # and globals. (beartype's `__beartype_wrapper` mark is in `__dict__`, which
    # `wraps` copies: a logging decorator above `@beartype` would carry it.)
    code = getattr(fn, "__code__", None)
    if not isinstance(code, CodeType):
        return None
    if code.co_filename.startswith(BEARTYPE_PREFIX) or _is_pep557_setattr(fn, code):
        return "beartype"
    globals_ = getattr(fn, "__globals__", None)
    if globals_ is not None and globals_.get("__name__") == "jaxtyping._decorator":
        return "jaxtyping"
    if code in typeguard2_wrappers():
        return "typeguard"
    # typeguard 4 does not wrap: it recompiles the function with calls to
    # `typeguard._functions.check_argument_types` inlined, and the instrumented code
    # refers to its memo class by name.
    if "TypeCheckMemo" in code.co_names:
        return "typeguard"
    return None


def checks_switched_off(fn: Any = None) -> bool:
    """Whether a checker's off-switch is on right now, so that a checked call (of
    `fn`, when given) checks nothing: jaxtyping's `jaxtyping_disable`, or
    `__no_type_check__` set on jaxtyping's wrapper or the function it wraps (its
    wrapper then calls the function directly), or typeguard 4's
    `suppress_type_checks()`. beartype and typeguard 2 decide at decoration time
    only."""
    jaxtyping = sys.modules.get("jaxtyping")
    if jaxtyping is not None and getattr(jaxtyping.config, "jaxtyping_disable", False):
        return True
    suppression = sys.modules.get("typeguard._suppression")
    if getattr(suppression, "type_checks_suppressed", 0):
        return True
    seen = set()
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        if getattr(fn, "__no_type_check__", False):
            return True
        fn = getattr(fn, "__wrapped__", None)
    return False


class CheckerLayers(NamedTuple):
    """What `peel` found on a function."""

    checkers: tuple[str, ...]
    """Checker names, outermost first; empty when the function is unchecked."""
    unchecked: Callable[..., Any] | None
    """The function below the innermost checker layer; `None` when a layer we can't
    skip sits above a checker, or when the function is unchecked."""
    blocker: Any = None
    """The foreign layer that made the function unpeelable, if any, or
    `INSTRUMENTED` for typeguard 4's in-place checks."""


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
    innermost = chain[-1]
    code = getattr(innermost, "__code__", None)
    if isinstance(code, CodeType) and _is_pep557_setattr(innermost, code):
        unchecked = _pep557_unchecked(innermost)
        return CheckerLayers(tuple(checkers), unchecked, None if unchecked else fn)
    # typeguard 4 instruments in place: there is no unchecked function below it. Its
    # only off-switch, `typeguard.suppress_type_checks`, is a process-wide counter:
    # turned on around the call, it would also switch off every check the body makes
    # (a construction nested in it, a helper it calls) and every check other threads
    # make meanwhile. We rejected that: the check stays, as without us.
    return CheckerLayers(tuple(checkers), None, INSTRUMENTED)


class _Instrumented:
    """The `blocker` of a function typeguard 4 instrumented in place."""

    def __repr__(self) -> str:
        return "<instrumented by typeguard 4>"


INSTRUMENTED: Final = _Instrumented()
# Why such a check can't be skipped, as `unadapted()` and `scan` say it.
INSTRUMENTED_WHY: Final = (
    "typeguard 4 checks inside the function itself, and its only off-switch "
    "(typeguard.suppress_type_checks) is process-wide: skipping the check would skip "
    "every check the body makes, and other threads' checks, too"
)


def _pep557_unchecked(fn: Any) -> Callable[..., Any] | None:
    """What beartype's field-checking `__setattr__` does after its check: the
    dataclass's own `__setattr__` if it had one, else `super().__setattr__`. Read
    from its closure, by name; `None` (unpeelable) when those names are gone."""
    code = fn.__code__
    cells = dict(zip(code.co_freevars, fn.__closure__ or (), strict=False))
    try:
        own = cells["datacls_setattr"].cell_contents
        owner = cells["__class__"].cell_contents
    except (KeyError, ValueError):
        return None
    if own is not None:
        return own

    def unchecked(self: Any, name: str, value: Any) -> None:
        super(owner, self).__setattr__(name, value)

    return unchecked
