"""Running a program as `python script.py ...` or `python -m module ...` runs it.

`typecheck-guard run` is `python` itself (`replace_process`): it replaces its own
process with the same interpreter, given the same interpreter options
(`sys.orig_argv`) and the program's command line, and `TYPECHECK_GUARD=install` in
the environment, so that the start-up hook (`_startup.py`) calls `install()` before
the program's first line. Every detail of the process is then python's own:
`sys.argv`, `__main__` (its `__builtins__`, `__loader__`, `__spec__`,
`__package__`), `sys.path[0]`, tracebacks, the exit status, an uncaught
`KeyboardInterrupt` ending the process by SIGINT, `atexit`, the wait for
non-daemon threads.

`run_program` runs a program in this process: for `typecheck-guard profile`, which
watches it from inside, and for `run` where the start-up hook can't run (Python
started with `-S`, typecheck_guard imported from a folder that is not on the
program's path, not POSIX). It does what python does, as `coverage run` does:

- a fresh `__main__` module, as python's holds it before the first line
  (`__builtins__` the module, `__annotations__`, for a script `__file__`,
  `__cached__ = None`, a `SourceFileLoader`, no `__spec__` or `__package__`), in
  `sys.modules` while the program runs;
- a module (`-m`), a folder or a zip file through `runpy._run_module_as_main`, the
  function `python -m` and `python folder` call: argv, errors ("No module named
  ...", "can't find '__main__' module in ...") and exit status are python's;
- `sys.argv` as given, `sys.path[0]` the script's directory (symlinks resolved), the
  folder or zip itself, or the current directory for `-m`;
- the exit status of `SystemExit`, a traceback from the program's first frame for
  an uncaught exception (1), and for an uncaught `KeyboardInterrupt` an `Interrupted`
  status, with which a process that ran the program ends by SIGINT
  (`_cli.main`); like the interpreter at exit, we wait for the program's
  non-daemon threads before we return, so that the profile's report sees their work.

What stays different in this process: the frames of ours below the program's
(`traceback.extract_stack()`), and modules we imported before it.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import importlib.util
import io
import os
import runpy
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

__all__ = [
    "Interrupted",
    "Program",
    "ProgramError",
    "check",
    "interpreter_options",
    "replace_process",
    "run_program",
    "split_command",
]

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

    @property
    def command_line(self) -> list[str]:
        """The program's part of a `python` command line."""
        if self.is_module:
            return ["-m", self.target, *self.args]
        # `--` ends python's options: a script whose name starts with "-".
        head = ["--"] if self.target.startswith("-") else []
        return [*head, self.target, *self.args]


class Interrupted(int):
    """The exit status of a program that ended with an uncaught `KeyboardInterrupt`:
    130 as a number (what a shell shows for it), and the mark that the process
    running it ends by SIGINT once everything after the program is done, as python
    does."""

    def __new__(cls) -> Interrupted:
        return super().__new__(cls, 130)


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


# --- python itself -------------------------------------------------------------------

# Python's one-letter options that take a value (`-W error`, `-Werror`), and those
# that end its options (`-c code`, `-m module`).
_TAKES_VALUE: Final = frozenset("WX")
_ENDS_OPTIONS: Final = frozenset("cm")


