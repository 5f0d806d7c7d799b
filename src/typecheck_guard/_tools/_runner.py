"""Running a program as `python script.py ...` or `python -m module ...` would.

One runner for two commands: `typecheck-guard run` (which calls `install()` first)
and `typecheck-guard profile` (which watches the checks while it runs). Like
`coverage run`, we run the program in our own process, through `runpy`:

- `sys.argv` is `[script, *args]` (the script's absolute path, as `runpy.run_path`
  sets it), or `[the module's file, *args]` for `-m` (`runpy.run_module` with
  `alter_sys=True`, as `python -m` does);
- the program runs as `__main__`;
- `sys.path[0]` is the script's directory (symlinks resolved), or the current
  directory for `-m`, where our own command had put its bin directory;
- the exit code is `python`'s: `SystemExit(None)` is 0, `SystemExit(3)` is 3,
  `sys.exit("message")` prints the message and is 1; an uncaught exception goes
  through `sys.excepthook` (its traceback starts in the program, not in us) and is
  1; `KeyboardInterrupt` is 130, as a shell reports a Ctrl-C.

Like the interpreter at exit, we wait for the program's non-daemon threads before
we return, so that whatever runs after the program (the profile's report) sees
their work.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

__all__ = ["Program", "ProgramError", "check", "run_program", "split_command"]

USAGE_ERROR: Final = (
    "no program to run: write `typecheck-guard {command} script.py [args ...]` or "
    "`typecheck-guard {command} -m package.module [args ...]`"
)


class ProgramError(Exception):
    """The command line names no program, or one that does not exist."""


class Program(NamedTuple):
    """What to run: a script path or a module name, and its arguments."""

    target: str
    is_module: bool
    args: tuple[str, ...]

    @property
    def display(self) -> str:
        return f"-m {self.target}" if self.is_module else self.target


def split_command(
    command: str, argv: Sequence[str], takes_value: frozenset[str]
) -> tuple[list[str], Program]:
    """Split `argv` (after the subcommand) into our options and the program.

    Everything after the script (or after `-m module`) is the program's, options
    included, as with `python`: `typecheck-guard profile --top 5 train.py --top 3`
    gives `--top 3` to `train.py`. `takes_value` names our options that take a
    separate value (`--json PATH`).
    """
    argv = list(argv)
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            if i + 1 >= len(argv):
                raise ProgramError("-m needs a module name: -m package.module")
            return argv[:i], Program(argv[i + 1], True, tuple(argv[i + 2 :]))
        if arg.startswith("-m") and not arg.startswith("--"):
            return argv[:i], Program(arg[2:], True, tuple(argv[i + 1 :]))
        if arg == "--":
            if i + 1 >= len(argv):
                break
            return argv[:i], Program(argv[i + 1], False, tuple(argv[i + 2 :]))
        if not arg.startswith("-") or arg == "-":
            return argv[:i], Program(arg, False, tuple(argv[i + 1 :]))
        i += 2 if arg in takes_value else 1
    # Only our options: let argparse answer `--help` or complain about them first.
    return argv, Program("", False, ())


def check(program: Program, command: str) -> None:
    """Raise `ProgramError` if there is nothing to run."""
    if not program.target:
        raise ProgramError(USAGE_ERROR.format(command=command))
    if program.is_module:
        return
    if not os.path.exists(program.target):
        raise ProgramError(
            f"can't open file {os.path.abspath(program.target)!r}: no such file "
            "(give the path of a Python script, or -m package.module)"
        )


def _trimmed(tb: Any) -> Any:
    """The traceback from the program's first frame on: ours and runpy's are noise."""
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in _OURS:
        tb = tb.tb_next
    return tb


# runpy's frames are `<frozen runpy>` on 3.11+: we know them by module name.
_OURS: Final = frozenset({__name__, "runpy"})


def _excepthook(e: BaseException) -> None:
    # The default hook prints the exception's own `__traceback__` when it has one,
    # whatever it is given: trim that.
    tb = _trimmed(e.__traceback__)
    sys.excepthook(type(e), e.with_traceback(tb), tb)


def exit_code(e: SystemExit) -> int:
    """The exit status `python` gives a `SystemExit`, printing its message if any."""
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    sys.stderr.flush()
    return 1


def _join_threads() -> None:
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon and thread.is_alive():
            thread.join()


def run_program(program: Program, command: str) -> int:
    """Run `program` in this process as `python` would; returns its exit status.

    **Raises:**

    `ProgramError` when there is no program, or the script does not exist (before
    running anything). An unknown module is reported the way `python -m` reports
    it (`No module named ...`, status 1).
    """
    __tracebackhide__ = True
    check(program, command)
    old_argv, old_path0 = sys.argv, sys.path[0] if sys.path else None
    if program.is_module:
        sys.argv = [program.target, *program.args]  # runpy puts the file in argv[0]
        path0 = os.getcwd()
    else:
        script = os.path.abspath(program.target)
        sys.argv = [script, *program.args]
        path0 = (
            script
            if os.path.isdir(script)
            else os.path.dirname(os.path.realpath(script))
        )
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    try:
        try:
            if program.is_module:
                runpy.run_module(program.target, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(sys.argv[0], run_name="__main__")
        finally:
            _join_threads()
    except SystemExit as e:
        return exit_code(e)
    except KeyboardInterrupt as e:
        _excepthook(e)
        return 130
    except BaseException as e:
        if isinstance(e, ImportError) and _not_found(e):
            sys.stderr.write(f"{sys.executable}: {e}\n")
            return 1
        _excepthook(e)
        return 1
    finally:
        sys.argv = old_argv
        if old_path0 is not None and sys.path and sys.path[0] == path0:
            sys.path[0] = old_path0
    return 0


def _not_found(e: ImportError) -> bool:
    # runpy raises its own ImportError before the program runs ("No module named
    # ...", "... is a package and cannot be directly executed", "can't find
    # '__main__' module in 'folder'"): one line, as `python` prints it.
    return _trimmed(e.__traceback__) is None
