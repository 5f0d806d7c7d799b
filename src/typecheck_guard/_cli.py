"""The `typecheck-guard` command (also `python -m typecheck_guard`).

Subcommands: `bench` (how much the checks cost per call, with and without the
plugin, on this machine) and `scan` (which of my classes re-run a check on every
unflatten). Both import JAX lazily, so `--help` is instant.
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
        help="measure the seed scenarios with and without the plugin",
        description="Measure, on this machine, what typechecking costs per call in the "
        "seed scenarios (S0: jit step returning a jaxtyped flax.struct; S1: a tiny array "
        "through jit as raw arrays, eqx.Module, flax.struct, custom pytree; S2: Flax NNX "
        "train step; S3: ResNet-50 TrainState flatten+unflatten; eager PyTree check), "
        "as the ratio to jaxtyping_disable=True, with no plugin, with unflatten_safe and "
        "with install(). Measured interleaved in one process; median of per-round ratios.",
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
        help="also sweep S0 over 1 to 10,000 leaves and draw overhead against leaves "
        "as a PNG (needs matplotlib: pip install 'typecheck-guard[plot]')",
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.command == "scan":
        return _scan(args)
    return _bench(args)
