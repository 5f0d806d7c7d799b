"""What covers each registered class that still runs a typecheck on unflatten:
would `install()` adapt it, does `unflatten_safe` cover it, the one fix to write, and
the checks that were asked for but check nothing. `typecheck-guard scan` prints
these findings, and the profiler's report quotes them for each constructor site."""

from __future__ import annotations

from typing import Any, NamedTuple

from ._unadapted import UnadaptedClass

__all__ = ["Finding", "SilentCheck", "finding", "under_jaxtyping"]


class Finding(NamedTuple):
    """One class whose unflatten runs a typecheck."""

    name: str
    module: str
    registration: str
    checkers: tuple[str, ...]
    checked: tuple[str, ...]
    reason: str
    install_covers: bool
    """Would `install()` adapt it, were it defined after `install()`?"""
    unflatten_safe_covers: bool
    fix: str


class SilentCheck(NamedTuple):
    """A typecheck that was asked for but checks nothing."""

    target: str
    message: str
    kind: str = "typeguard4"
    """`"typeguard4"` (typeguard 4.x under `jaxtyped`) or `"unresolved"` (string
    annotations jaxtyping could not resolve)."""


def _covered(record: UnadaptedClass) -> bool:
    """Whether its check can be skipped at all: every checked hook peels (no
    decorator that is not a typechecker above a check). Then `install()` covers it
    when it is defined after `install()`, and `unflatten_safe` covers it now."""
    from .._compat._checkers import INSTRUMENTED_WHY

    return (
        "not a typechecker" not in record.reason
        and INSTRUMENTED_WHY not in record.reason
    )


def _cells(fn: Any) -> dict[str, Any]:
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or closure is None:
        return {}
    out = {}
    for name, cell in zip(code.co_freevars, closure, strict=False):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        # As jaxtyping made it: a stand-in the runtime guard put in a cell (for
        # jaxtyping's stubs) names what it stands for.
        out[name] = getattr(value, "__typecheck_guard_original__", value)
    return out


def under_jaxtyping(fn: Any) -> tuple[str, bool] | None:
    """The typechecker inside jaxtyping's wrapper of `fn`, and whether it actually
    wrapped the function jaxtyping checks with; `None` when we can't tell.

    jaxtyping does not chain its checker through `__wrapped__`: `wrapped_fn` calls a
    `param_fn` it generated and passed to the checker
    (`jaxtyping/_decorator.py`, `_apply_typechecker`). We read both from the
    closures. A checker that returned `param_fn` untouched checks nothing: that is
    typeguard 4.x, which can't find the source of generated code.
    """
    from .._compat._checkers import checker_of

    layer, seen = fn, set()
    while layer is not None and id(layer) not in seen:
        seen.add(id(layer))
        if checker_of(layer) == "jaxtyping":
            break
        layer = getattr(layer, "__wrapped__", None)
    else:
        return None
    if layer is None:
        return None
    impl = _cells(layer).get("wrapped_fn_impl")
    inner = _cells(impl)
    if "wrapped_fn_impl" not in _cells(layer) and "typechecker" in _cells(layer):
        # jaxtyping < 0.3's dataclass `__init__`: it decorates a function generated
        # on each call with the checker (`_check_dataclass_annotations`).
        inner = {**_cells(layer), "param_fn": None}
    if "typechecker" not in inner or "param_fn" not in inner:
        return None
    typechecker = inner["typechecker"]
    if typechecker is None:
        return None
    if isinstance(typechecker, str):
        name = typechecker.split(".")[0]
    else:
        name = (getattr(typechecker, "__module__", None) or "?").split(".")[0]
    param_fn = inner["param_fn"]
    instrumented = (
        param_fn is None
        or checker_of(param_fn) is not None
        or hasattr(param_fn, "__wrapped__")
    )
    return name, instrumented


def _checkers_shown(record: UnadaptedClass) -> tuple[tuple[str, ...], list[str]]:
    """The checkers to show (jaxtyping's own named with the checker inside it), and
    the methods whose checker checks nothing."""
    shown: list[str] = []
    silent: list[str] = []
    for name in record.checked:
        inside = under_jaxtyping(getattr(record.cls, name))
        for checker in record.checkers:
            label = checker
            if checker == "jaxtyping" and inside is not None:
                label = f"jaxtyping({inside[0]})"
                if not inside[1]:
                    silent.append(name)
            if label not in shown:
                shown.append(label)
    return tuple(shown), silent


def _unresolved(method: Any) -> list[str]:
    """The string annotations of `method` that name something its module's globals
    don't have.

    jaxtyping resolves string annotations (`from __future__ import annotations`) in
    the function's `__globals__` and, when a name is missing, leaves the annotation
    a string, which the checker then skips without a word: typically the names were
    imported inside the function that defines the class.
    """
    fn = method
    while getattr(fn, "__wrapped__", None) is not None:
        fn = fn.__wrapped__
    namespace = getattr(fn, "__globals__", None)
    if namespace is None:
        return []
    out = []
    for param, annotation in getattr(fn, "__annotations__", {}).items():
        if not isinstance(annotation, str):
            continue
        try:
            eval(annotation, dict(namespace))
        except NameError:
            out.append(f"{param}: {annotation}")
        except Exception:
            pass  # not a name problem: the checker reports it itself
    return out


def finding(record: UnadaptedClass) -> tuple[Finding, list[SilentCheck]]:
    by_install = by_safe = _covered(record)
    checkers, silent = _checkers_shown(record)
    qualname = f"{record.cls.__module__}.{record.cls.__qualname__}"
    found = Finding(
        record.cls.__qualname__,
        record.cls.__module__,
        record.registration,
        checkers,
        record.checked,
        record.reason,
        by_install,
        by_safe,
        record.fix,
    )
    unresolved = []
    for name in record.checked:
        if "jaxtyping" not in record.checkers:
            continue
        lost = _unresolved(getattr(record.cls, name))
        if lost:
            unresolved.append(
                SilentCheck(
                    f"{qualname}.{name}",
                    f"jaxtyping can't resolve {'; '.join(lost)} in module "
                    f"{record.cls.__module__!r}, so these are not checked; import "
                    "the names they use at module level",
                    "unresolved",
                )
            )
    # A checker that found nothing it could resolve leaves jaxtyping's function
    # unwrapped too: that is the unresolved names, not typeguard 4.
    explained = {s.target for s in unresolved}
    return found, [
        SilentCheck(
            f"{qualname}.{name}",
            f"jaxtyped's checker did not wrap the function it checks, so "
            f"{qualname}.{name} checks nothing (and still runs on every unflatten)",
        )
        for name in silent
        if f"{qualname}.{name}" not in explained
    ] + unresolved
