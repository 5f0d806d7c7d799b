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
    was skipped; 130 when interrupted (Ctrl-C), after printing the table of what
    was measured, without writing the JSON or the plot; else 0. `json_path` `-`:
    the JSON goes to standard output, and the table to standard error.
    """
    from .._interrupt import deferred

    # From here on, Ctrl-C is taken at a safe point, even while JAX imports.
    with deferred(PROG):
        return _run(preset, json_path, plot_path, checkers, scenarios, progress)


def _run(
    preset: str,
    json_path: str | None,
    plot_path: str | None,
    checkers: Sequence[str] | None,
    scenarios: Sequence[str] | None,
    progress: bool | None,
) -> int:
    from .._interrupt import checkpoint
    from .._output import is_stdout, stdout_to_stderr, write_atomically, write_text
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
    # Standard output holds the JSON alone when it goes there.
    json_out = is_stdout(json_path)
    out = sys.stderr if json_out else sys.stdout
    env = environment(chosen)
    steps = count_steps(chosen, checkers, scenarios, plot_path is not None)
    bar = Progress(steps, enabled=progress)
    results: list = []
    sweep: list = []
    try:
        with stdout_to_stderr(json_out):
            for result in run_cases(chosen, checkers, scenarios, bar):
                results.append(result)
            if plot_path is not None:
                for point in run_sweep(chosen, usable[0], bar):
                    sweep.append(point)
            # A Ctrl-C during the last block: stop before writing, as after any.
            checkpoint()
    except KeyboardInterrupt:
        bar.close()
        print(table(results, env, reasons), file=out)
        _interrupted(len(results) + len(sweep), steps, json_path, plot_path)
        return 130
    finally:
        bar.close()
    print(table(results, env, reasons), file=out)
    out.flush()
    if json_path is not None:
        write_text(json_path, to_json(results, sweep, env) + "\n")
        if not json_out:
            print(f"wrote {json_path}", file=sys.stderr)
    if plot_path is not None:
        write_atomically(plot_path, lambda tmp: plot(sweep, tmp, env))
        print(f"wrote {plot_path}", file=sys.stderr)
    if all(r.ratio is None for r in results):
        print(f"{PROG}: error: every case was skipped (see above)", file=sys.stderr)
        return 1
    return 0


def _interrupted(
    done: int, steps: int, json_path: str | None, plot_path: str | None
) -> None:
    unwritten = [
        option
        for option, path in (("--json", json_path), ("--plot", plot_path))
        if path is not None
    ]
    message = (
        f"{PROG}: interrupted (Ctrl-C) after {done} of {steps} measurements: the "
        "table above holds them"
        if done
        else f"{PROG}: interrupted (Ctrl-C) before the first measurement"
    )
    if unwritten:
        message += f"; {' and '.join(unwritten)} not written"
    print(message, file=sys.stderr)
