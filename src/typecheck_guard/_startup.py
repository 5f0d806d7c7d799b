"""`TYPECHECK_GUARD=install`: `install()` in every Python process, at start-up.

The package puts `typecheck_guard.pth` in site-packages, next to itself (in the wheel
and in an editable install). Python runs its `import` line as it starts, in every
process, before `__main__` or any other user code: coverage.py measures subprocesses
the same way (`COVERAGE_PROCESS_START`). The line reads the variable, and only when
it is set imports this module and calls `start()`. Unset, the hook imports nothing;
what it costs an interpreter's start is in docs/turning-it-on.md.

`typecheck-guard run`, `typecheck-guard profile --install` and `pytest
--typecheck-guard-install` set the variable (`propagate`), so that the Python
processes their program starts agree with it: `multiprocessing` spawn and
forkserver children (a fork child inherits the parent's state), `subprocess`
Pythons, pytest-xdist workers.

Nothing here may break the interpreter: a wrong value, or an `install()` that fails,
is one line on stderr, and the process runs without typecheck_guard.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Final

__all__ = ["VALUE", "VARIABLE", "propagate", "restore", "start"]

VARIABLE: Final = "TYPECHECK_GUARD"
VALUE: Final = "install"

# Whether `start()` called `install()` in this process.
started = False
# Whether `start()` ran: Python may run a `.pth` line twice (a venv's site-packages
# is added once as the venv's and once as `sys.prefix`'s; coverage.py guards its
# `process_startup()` the same way), and a wrong value is said once.
_ran = False


def start() -> None:
    """What the `.pth` line calls when the variable is set: `install()`, or one line
    on stderr saying why not."""
    global started, _ran
    if _ran:
        return
    _ran = True
    from ._errors import BAD_VARIABLE, STARTUP_FAILED

    value = os.environ.get(VARIABLE, "")
    if value == "":
        return
    if value != VALUE:
        _say(BAD_VARIABLE.format(value=value))
        return
    from ._install import PartsDisabledWarning, install

    try:
        with warnings.catch_warnings(record=True) as caught:
            # Only what is off goes to stderr, as lines of ours (`-W error` must not
            # make it an exception here). Classes registered so far, by libraries
            # imported before us, are not the program's (as under `typecheck-guard
            # run`); and what the libraries `install()` imports say as they are
            # imported is dropped: none of the program's filters is in place yet
            # to judge it.
            warnings.simplefilter("ignore")
            warnings.simplefilter("always", PartsDisabledWarning)
            install()
    except Exception as e:  # the interpreter must start whatever happens
        error = " ".join(f"{type(e).__name__}: {e}".split())
        _say(STARTUP_FAILED.format(error=error))
        return
    started = True
    for w in caught:
        _say(f"typecheck_guard: {w.category.__name__}: {w.message}")


def _say(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):
        pass  # no usable stderr (pythonw, a closed descriptor): stay silent


def propagate() -> str | None:
    """Set the variable to `install`, so that every Python process started from now
    on calls `install()` as it starts; returns what it was before (`None`: unset),
    for `restore`."""
    old = os.environ.get(VARIABLE)
    os.environ[VARIABLE] = VALUE
    return old


def restore(old: str | None) -> None:
    """Put back the value `propagate` returned."""
    if old is None:
        os.environ.pop(VARIABLE, None)
    else:
        os.environ[VARIABLE] = old
