"""The `typecheck-guard` command (also `python -m typecheck_guard`).

Subcommands: `bench` (how much the checks cost per call, with and without the
plugin, on this machine), `scan` (which of my classes re-run a check on every
unflatten), `run` (a program with `install()` in effect) and `profile` (where a
program's typecheck time goes). All import JAX lazily, so `--help` is instant.

`run` and `profile` take the program's command line as `python` does: everything
after the script (or after `-m module`) is the program's, so we split it off before
argparse sees it (`_runner.split_command`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["main"]

PROG = "typecheck-guard"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Find and measure typechecks that JAX re-runs every time it "
        "unflattens a pytree (after every jitted call).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    bench = sub.add_parser(
        "bench",
        help="measure what typechecks cost per call, with and without the plugin",
        description="Measure, on this machine, what typechecking costs per call "
        "(S0: a jit step returning a jaxtyped flax.struct state; S1: a tiny array "
        "through jit as raw arrays, eqx.Module, flax.struct, custom pytree node; S2: a "
        "Flax NNX train step; S3: flatten+unflatten of a ResNet-50 TrainState; eager: "
        "a PyTree[...] check outside jit), as the ratio to jaxtyping_disable=True, with "
        "no plugin, with unflatten_safe and with install(). Measured interleaved in one "
        "process; median of per-round ratios.",
    )
    size = bench.add_mutually_exclusive_group()
    size.add_argument(
        "--quick",
        dest="preset",
        action="store_const",
        const="quick",
        help="short run, well under a minute on two cores (the default)",
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
    bench.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    bench.add_argument(
        "--plot",
        metavar="PATH",
        help="also sweep S0 (the flax.struct state) over 1 to 10,000 leaves and draw "
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
        choices=("S0", "S1", "S2", "S3", "eager"),
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
        description="Import MODULEs and list every registered pytree class whose "
        "unflatten would run a typecheck, with how it is registered, which checker, "
        "whether install() or unflatten_safe covers it, and the one-line fix; also "
        "typechecks that silently check nothing (typeguard 4.x under jaxtyped). Exit "
        "code: 0 clean, 1 findings, 2 a module could not be imported (the others are "
        "still scanned and reported).",
    )
    scan.add_argument(
        "modules", nargs="+", metavar="MODULE", help="e.g. mypackage.models"
    )
    scan.add_argument(
        "-r",
        "--recursive",
        action="store_true",
        help="also import every submodule of the packages given",
    )
    scan.add_argument("--json", action="store_true", help="print the report as JSON")

    run = sub.add_parser(
        "run",
        help="run a Python program with typecheck_guard.install() in effect",
        usage=f"{PROG} run [-h] (script.py | -m module) [args ...]",
        description="Call typecheck_guard.install(), then run the program exactly as "
        "`python script.py args...` or `python -m module args...` would (sys.argv, "
        "__main__, sys.path[0], exit code): its pytree classes unflatten without "
        "re-running their typechecks, with no change to its code.",
    )
    run.add_argument("program", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    prof = sub.add_parser(
        "profile",
        help="run a Python program and report where its typecheck time goes",
        usage=f"{PROG} profile [-h] [--install] [--json FILE] [--plot FILE] "
        "[--top N] (script.py | -m module) [args ...]",
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
    prof.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    prof.add_argument(
        "--plot",
        metavar="FILE",
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
    return parser


def _error(command: str, message: str) -> int:
    print(f"{PROG} {command}: error: {message}", file=sys.stderr)
    return 2


def _scan(args: argparse.Namespace) -> int:
    from ._scan import ScanError, format_text, scan, to_dict

    try:
        report = scan(args.modules, recursive=args.recursive)
    except ScanError as e:
        return _error("scan", str(e))
    # One line per module that could not be imported; the others are still scanned
    # and reported, and the exit code is 2.
    for e in report.import_errors:
        _error("scan", str(e))
    if not report.imported:
        return report.exit_code
    if args.json:
        print(json.dumps(to_dict(report), indent=2))
    else:
        print(format_text(report))
    return report.exit_code


def _bench(args: argparse.Namespace) -> int:
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return _error(
                "bench", "--plot needs matplotlib: pip install 'typecheck-guard[plot]'"
            )
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
    import warnings

    import typecheck_guard

    with warnings.catch_warnings():
        # Nothing of the program's is registered yet; classes registered by the
        # libraries imported so far are not the user's to fix.
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()


def _program(command: str, argv: list[str]) -> int:
    from ._runner import ProgramError, check, run_program, split_command

    try:
        ours, program = split_command(command, argv, _TAKES_VALUE[command])
    except ProgramError as e:
        return _error(command, str(e))
    args = _parser().parse_args([command, *ours])
    if command == "profile" and args.top < 0:
        return _error(command, f"--top takes 0 (all sites) or more, got {args.top}")
    try:
        check(program, command)
    except ProgramError as e:
        return _error(command, str(e))
    if command == "run":
        _install()
        return run_program(program, command)
    if args.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return _error(
                command, "--plot needs matplotlib: pip install 'typecheck-guard[plot]'"
            )
    from .._profile._api import Profile
    from .._profile._report import format_text, plot

    if args.install:
        _install()
    prof = Profile()
    prof.program = program.display
    prof._before_program = True  # we see every jitted callable the program makes
    with prof:
        code = run_program(program, command)
    top = args.top or None
    sys.stdout.flush()
    print(format_text(prof, top=top, more="--top 0 lists them all"), file=sys.stderr)
    if args.json is not None:
        with open(args.json, "w") as f:
            json.dump(prof.to_dict(), f, indent=2)
    if args.plot is not None:
        plot(prof, args.plot, top=top)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _TAKES_VALUE:
        return _program(argv[0], argv[1:])
    args = _parser().parse_args(argv)
    if args.command == "scan":
        return _scan(args)
    return _bench(args)
