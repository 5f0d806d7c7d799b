"""`typecheck-guard bench`. See README.md in this directory for the design."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["run"]

PROG = "typecheck-guard bench"
NO_CHECKER = "no typechecker to measure with: {reasons}"


def _error(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def _usable(checkers: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The checkers that load, and why each of the others doesn't."""
    from ._scenarios import Unavailable, load_checker

    usable, reasons = [], {}
    for checker in checkers:
        try:
            load_checker(checker)
        except Unavailable as e:
            reasons[checker] = str(e)
        else:
            usable.append(checker)
    return usable, reasons


def run(
    preset: str = "quick",
    json_path: str | None = None,
    plot_path: str | None = None,
    checkers: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    progress: bool | None = None,
) -> int:
    """Run the benchmark, print the table, write the JSON and the plot; exit code.

    2 when it can't start (no checker, `--plot` without flax); 1 when every case
    was skipped; else 0.
    """
    from ._measure import Progress
    from ._report import plot, table, to_json
    from ._run import CHECKERS, PRESETS, count_steps, environment, run_cases, run_sweep
    from ._scenarios import missing

    chosen = PRESETS[preset]
    checkers = tuple(dict.fromkeys(checkers or CHECKERS))
    usable, reasons = _usable(checkers)
    if not usable:
        return _error(NO_CHECKER.format(reasons="; ".join(reasons.values())))
    if plot_path is not None and (why := missing(("flax",))) is not None:
        return _error(f"--plot measures a flax.struct state, and {why}")
    bar = Progress(
        count_steps(chosen, checkers, scenarios, plot_path is not None),
        enabled=progress,
    )
    try:
        results = run_cases(chosen, checkers, scenarios, bar)
        sweep = run_sweep(chosen, usable[0], bar) if plot_path is not None else []
    finally:
        bar.close()
    env = environment(chosen)
    print(table(results, env, reasons))
    if json_path is not None:
        with open(json_path, "w") as f:
            f.write(to_json(results, sweep, env) + "\n")
        print(f"wrote {json_path}", file=sys.stderr)
    if plot_path is not None:
        plot(sweep, plot_path, env)
        print(f"wrote {plot_path}", file=sys.stderr)
    if all(r.ratio is None for r in results):
        print(f"{PROG}: error: every case was skipped (see above)", file=sys.stderr)
        return 1
    return 0
