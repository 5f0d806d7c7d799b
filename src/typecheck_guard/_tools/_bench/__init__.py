"""`typecheck-guard bench`. See README.md in this directory for the design."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["run"]


def _loads(checker: str) -> bool:
    from ._scenarios import Unavailable, load_checker

    try:
        load_checker(checker)
    except Unavailable:
        return False
    return True


def run(
    preset: str = "quick",
    json_path: str | None = None,
    plot_path: str | None = None,
    checkers: Sequence[str] | None = None,
    scenarios: Sequence[str] | None = None,
    progress: bool | None = None,
) -> int:
    """Run the benchmark, print the table, write the JSON and the plot; exit code."""
    from ._measure import Progress
    from ._report import plot, table, to_json
    from ._run import CHECKERS, PRESETS, count_steps, environment, run_cases, run_sweep

    chosen = PRESETS[preset]
    checkers = tuple(dict.fromkeys(checkers or CHECKERS))
    sweep_checker = None
    if plot_path is not None:
        sweep_checker = next((c for c in checkers if _loads(c)), None)
        if sweep_checker is None:
            print(
                f"typecheck-guard bench: error: --plot needs one of {', '.join(checkers)} "
                "to be usable (see the notes of a run without --plot)",
                file=sys.stderr,
            )
            return 2
    bar = Progress(
        count_steps(chosen, checkers, scenarios, plot_path is not None),
        enabled=progress,
    )
    try:
        results = run_cases(chosen, checkers, scenarios, bar)
        sweep = run_sweep(chosen, sweep_checker, bar) if sweep_checker else []
    finally:
        bar.close()
    env = environment(chosen)
    print(table(results, env))
    if json_path is not None:
        with open(json_path, "w") as f:
            f.write(to_json(results, sweep, env) + "\n")
        print(f"wrote {json_path}", file=sys.stderr)
    if plot_path is not None:
        plot(sweep, plot_path, env)
        print(f"wrote {plot_path}", file=sys.stderr)
    return 0
