"""A progress meter over host callbacks, timed as tqdm times it: plain, watched by
the runtime guard, and inside a running profile.

Diffrax's `test_tqdm_progress_meter` solves an ODE under `jax.jit(jax.vmap(...))`
with a `TqdmProgressMeter`: a host callback refreshes a tqdm bar every 5 steps, 100
times. Under jaxtyping's import hook (Diffrax's own `pyproject.toml` passes
`--jaxtyping-packages=diffrax,beartype.beartype`) each refresh makes two checks: the
unannotated `_ProgressMeterManager.step.<locals>._step`, which the hook decorates
all the same, and `TqdmProgressMeter._step_bar`. tqdm's `update(n=0)` prints one
more line once 0.1 s has passed since its last print, and the test counts the
lines: so it passes if and only if the bar lives less than about 0.1 s. Whatever a
watcher adds to a refresh, inside the callback or between two of them, the bar
lives that much longer: 100 times over.

Per round, interleaved: plain; `typecheck_guard.runtime_checks("log")` (the guard
listening, as under `--typecheck-guard=warn`); `typecheck_guard.profile()`. Each
times the second solve in its block (the first after attaching pays for
instrumenting the code that runs, once per block). We report the bar's life
(tqdm's creation to its close), the time from one refresh to the next (the median
over the bar's refreshes, which one slow refresh does not move), and in how many
rounds the bar printed the lines the test expects.

    python benchmarks/progress_meter.py [--rounds 15]

Needs diffrax and tqdm (`pip install diffrax tqdm`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from typing import Any

# The lines the test expects from the `jax.jit(jax.vmap(solve))` case.
EXPECTED_LINES = 102


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    try:
        import tqdm
        from jaxtyping import install_import_hook

        with install_import_hook("diffrax", "beartype.beartype"):
            import diffrax
    except ImportError as error:
        print(f"progress_meter.py needs diffrax and tqdm: {error}", file=sys.stderr)
        return 2
    import jax
    import jax.numpy as jnp
    from _callback_cost import guard_watching

    import typecheck_guard

    # Per bar: its life, and the median time from one refresh to the next.
    bars: list[tuple[float, float]] = []
    original = tqdm.tqdm.__init__, tqdm.tqdm.refresh, tqdm.tqdm.close

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original[0](self, *args, **kwargs)
        self._benchmark_stamps = [time.perf_counter()]

    def refresh(self: Any, *args: Any, **kwargs: Any) -> Any:
        self.__dict__.get("_benchmark_stamps", []).append(time.perf_counter())
        return original[1](self, *args, **kwargs)

    def close(self: Any) -> None:
        stamps = self.__dict__.pop("_benchmark_stamps", None)
        if stamps is not None:
            stamps.append(time.perf_counter())
            periods = [b - a for a, b in zip(stamps[1:], stamps[2:], strict=False)]
            bars.append((stamps[-1] - stamps[0], statistics.median(periods)))
        original[2](self)

    tqdm.tqdm.__init__, tqdm.tqdm.refresh, tqdm.tqdm.close = init, refresh, close

    def solve(t0: Any) -> Any:
        return diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, args: -0.2 * y),
            diffrax.Dopri5(),
            t0,
            5,
            0.01,
            1.0,
            saveat=diffrax.SaveAt(steps=True),
            progress_meter=diffrax.TqdmProgressMeter(refresh_steps=5),
        )

    step = jax.jit(jax.vmap(solve))
    variants = {
        "plain": contextlib.nullcontext,
        # On for its rounds only (`guard_watching`): `runtime_checks("log")` would
        # keep the guard's patches on, and every later plain round would pay for them.
        'runtime_checks("log")': guard_watching,
        "profile()": typecheck_guard.profile,
    }

    def run(variant: str) -> tuple[float, float, int]:
        with variants[variant]():
            # The steady state: attaching a watcher re-instruments the code that
            # runs, which the first solve after it pays for.
            for _ in range(2):
                bars.clear()
                err = io.StringIO()
                with contextlib.redirect_stderr(err):
                    jax.block_until_ready(step(jnp.arange(3.0)))
                    jax.effects_barrier()
        ((life, period),) = bars
        return life, period, err.getvalue().count("\r")

    for variant in variants:  # compiled; each checker and watcher set up
        run(variant)
    results: dict[str, list[tuple[float, float, int]]] = {v: [] for v in variants}
    for _ in range(options.rounds):
        for variant in variants:
            results[variant].append(run(variant))
    print(
        f"Diffrax {diffrax.__version__}, jax {jax.__version__}, Python "
        f"{sys.version.split()[0]}: the bar of jax.jit(jax.vmap(solve)), "
        f"{options.rounds} interleaved rounds; per figure its median, the median of "
        "the per-round ratios to plain, and the lowest and highest round"
    )
    print(
        f"{'':24} {'bar life':>9} {'/ plain':>8} {'rounds':>15} "
        f"{'a refresh':>10} {'/ plain':>8} {'rounds':>15} {'as expected':>12}"
    )
    for variant, runs in results.items():
        row = f"{variant:24}"
        for i in (0, 1):
            ratios = [r[i] / p[i] for r, p in zip(runs, results["plain"], strict=True)]
            spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
            if variant != "plain" and min(ratios) <= 1.0 <= max(ratios):
                spread += " noise"  # the rounds disagree on which is slower
            row += (
                f" {statistics.median(r[i] for r in runs) * 1e3:7.3f}ms "
                f"{statistics.median(ratios):7.3f}x {spread:>15}"
            )
        passed = sum(lines == EXPECTED_LINES for *_, lines in runs)
        print(f"{row} {passed:>6}/{len(runs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
