"""pytest plugin for `scripts/upstream_suites.py`: run a suite with
`typecheck_guard.install()` active.

Loaded with `-p _upstream_install` (the runner puts `scripts/` on `PYTHONPATH`).
We call `install()` when pytest imports this module, which it does for `-p` plugins
before it loads any conftest or test module, so that every class the suite defines is
registered through the patched functions. (`pytest_configure` would be too late for
classes a rootdir conftest defines.)

At the end of the session we write what install() did to the JSON file named by
`TYPECHECK_GUARD_UPSTREAM_REPORT`: the classes it adapted, those it left to JAX and
why, so that the runner can say which upstream classes a difference is about.
"""

from __future__ import annotations

import json
import os

import typecheck_guard

typecheck_guard.install()


def pytest_report_header() -> str:
    return (
        f"typecheck_guard {typecheck_guard.__version__} install() active: "
        f"{typecheck_guard.installed()} ({typecheck_guard.__file__})"
    )


# What install() did, gathered after every test: its tables hold classes weakly, and
# most classes an upstream test defines are gone by the end of the session.
_adapted: set[str] = set()
_refused: set[str] = set()


def _gather() -> None:
    # Private tables: this script is a development tool that lives with the source.
    from typecheck_guard import _register

    for cls, how in list(getattr(_register, "_adapted", {}).items()):
        _adapted.add(f"{cls.__module__}.{cls.__qualname__} ({how})")
    for cls, why in list(getattr(_register, "_refused", {}).items()):
        _refused.add(f"{cls.__module__}.{cls.__qualname__}: {why}")


def pytest_runtest_logfinish() -> None:
    _gather()


def pytest_unconfigure() -> None:
    path = os.environ.get("TYPECHECK_GUARD_UPSTREAM_REPORT")
    if not path:
        return
    _gather()
    report = {
        "installed": typecheck_guard.installed(),
        "typecheck_guard": typecheck_guard.__file__,
        "adapted": sorted(_adapted),
        "refused": sorted(_refused),
    }
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