def interpreter_options(orig_argv: Sequence[str]) -> list[str] | None:
    """The interpreter options in `orig_argv` (`sys.orig_argv`: `python -X dev -W
    error -m typecheck_guard run ...` gives `["-X", "dev", "-W", "error"]`), or
    `None` for a command line we can't read. `-x` (skip the script's first line) is
    left out: it was about our script, not the program's."""
    out: list[str] = []
    args = list(orig_argv[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--check-hash-based-pycs" and i + 1 < len(args):
            out += args[i : i + 2]
            i += 2
            continue
        if not arg.startswith("-") or arg in ("-", "--"):
            return out  # the script (our command's own file), stdin, or the end
        if arg.startswith("--"):
            return None
        letters = ""
        for j, letter in enumerate(arg[1:], start=1):
            if letter in _ENDS_OPTIONS:
                return out + ([f"-{letters}"] if letters else [])
            if letter in _TAKES_VALUE:
                value = arg[j + 1 :]
                if not value:
                    if i + 1 >= len(args):
                        return None
                    i += 1
                    value = args[i]
                if letters:
                    out.append(f"-{letters}")
                    letters = ""
                out += [f"-{letter}", value]
                break
            if letter != "x":
                letters += letter
        if letters:
            out.append(f"-{letters}")
        i += 1
    return out


def replace_process(program: Program) -> None:
    """Become `python` running `program`, with `TYPECHECK_GUARD=install` set (the
    caller sets it): the same interpreter, with the options this one was given.
    Returns only where that can't be done; then the caller runs the program in this
    process."""
    from .._startup import hook_installed

    if os.name != "posix" or not sys.executable or not hook_installed():
        return
    options = interpreter_options(getattr(sys, "orig_argv", ()))
    if options is None:
        return
    argv = [sys.executable, *options, *program.command_line]
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    try:
        os.execv(sys.executable, argv)
    except OSError:
        return  # then in this process


# --- in this process -----------------------------------------------------------------


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


def _fresh_main() -> types.ModuleType:
    """`__main__` as python creates it, before the program's first line."""
    main = types.ModuleType("__main__")
    main.__dict__["__annotations__"] = {}
    main.__dict__["__builtins__"] = builtins
    return main


def _run_script(path: str, main: types.ModuleType) -> None:
    """What python does with `python path`, for a file: its code (source, or a
    `.pyc`), run in `main`'s namespace."""
    filename = os.path.abspath(path)
    with io.open_code(filename) as f:
        data = f.read()
    if data[:4] == importlib.util.MAGIC_NUMBER:
        import marshal

        code = marshal.loads(data[16:])
        loader: Any = importlib.machinery.SourcelessFileLoader("__main__", filename)
    else:
        # `dont_inherit`: our own `from __future__` imports are not the program's.
        code = compile(data, filename, "exec", dont_inherit=True)
        loader = importlib.machinery.SourceFileLoader("__main__", filename)
    main.__dict__.update(__file__=filename, __cached__=None, __loader__=loader)
    exec(code, main.__dict__)


def _run_as_main(name: str, alter_argv: bool) -> None:
    # What `python -m name` calls (`alter_argv`), and `python folder` / `python
    # file.zip` with `"__main__"`; it runs the code in `sys.modules["__main__"]`.
    run = getattr(runpy, "_run_module_as_main", None)
    if run is not None:
        run(name, alter_argv=alter_argv)
    else:  # pragma: no cover (every CPython we support has it)
        runpy.run_module(name, run_name="__main__", alter_sys=True)


def run_program(program: Program, command: str, *, process: bool = False) -> int:
    """Run `program` in this process as `python` would; returns its exit status
    (`Interrupted` for an uncaught `KeyboardInterrupt`). `process`: this process
    is the program's, and `__main__` stays the program's after it returns (its
    `atexit` handlers may need it); else it is put back.

    **Raises:**

    `ProgramError` when there is no program, or the script does not exist (before
    running anything). An unknown module is reported the way `python -m` reports
    it (`No module named ...`, status 1).
    """
    __tracebackhide__ = True
    import pkgutil

    check(program, command)
    old_argv, old_path0 = sys.argv, sys.path[0] if sys.path else None
    old_main = sys.modules.get("__main__")
    main = _fresh_main()
    is_file = False
    if program.is_module:
        sys.argv = ["-m", *program.args]  # runpy puts the module's file in argv[0]
        path0 = os.getcwd()
    else:
        sys.argv = [program.target, *program.args]
        target = os.path.abspath(program.target)
        # A folder or a zip file runs its `__main__` module, with itself as
        # `sys.path[0]`; a file runs from its directory.
        is_file = pkgutil.get_importer(target) is None
        path0 = os.path.dirname(os.path.realpath(target)) if is_file else target
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
    sys.modules["__main__"] = main
    try:
        try:
            if program.is_module:
                _run_as_main(program.target, alter_argv=True)
            elif is_file:
                _run_script(program.target, main)
            else:
                _run_as_main("__main__", alter_argv=False)
        finally:
            _join_threads()
    except SystemExit as e:
        return exit_code(e)
    except KeyboardInterrupt as e:
        _excepthook(e)
        return Interrupted()
    except BaseException as e:
        _excepthook(e)
        return 1
    finally:
        sys.argv = old_argv
        if old_path0 is not None and sys.path and sys.path[0] == path0:
            sys.path[0] = old_path0
        if not process and old_main is not None:
            sys.modules["__main__"] = old_main
    return 0


def end_as_interrupted() -> None:
    """End this process as python ends one whose program raised `KeyboardInterrupt`:
    by SIGINT, after `atexit` and the rest of the interpreter's shutdown. The
    traceback is printed already: the hook that Python calls for this one says
    nothing, and puts the program's hook back."""
    hook = sys.excepthook

    def silent(*args: Any) -> None:
        sys.excepthook = hook

    sys.excepthook = silent
    raise KeyboardInterrupt
