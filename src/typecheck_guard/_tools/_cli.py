"""The `typecheck-guard` command (also `python -m typecheck_guard`).

Subcommands: `bench` (how much the checks cost per call, with and without the
plugin, on this machine), `scan` (which of my classes re-run a check on every
unflatten), `run` (a program with `install()` in effect) and `profile` (where a
program's typecheck time goes). All import JAX lazily, so `--help` is instant.

`run` and `profile` take the program's command line as `python` does: everything
after the script (or after `-m module`) is the program's, so we split it off before
argparse sees it (`_runner.split_command`). `run` then becomes `python` itself
(`_runner.replace_process`), and `profile` runs the program in this process
(`_runner.run_program`).

`--json PATH` is one convention for `scan`, `profile` and `bench`: a file, or `-`
for standard output, which then holds the JSON alone (`_output`). Ctrl-C ends
every command with exit code 130 and no traceback of ours; `bench` and `scan`
take it at a safe point and report what they have (`_interrupt`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import Sequence

from ._bench._scenarios import SCENARIOS
from ._output import STDOUT, is_stdout, unwritable

__all__ = ["main"]

PROG = "typecheck-guard"


def _version() -> str:
    from .. import __version__

    return f"{PROG} {__version__}"


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """The top-level parser under `""`, and each subcommand's under its name."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Find and measure typechecks that JAX re-runs every time it "
        "unflattens a pytree (after every jitted call).",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    bench = sub.add_parser(
        "bench",
        help="measure what typechecks cost per call, with and without the plugin",
        description="Measure, on this machine, what typechecking costs per call, as "
        "the ratio to jaxtyping_disable=True, with no plugin, with unflatten_safe and "
        "with install(). Scenarios: flax-state (a jitted step returning a jaxtyped "
        "flax.struct state), other-states (the same step returning a custom pytree "
        "node and a flax.struct with a __post_init__), ten-floats (10 floats through "
        "jit as raw arrays, an eqx.Module, a flax.struct and a custom pytree node), "
        "nnx (a Flax NNX train step), trainstate (flatten + unflatten of a ResNet-50 "
        "TrainState), pax (flatten + unflatten of a ResNet-50 of custom nodes, as in "
        "PAX), eager (a PyTree[...] check outside jit). A scenario whose library is "
        "not installed is "
        "skipped, with the reason. Measured interleaved in one process: the median "
        "round, and the lowest and highest.",
    )
    size = bench.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        dest="preset",
        action="store_const",
        const="quick",
        help="short run, about a minute on two cores (the default)",
    )
    size.add_argument(
        "--full",
        dest="preset",
        action="store_const",
        const="full",
        help="more rounds, longer blocks, real ResNet-50 shapes (a few minutes)",
    )
    size.add_argument(
        "--smoke",
        dest="preset",
        action="store_const",
        const="smoke",
        help="tiny sizes and rounds: checks that every scenario runs; figures are noise",
    )
    bench.set_defaults(preset="quick")
    bench.add_argument(
        "--json",
        metavar="PATH",
        help="also write the results as JSON to PATH ('-': to standard output, and "
        "the table to standard error)",
    )
    bench.add_argument(
        "--plot",
        metavar="PATH",
        help="also sweep the flax.struct state over 1 to 10,000 leaves and draw "
        "overhead against leaves as a PNG (needs matplotlib: pip install "
        "'typecheck-guard[plot]')",
    )
    bench.add_argument(
        "--checker",
        action="append",
        choices=("beartype", "typeguard"),
        help="measure with this checker only (repeatable; default: both)",
    )
    bench.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="run this scenario only (repeatable; default: all)",
    )
    bench.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )

    scan = sub.add_parser(
        "scan",
        help="list the pytree classes that re-run a typecheck on unflatten",
        usage=f"{PROG} scan [-h] [-r] [--json PATH] MODULE [MODULE ...]",
        description="Import MODULEs and list every registered pytree class whose "
        "unflatten would run a typecheck, with how it is registered, which checker, "
        "whether install() or unflatten_safe covers it, and the one-line fix; also "
        "typechecks that silently check nothing (typeguard 4.x under jaxtyped). Exit "
        "code: 0 clean, 1 findings, 2 a module could not be imported (the others are "
        "still scanned and reported), 130 interrupted (Ctrl-C; what was found so far "
        "is reported).",
    )
    # `nargs="*"`: `scan --json pkg`, where `--json` was a flag, still means
    # `scan --json - pkg` (`_scan_arguments`).
    scan.add_argument(
        "modules", nargs="*", metavar="MODULE", help="e.g. mypackage.models"
    )
    scan.add_argument(
        "-r",
        "--recursive",
        action="store_true",
        help="also import every submodule of the packages given",
    )
    scan.add_argument(
        "--json",
        metavar="PATH",
        nargs="?",
        const=STDOUT,
        help="write the report as JSON to PATH instead of the text ('-', or "
        "--json alone after the modules: to standard output, which then holds "
        "nothing else)",
    )

    run = sub.add_parser(
        "run",
        help="run a Python program with typecheck_guard.install() in effect",
        usage=f"{PROG} run [-h] (script.py | -m module) [args ...]",
        description="Run `python script.py args...` or `python -m module args...` "
        "itself (the same interpreter and options), with typecheck_guard.install() "
        "in effect from the program's first line: its pytree classes unflatten "
        "without re-running their typechecks, with no change to its code.",
    )
    run.add_argument("program", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    prof = sub.add_parser(
        "profile",
        help="run a Python program and report where its typecheck time goes",
        usage=f"{PROG} profile [-h] [--install] [--every-checker] [--json PATH] "
        "[--plot PATH] [--top N] (script.py | -m module) [args ...]",
        description="Run the program exactly as `python` would, record every "
        "typecheck it runs (jaxtyping, beartype, typeguard, isinstance(x, "
        "PyTree[...])), and print at exit, largest first, each site: what was "
        "checked, by which checker, how it was reached (dispatch: unflatten at a "
        "jitted call; tree: unflatten in a tree operation; construction; eager; "
        "trace), count, time, share of the run, and the fix. The program's exit code "
        "is kept; the report goes to stderr.",
    )
    prof.add_argument(
        "--install",
        action="store_true",
        help="call typecheck_guard.install() first, to see what remains",
    )
    prof.add_argument(
        "--every-checker",
        action="store_true",
        help="on Python 3.11, also watch checks by beartype or typeguard alone (with "
        "a profile function, which makes Python code about 1.3x slower); 3.12+ "
        "watches them all at no such cost",
    )
    prof.add_argument(
        "--json",
        metavar="PATH",
        help="also write the report as JSON to PATH ('-': to standard output, and "
        "what the program prints to standard error)",
    )
    prof.add_argument(
        "--plot",
        metavar="PATH",
        help="also draw the sites as a bar chart (needs matplotlib: pip install "
        "'typecheck-guard[plot]')",
    )
    prof.add_argument(
        "--top",
        type=int,
        default=20,
        metavar="N",
        help="list the N sites that took the most time (default 20; 0: all of them)",
    )
    prof.add_argument("program", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return {"": parser, **sub.choices}


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse `argv`; an unknown option is reported with the usage of the subcommand
    it was given to, not the top level's (argparse leaves unknown arguments to the
    top-level parser)."""
    parsers = _parsers()
    args, unknown = parsers[""].parse_known_args(argv)
    if unknown:
        parsers[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _error(command: str, message: str) -> int:
    print(f"{PROG} {command}: error: {message}", file=sys.stderr)
    return 2


def _outputs(command: str, args: argparse.Namespace) -> str | None:
    """The first problem with the `--json` / `--plot` files, as an error message."""
    for option in ("json", "plot"):
        path = getattr(args, option, None)
        if isinstance(path, str) and (why := unwritable(path)) is not None:
            return f"--{option}: {why}"
    if getattr(args, "plot", None) is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return "--plot needs matplotlib: pip install 'typecheck-guard[plot]'"
    return None


def _scan_arguments(args: argparse.Namespace) -> None:
    """Settle `scan`'s modules and `--json`.

    `--json` was a flag for `scan` before it took a path, so `scan --json pkg`
    still means `scan --json - pkg` when `pkg` is a module we can import and not a
    `.json` file.
    """
    from ._scan import names_a_module

    if args.json not in (None, STDOUT) and names_a_module(args.json):
        args.modules.insert(0, args.json)
        args.json = STDOUT
    if not args.modules:
        _parsers()["scan"].error("the following arguments are required: MODULE")


def _scan(args: argparse.Namespace) -> int:
    from ._interrupt import deferred
    from ._output import stdout_to_stderr, write_text
    from ._scan import ScanError, format_text, scan, to_dict

    _scan_arguments(args)
    if (problem := _outputs("scan", args)) is not None:
        return _error("scan", problem)
    try:
        # With `--json -`, what the modules print at import goes to stderr.
        with stdout_to_stderr(is_stdout(args.json)), deferred(f"{PROG} scan"):
            report = scan(args.modules, recursive=args.recursive)
    except ScanError as e:
        return _error("scan", str(e))
    # One line per module that could not be imported; the others are still scanned
    # and reported, and the exit code is 2.
    for e in report.import_errors:
        _error("scan", str(e))
    if not report.imported and not report.interrupted:
        return report.exit_code
    if args.json is not None:
        write_text(args.json, json.dumps(to_dict(report), indent=2) + "\n")
    else:
        print(format_text(report))
    return report.exit_code


def _bench(args: argparse.Namespace) -> int:
    if (problem := _outputs("bench", args)) is not None:
        return _error("bench", problem)
    from ._bench import run

    return run(
        preset=args.preset,
        json_path=args.json,
        plot_path=args.plot,
        checkers=args.checker,
        scenarios=args.scenario,
        progress=args.progress,
    )


_TAKES_VALUE = {
    "run": frozenset(),
    "profile": frozenset({"--json", "--plot", "--top"}),
}


def _install() -> None:
    """`install()` here, and `TYPECHECK_GUARD=install` for every Python process the
    program starts (spawn and forkserver children, `subprocess` Pythons), so that
    they agree with it."""
    import warnings

    import typecheck_guard

    from .._startup import propagate

    with warnings.catch_warnings():
        # Nothing of the program's is registered yet (and `install()` imports
        # nothing); classes registered by libraries imported so far are not the
        # user's to fix.
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    propagate()


def _program(command: str, argv: list[str], process: bool) -> int:
    from ._runner import (
        ProgramError,
        check,
        replace_process,
        run_program,
        split_command,
    )

    try:
        ours, program = split_command(command, argv, _TAKES_VALUE[command])
    except ProgramError as e:
        return _error(command, str(e))
    args = _parse([command, *ours])
    if command == "profile" and args.top < 0:
        return _error(command, f"--top takes 0 (all sites) or more, got {args.top}")
    try:
        check(program, command)
    except ProgramError as e:
        return _error(command, str(e))
    if command == "run":
        if process:
            # `python` itself, with the start-up hook calling `install()`; returns
            # only where that can't be done, and we run the program here.
            from .._startup import propagate

            propagate()
            replace_process(program)
        _install()
        return run_program(program, command, process=process)
    if (problem := _outputs(command, args)) is not None:
        return _error(command, problem)
    from .._profile._api import Profile
    from .._profile._report import format_text, plot
    from ._output import stdout_to_stderr, write_atomically, write_text

    if args.install:
        _install()
    prof = Profile(every_checker=args.every_checker)
    prof.program = program.display
    prof._before_program = True  # we see every jitted callable the program makes
    # With `--json -`, standard output holds the JSON alone: the program's output
    # goes to stderr, with the report.
    with stdout_to_stderr(is_stdout(args.json)), prof:
        code = run_program(program, command, process=process)
    top = args.top or None
    sys.stdout.flush()
    print(format_text(prof, top=top, more="--top 0 lists them all"), file=sys.stderr)
    try:
        if args.json is not None:
            write_text(args.json, json.dumps(prof.to_dict(), indent=2) + "\n")
        if args.plot is not None:
            write_atomically(args.plot, lambda tmp: plot(prof, tmp, top=top))
    except OSError as e:
        # Checked before the run, but the disk may have filled or the folder gone
        # since: say so, and keep the program's exit code when it has one.
        _error(command, f"can't write {e.filename!r}: {e.strerror or e}")
        return code or 1
    return code


def _main(argv: list[str], process: bool) -> int:
    if argv and argv[0] in _TAKES_VALUE:
        return _program(argv[0], argv[1:], process)
    args = _parse(argv)
    if args.command == "scan":
        return _scan(args)
    return _bench(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code.

    Without `argv`, this is the `typecheck-guard` command, and its process is the
    program's: `run` replaces it with `python` running the program, and a program
    that `profile` (or `run`, where it can't replace the process) ran and that
    ended with an uncaught `KeyboardInterrupt` ends it by SIGINT, as python does.
    Given `argv` (a list of arguments), everything runs in this process, and
    `main` returns.
    """
    process = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    from .._startup import VARIABLE, restore
    from ._runner import Interrupted, end_as_interrupted

    # `run` and `profile --install` set it for the program's processes; a caller
    # of `main()` in its own process gets its environment back.
    variable = os.environ.get(VARIABLE)
    try:
        code = _main(argv, process)
        # Output still buffered would otherwise meet a closed pipe at exit, where
        # Python can only print "Exception ignored".
        sys.stdout.flush()
    except KeyboardInterrupt:
        # Ctrl-C where no command takes it itself (while JAX imports, say): no
        # traceback through our frames, the exit code a shell gives it.
        print(f"{PROG}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`scan --json | head`): stop quietly, as `cat` does.
        # Python's own advice (the `signal` module's docs): point stdout at devnull
        # so that the flush at exit doesn't raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE if hasattr(signal, "SIGPIPE") else 1
    finally:
        restore(variable)
    if process and isinstance(code, Interrupted):
        end_as_interrupted()
    return code
