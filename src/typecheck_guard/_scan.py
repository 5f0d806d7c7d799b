"""`typecheck-guard scan`: import the user's modules, then list every registered
pytree class whose unflatten would run a typecheck, and every checker configuration
that silently checks nothing.

The listing is `_inspect.at_risk()` over JAX's registry after the imports, so it
also shows third-party classes the user's modules pulled in. We never call
`install()` here: a scan reports the program as it runs, and a package that calls
`install()` itself before defining its classes comes out clean.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import re
import sys
import traceback
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

from ._inspect import UnadaptedClass, at_risk

__all__ = ["Finding", "ScanError", "ScanReport", "SilentCheck", "scan"]


class ScanError(Exception):
    """A module could not be imported; the message is one line."""

    def __init__(self, message: str, module: str = ""):
        super().__init__(message)
        self.module = module


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


class ScanReport(NamedTuple):
    modules: tuple[str, ...]
    registered: int
    findings: tuple[Finding, ...]
    silent: tuple[SilentCheck, ...]
    import_errors: tuple[ScanError, ...] = ()
    """The modules that could not be imported, one `ScanError` each: the others
    were still imported and scanned."""

    @property
    def exit_code(self) -> int:
        if self.import_errors:
            return 2
        return 1 if self.findings or self.silent else 0

    @property
    def imported(self) -> tuple[str, ...]:
        """The modules given that were imported."""
        failed = {e.module for e in self.import_errors}
        return tuple(m for m in self.modules if m not in failed)


def _where(e: BaseException) -> str:
    if isinstance(e, SyntaxError) and e.filename:
        return f" ({_short(e.filename)}:{e.lineno})"
    frames = [
        f
        for f in traceback.extract_tb(e.__traceback__)
        if not f.filename.startswith("<frozen")
    ]
    if frames:
        return f" ({_short(frames[-1].filename)}:{frames[-1].lineno})"
    return ""


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _import(name: str) -> Any:
    if name.endswith(".py") or os.sep in name:
        raise ScanError(
            f"{name!r} looks like a path; scan takes module names, e.g. "
            f"'{name.removesuffix('.py').strip('./').replace(os.sep, '.')}'",
            name,
        )
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name is not None and (name == e.name or name.startswith(e.name + ".")):
            raise ScanError(
                f"no module named {e.name!r} (searched sys.path from {os.getcwd()}): "
                "check the spelling, run from your project's root, or pip install it",
                name,
            ) from None
        raise ScanError(_failed(name, e), name) from None
    except (Exception, SystemExit) as e:
        raise ScanError(_failed(name, e), name) from None


def _failed(name: str, e: BaseException) -> str:
    return (
        f"importing {name!r} raised {type(e).__name__}: {_one_line(str(e))}{_where(e)}"
    )


def _submodules(module: Any, errors: list[ScanError]) -> list[str]:
    path = getattr(module, "__path__", None)
    if path is None:
        return []

    def onerror(name: str) -> None:
        # walk_packages imports subpackages to look inside them; report the failure
        # the way a failed import of a named module is reported, and walk on.
        e = sys.exc_info()[1]
        errors.append(
            ScanError(_failed(name, e) if e else f"importing {name!r} failed", name)
        )

    return [
        info.name
        for info in pkgutil.walk_packages(
            path, prefix=module.__name__ + ".", onerror=onerror
        )
    ]


def _instrumentation_warning() -> type[Warning] | None:
    if "typeguard" not in sys.modules and importlib.util.find_spec("typeguard") is None:
        return None
    try:
        import typeguard
    except Exception:  # noqa: BLE001 - a broken typeguard is not ours to report
        return None
    return getattr(typeguard, "InstrumentationWarning", None)


_NOT_CHECKING = re.compile(r"not typechecking (?P<target>\S+)")


def import_all(
    names: Sequence[str],
    recursive: bool = False,
    errors: list[ScanError] | None = None,
) -> list[SilentCheck]:
    """Import `names` (and, with `recursive`, every submodule of the packages among
    them); return the checks typeguard 4 said it would not run.

    A module that can't be imported raises `ScanError`, or, when `errors` is a list,
    is appended to it and the other modules are still imported: one missing optional
    dependency should not hide what the rest of a package registers.
    """
    failed: list[ScanError] = []
    instrumentation = _instrumentation_warning()
    if "" not in sys.path and os.getcwd() not in sys.path:
        # What `python -m` does: the user's modules are found from where they are.
        sys.path.insert(0, os.getcwd())
    with warnings.catch_warnings(record=True) as caught:
        if instrumentation is not None:
            # typeguard 4 can't instrument code that has no source file, which is
            # what jaxtyping generates: it warns once and leaves the function
            # unchecked (typeguard/_decorators.py, `instrument`).
            warnings.simplefilter("always", instrumentation)
        pending = list(names)
        while pending:
            name = pending.pop(0)
            try:
                module = _import(name)
            except ScanError as e:
                failed.append(e)
            else:
                if recursive and name in names:
                    pending += _submodules(module, failed)
            if failed and errors is None:
                raise failed[0]
    if errors is not None:
        errors += failed
    silent: dict[str, SilentCheck] = {}
    for w in caught:
        if instrumentation is not None and issubclass(w.category, instrumentation):
            text = _one_line(str(w.message))
            match = _NOT_CHECKING.search(text)
            target = match.group("target") if match else f"{w.filename}:{w.lineno}"
            silent.setdefault(target, SilentCheck(target, text))
        else:
            # Everything else is the user's business: show it as Python would have.
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return list(silent.values())


def _install_would_adapt(record: UnadaptedClass) -> bool:
    """Whether `install()` would adapt this class, were it defined after it: the
    rule `install()` itself follows (`_adaptable.py`), on the class as it is
    registered now."""
    from ._adaptable import would_refuse
    from ._jaxcompat import registry
    from ._routes import refused_why

    cls = record.cls
    if refused_why(cls) is not None:
        return False
    return would_refuse(cls, registry().get(cls)) is None


def _unflatten_safe_covers(record: UnadaptedClass) -> bool:
    from ._checkers import peel

    return all(
        peel(getattr(record.cls, name)).unchecked is not None for name in record.checked
    )


def _fix(record: UnadaptedClass, by_install: bool, by_safe: bool) -> str:
    name = record.cls.__qualname__
    wrap = "step = typecheck_guard.unflatten_safe(jax.jit(step))"
    if by_install:
        return (
            f"call typecheck_guard.install() before {name} is defined (first thing "
            f"in your entry point), or wrap the jitted functions that return it: {wrap}"
        )
    if record.registration.startswith("register_pytree_node"):
        alternative = (
            f"; or wrap the jitted functions that return it: {wrap}" if by_safe else ""
        )
        return (
            f"build the instance with object.__new__ in {name}.tree_unflatten instead "
            f"of calling {name}(...){alternative}"
        )
    if by_safe:
        return f"wrap the jitted functions that return {name}: {wrap}"
    return (
        f"unflatten {name} through object.__new__: a wrapper that is not a "
        "typechecker sits above its check, so typecheck_guard can't skip it"
    )


def _cells(fn: Any) -> dict[str, Any]:
    code, closure = getattr(fn, "__code__", None), getattr(fn, "__closure__", None)
    if code is None or closure is None:
        return {}
    out = {}
    for name, cell in zip(code.co_freevars, closure, strict=False):
        try:
            out[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
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
    from ._checkers import checker_of

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
    by_install = _install_would_adapt(record)
    by_safe = _unflatten_safe_covers(record)
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
        _fix(record, by_install, by_safe),
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


def scan(modules: Sequence[str], recursive: bool = False) -> ScanReport:
    """Import `modules` and report what would run a typecheck on unflatten.

    A module that can't be imported is reported in `import_errors` (exit code 2),
    and the others are still imported and scanned.
    """
    errors: list[ScanError] = []
    silent = import_all(modules, recursive, errors)
    from ._jaxcompat import registry

    records = sorted(at_risk(), key=lambda r: (r.cls.__module__, r.cls.__qualname__))
    findings = []
    known = {s.target for s in silent}
    for record in records:
        found, unchecked = finding(record)
        findings.append(found)
        # The same check, seen by its warning at import and by probing: report once.
        silent += [s for s in unchecked if s.target not in known]
    return ScanReport(
        tuple(modules), len(registry()), tuple(findings), tuple(silent), tuple(errors)
    )


def format_text(report: ScanReport) -> str:
    out = []
    n = len(report.findings)
    if n:
        out.append(
            f"{n} pytree class{'es' if n > 1 else ''} run{'' if n > 1 else 's'} a "
            "typecheck every time JAX unflattens "
            f"{'them' if n > 1 else 'it'} (after every jitted call that returns "
            f"{'them' if n > 1 else 'it'}, in tree_map, ...):"
        )
    for f in report.findings:
        out += [
            "",
            f"  {f.module}.{f.name}",
            f"    registered by: {f.registration}",
            f"    checked by:    {'/'.join(f.checkers)} on {', '.join(f.checked)}",
            f"    why:           {f.reason}",
            f"    install():     {'covers it' if f.install_covers else 'does not cover it'}",
            f"    unflatten_safe: {'covers it' if f.unflatten_safe_covers else 'does not cover it'}",
            f"    fix:           {f.fix}",
        ]
    typeguard4 = [s for s in report.silent if s.kind == "typeguard4"]
    unresolved = [s for s in report.silent if s.kind == "unresolved"]
    if typeguard4:
        if out:
            out.append("")
        out.append(
            f"{len(typeguard4)} typecheck(s) silently check nothing: typeguard "
            "4.x can't instrument the code jaxtyping generates and only emits an "
            "InstrumentationWarning. Use jaxtyped(typechecker=beartype.beartype), or "
            "pin typeguard==2.13.3:"
        )
        for s in typeguard4:
            out.append(f"  {s.target}")
    if unresolved:
        if out:
            out.append("")
        out.append(
            f"{len(unresolved)} typecheck(s) silently skip annotations that jaxtyping "
            "can't resolve (string annotations, from `from __future__ import "
            "annotations`, naming something imported inside a function):"
        )
        for s in unresolved:
            out.append(f"  {s.target}: {s.message}")
    if not out:
        out.append(
            "No registered pytree class runs a typecheck on unflatten, and no "
            "typecheck was silently disabled."
        )
    if report.import_errors:
        if out:
            out.append("")
        n = len(report.import_errors)
        out.append(
            f"{n} module{'s' if n > 1 else ''} could not be imported, so "
            f"{'their' if n > 1 else 'its'} classes are not in this report:"
        )
        for e in report.import_errors:
            out.append(f"  {e}")
    imported = ", ".join(report.imported) or "nothing"
    out += [
        "",
        f"(imported {imported}; {report.registered} pytree classes "
        f"registered with JAX; exit code {report.exit_code})",
    ]
    return "\n".join(out)


def to_dict(report: ScanReport) -> dict[str, Any]:
    return {
        "modules": list(report.modules),
        "registered": report.registered,
        "at_risk": [f._asdict() for f in report.findings],
        "silent_checks": [s._asdict() for s in report.silent],
        "import_errors": [
            {"module": e.module, "message": str(e)} for e in report.import_errors
        ],
        "exit_code": report.exit_code,
    }
