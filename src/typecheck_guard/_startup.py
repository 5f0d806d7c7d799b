"""`TYPECHECK_GUARD=install`: `install()` in every Python process, at start-up.

The package puts `typecheck_guard.pth` in site-packages, next to itself (in the wheel
and in an editable install). Python runs its `import` line as it starts, in every
process, before `__main__` or any other user code: coverage.py measures subprocesses
the same way (`COVERAGE_PROCESS_START`). The line reads the variable, and only when
it is set imports this module and calls `start()`. Unset, the hook imports nothing;
what it costs an interpreter's start is in docs/turning-it-on.md.

`install()` imports nothing: each part patches its library when the program imports
it, so the hook changes nothing the program configures before its imports (JAX's and
jaxtyping's environment variables).

`typecheck-guard run` sets the variable and replaces its process with `python`,
which runs this hook before the program (`hook_installed` says where it can);
`typecheck-guard profile --install` and `pytest --typecheck-guard-install` set it
too (`propagate`). So the Python processes their program starts agree with it:
`multiprocessing` spawn and forkserver children (a fork child inherits the
parent's state), `subprocess` Pythons, pytest-xdist workers.

Nothing here may break the interpreter: a wrong value, or an `install()` that fails,
is one line on stderr, and the process runs without typecheck_guard.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Final

__all__ = [
    "VALUE",
    "VARIABLE",
    "hook_installed",
    "propagate",
    "restore",
    "say",
    "start",
]

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
        say(BAD_VARIABLE.format(value=value))
        return
    from . import _install
    from ._install import PartsDisabledWarning, install

    # What is off goes to stderr as lines of ours, here and when the program
    # imports a library whose part can't work: `-W error` must not make it an
    # exception, here or in the program's `import`.
    _install.say_instead = say
    try:
        with warnings.catch_warnings(record=True) as caught:
            # `install()` imports nothing, but a library imported before us (by
            # a `.pth` file read before ours, say) is patched here and now: the
            # classes it registered are not the program's (as under
            # `typecheck-guard run`), and none of the program's filters is in
            # place yet to judge anything else said meanwhile.
            warnings.simplefilter("ignore")
            warnings.simplefilter("always", PartsDisabledWarning)
            install()
    except Exception as e:  # the interpreter must start whatever happens
        _install.say_instead = None  # a later install() of the program's warns
        error = " ".join(f"{type(e).__name__}: {e}".split())
        say(STARTUP_FAILED.format(error=error))
        return
    started = True
    for w in caught:
        say(f"typecheck_guard: {w.category.__name__}: {w.message}")


def hook_installed() -> bool:
    """Whether a Python process started as this one was (the same interpreter, options
    and environment) runs the hook as it starts, and with it this copy of
    typecheck_guard: `typecheck-guard run` then replaces its process with `python`
    itself.

    Python reads the `.pth` files of the site-packages folders (the user's too,
    unless `-s`, `-I` or `PYTHONNOUSERSITE`), never under `-S`; and the hook imports
    typecheck_guard from the path Python has then, which is ours but for
    `sys.path[0]` (the script's folder, or the current one for `-m`): a source tree
    on `PYTHONPATH` is on it, `python -m typecheck_guard` run from inside `src/` is
    not.
    """
    if sys.flags.no_site:
        return False
    import site

    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE:
        folders.append(site.getusersitepackages())
    if not any(os.path.isfile(os.path.join(f, _PTH)) for f in folders):
        return False
    ours = os.path.realpath(os.path.dirname(os.path.dirname(__file__)))
    return any(os.path.realpath(p or os.curdir) == ours for p in sys.path[1:])


# The file the package puts next to itself in site-packages.
_PTH: Final = "typecheck_guard.pth"


def say(line: str) -> None:
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
