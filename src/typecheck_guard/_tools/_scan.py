"""`typecheck-guard scan`: import the user's modules, then list every registered
pytree class whose unflatten would run a typecheck, and every checker configuration
that silently checks nothing.

The listing is `_adapt._unadapted.at_risk()` over JAX's registry after the imports, so it
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
import textwrap
import traceback
import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

from .._adapt._coverage import Finding, SilentCheck, finding
from .._adapt._unadapted import at_risk
from ._interrupt import checkpoint

__all__ = [
    "Finding",
    "ScanError",
    "ScanReport",
    "SilentCheck",
    "names_a_module",
    "scan",
]


class ScanError(Exception):
    """A module could not be imported; the message is one line."""

    def __init__(self, message: str, module: str = ""):
        super().__init__(message)
        self.module = module


class ScanReport(NamedTuple):
    modules: tuple[str, ...]
    registered: int
    findings: tuple[Finding, ...]
    silent: tuple[SilentCheck, ...]
    import_errors: tuple[ScanError, ...] = ()
    """The modules that could not be imported, one `ScanError` each: the others
    were still imported and scanned."""
    interrupted: bool = False
    """Ctrl-C stopped the scan: what it had found is reported, exit code 130."""
    not_imported: tuple[str, ...] = ()
    """The modules Ctrl-C kept from being imported (or finishing their import)."""

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130  # as a shell reports a command ended by Ctrl-C
        if self.import_errors:
            return 2
        return 1 if self.findings or self.silent else 0

    @property
    def imported(self) -> tuple[str, ...]:
        """The modules given that were imported."""
        left = {e.module for e in self.import_errors} | set(self.not_imported)
        return tuple(m for m in self.modules if m not in left)


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


def _search_cwd() -> None:
    """What `python -m` does: the user's modules are found from where they are."""
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())


_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def names_a_module(value: str) -> bool:
    """Whether `value` is the name of a module we can import rather than a file
    name: a dotted name, not ending with `.json`, whose top-level package exists
    (looking it up runs none of its code)."""
    if value.endswith(".json") or not _DOTTED.fullmatch(value):
        return False
    _search_cwd()
    try:
        return importlib.util.find_spec(value.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


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
    interrupted: list[str] | None = None,
) -> list[SilentCheck]:
    """Import `names` (and, with `recursive`, every submodule of the packages among
    them); return the checks typeguard 4 said it would not run.

    A module that can't be imported raises `ScanError`, or, when `errors` is a list,
    is appended to it and the other modules are still imported: one missing optional
    dependency should not hide what the rest of a package registers.

    Ctrl-C is taken between two modules (or within one, the second time: see
    `_interrupt`); it raises `KeyboardInterrupt`, or, when `interrupted` is a list,
    stops the imports and appends to it the modules not imported.
    """
    failed: list[ScanError] = []
    instrumentation = _instrumentation_warning()
    _search_cwd()
    with warnings.catch_warnings(record=True) as caught:
        if instrumentation is not None:
            # typeguard 4 can't instrument code that has no source file, which is
            # what jaxtyping generates: it warns once and leaves the function
            # unchecked (typeguard/_decorators.py, `instrument`).
            warnings.simplefilter("always", instrumentation)
        pending = list(names)
        while pending:
            name = pending[0]
            try:
                checkpoint()
                try:
                    module = _import(name)
                except ScanError as e:
                    failed.append(e)
                else:
                    if recursive and name in names:
                        pending += _submodules(module, failed)
            except KeyboardInterrupt:
                if interrupted is None:
                    raise
                interrupted += pending
                break
            pending.pop(0)
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


