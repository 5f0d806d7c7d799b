"""pytest plugin for `scripts/upstream_suites.py`: run a suite with
`typecheck_guard.install()` active.

Loaded with `-p _upstream_install` (the runner puts `scripts/` on `PYTHONPATH`).
We call `install()` when pytest imports this module, which it does for `-p` plugins
before it loads any conftest or test module, so that every class the suite defines is
registered through the patched functions. (`pytest_configure` would be too late for
classes a rootdir conftest defines.)

At the end of the session we write what install() did to the JSON file named by
`TYPECHECK_GUARD_UPSTREAM_REPORT`: the classes it unflattens through `__new__`, those
whose own unflatten it marks and why, and the `PyTree[...]` verdict cache's
statistics, so that the runner can say what a suite exercised and which class a
difference is about.
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


def pytest_unconfigure() -> None:
    path = os.environ.get("TYPECHECK_GUARD_UPSTREAM_REPORT")
    if not path:
        return
    from typecheck_guard._compat._jax import registry_items

    # JAX's registry keeps every registered class alive, including those a test
    # defined locally: looking once, at the end, sees them all. (Our own tables
    # are weak.)
    from typecheck_guard._unflatten._records import adapted_how, marked_why

    adapted, marked = [], []
    for cls, _ in registry_items():
        name = f"{cls.__module__}.{cls.__qualname__}"
        if (how := adapted_how(cls)) is None:
            continue
        if (why := marked_why(cls)) is None:
            adapted.append(f"{name} ({how})")
        else:
            marked.append(f"{name} ({how}): {why}")
    report = {
        "installed": typecheck_guard.installed(),
        "typecheck_guard": typecheck_guard.__file__,
        "adapted": sorted(adapted),
        "marked": sorted(marked),
        "pytree_cache": typecheck_guard.pytree_cache_info()._asdict(),
    }
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