def scan(modules: Sequence[str], recursive: bool = False) -> ScanReport:
    """Import `modules` and report what would run a typecheck on unflatten.

    A module that can't be imported is reported in `import_errors` (exit code 2),
    and the others are still imported and scanned.
    """
    errors: list[ScanError] = []
    left: list[str] = []
    silent = import_all(modules, recursive, errors, left)
    # Interrupted or not, we list what the modules imported so far registered.
    interrupted = bool(left)
    registered = 0
    findings = []
    try:
        checkpoint()
        from .._compat._jax import registry

        registered = len(registry())
        records = sorted(
            at_risk(), key=lambda r: (r.cls.__module__, r.cls.__qualname__)
        )
        known = {s.target for s in silent}
        for record in records:
            checkpoint()
            found, unchecked = finding(record)
            findings.append(found)
            # The same check, seen by its warning at import and by probing: once.
            silent += [s for s in unchecked if s.target not in known]
    except KeyboardInterrupt:
        interrupted = True
    return ScanReport(
        tuple(modules),
        registered,
        tuple(findings),
        tuple(silent),
        tuple(errors),
        interrupted,
        tuple(left),
    )


# The text report fits a terminal, and the documentation, at 88 columns: long lines
# wrap on spaces, a field's continuation lines align with its value.
_WIDTH = 88


def _para(text: str, indent: str = "", hang: str = "  ") -> list[str]:
    return textwrap.wrap(
        text,
        _WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + hang,
        break_on_hyphens=False,
        break_long_words=False,
    )


def _field(label: str, value: str) -> list[str]:
    head = f"    {label:<15} "
    return textwrap.wrap(
        value,
        _WIDTH,
        initial_indent=head,
        subsequent_indent=" " * len(head),
        break_on_hyphens=False,
        break_long_words=False,
    )


def format_text(report: ScanReport) -> str:
    out: list[str] = []
    n = len(report.findings)
    if n:
        out += _para(
            f"{n} pytree class{'es' if n > 1 else ''} run{'' if n > 1 else 's'} a "
            "typecheck every time JAX unflattens "
            f"{'them' if n > 1 else 'it'} (after every jitted call that returns "
            f"{'them' if n > 1 else 'it'}, in tree_map, ...):"
        )
    for f in report.findings:
        out += ["", f"  {f.module}.{f.name}"]
        out += _field("registered by:", f.registration)
        out += _field(
            "checked by:", f"{'/'.join(f.checkers)} on {', '.join(f.checked)}"
        )
        out += _field("why:", f.reason)
        out += _field(
            "install():", "covers it" if f.install_covers else "does not cover it"
        )
        out += _field(
            "unflatten_safe:",
            "covers it" if f.unflatten_safe_covers else "does not cover it",
        )
        out += _field("fix:", f.fix)
    typeguard4 = [s for s in report.silent if s.kind == "typeguard4"]
    unresolved = [s for s in report.silent if s.kind == "unresolved"]
    if typeguard4:
        if out:
            out.append("")
        out += _para(
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
        out += _para(
            f"{len(unresolved)} typecheck(s) silently skip annotations that jaxtyping "
            "can't resolve (string annotations, from `from __future__ import "
            "annotations`, naming something imported inside a function):"
        )
        for s in unresolved:
            out += _para(f"{s.target}: {s.message}", "  ")
    if not out:
        out += _para(
            "No registered pytree class runs a typecheck on unflatten, and no "
            "typecheck was silently disabled."
        )
    if report.import_errors:
        if out:
            out.append("")
        n = len(report.import_errors)
        out += _para(
            f"{n} module{'s' if n > 1 else ''} could not be imported, so "
            f"{'their' if n > 1 else 'its'} classes are not in this report:"
        )
        for e in report.import_errors:
            out += _para(str(e), "  ")
    if report.interrupted:
        out.append("")
        left = report.not_imported
        out += _para(
            "Interrupted (Ctrl-C) "
            + (
                f"before importing {', '.join(left)}: "
                f"{'their' if len(left) > 1 else 'its'} classes are not in this "
                "report."
                if left
                else "while listing the classes: the list is incomplete."
            )
        )
    imported = ", ".join(report.imported) or "nothing"
    out.append("")
    out += _para(
        f"(imported {imported}; {report.registered} pytree classes "
        f"registered with JAX; exit code {report.exit_code})",
        hang=" ",
    )
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
        "interrupted": report.interrupted,
        "not_imported": list(report.not_imported),
        "exit_code": report.exit_code,
    }
