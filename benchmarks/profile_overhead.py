"""What `typecheck-guard profile` adds to a program, and how close its reported check
time is to the time the checks really take.

Two workloads of `typecheck-guard bench`: the flax.struct state (a jitted step
returning a jaxtyped `flax.struct` whose `PyTree[Float[Array, "..."]]` field holds
200 arrays: one check per call, at dispatch) and an eager call of a jaxtyped function with a 200-leaf
`PyTree[...]` argument. Per round, interleaved in one process (A, B, C, A, B, C, ...):

- A: the workload, checks on, not profiled;
- B: the same, inside a running `typecheck_guard.profile()`;
- C: the same with `jaxtyping_disable=True` (no check runs; for the third workload,
  a function checked by the checker alone, it does not switch the check off, so
  "on - off" reads as the whole call).

A fourth workload makes many small checks deep in the stack, as jaxtyping's import
hook does in a test suite: a checked function calling another ten times, 60 frames
down. A fifth runs no check at all: eager JAX code (a few `jax.numpy` operations on
small arrays, Python-bound), the price of profiling for the rest of a program.
Last, the time a host callback's own Python takes inside a running profile against
outside one (`_callback_cost.py`), plain and with one small jaxtyped check in it:
what a program that times its callbacks (a progress meter) sees.

We report the medians of the per-round ratios B / A (the profiler's overhead, with
the lowest and highest round) and (reported check time per call) / (A - C) (how far
the report is from "checks on minus checks off"), and (the profiler's estimate of its own
time per call, `Profile.profiler_seconds`) / (B - A): how far the estimate the
report corrects its shares by is from the measured cost (the median of the
per-round ratios, and in brackets the median of the estimates and of B - A; where
B - A is within the noise, the ratio is too). The step is made while the
profiler's factory patches are on, as under `typecheck-guard profile`, for A and B
alike. B is the steady state: we attach the profiler for each round, and leave one
call after attaching out of the timing (attaching re-instruments the code that runs
next on Python 3.12+, a cost paid once per attach, not per call).

    python benchmarks/profile_overhead.py [--rounds 15] [--calls 20] [--leaves 200]
        [--checker beartype|typeguard] [--every-checker]

`--every-checker` profiles with `profile(every_checker=True)` (on Python 3.11, a
profile function on every call; no effect on 3.12+).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import platform
import statistics
import sys
import time
from typing import Any

from _callback_cost import callback_cost

import typecheck_guard
from typecheck_guard._tools._bench._measure import jaxtyping_disabled
from typecheck_guard._tools._bench._scenarios import (
    PRESETS,
    _eager_prepare,
    flax_state_prepare,
    load_checker,
)


def time_per_call(
    run: Any, n: int, *, disabled: bool = False, prof: Any = None
) -> float:
    """Seconds per call of `run(n)`. With `prof`, inside that profile, after one
    call that is not timed (attaching the profiler re-instruments the code that runs
    next on Python 3.12+, a one-time cost we leave out of the steady state): the
    profile's checks of the timed calls are `prof.timed_seconds` and
    `prof.timed_checks`, its estimate of its own time `prof.timed_own`."""
    with jaxtyping_disabled(disabled):
        gc.collect()
        gc.disable()
        try:
            if prof is not None:
                prof.start()
                run(1)
                before = (
                    prof.check_seconds,
                    sum(s.count for s in prof.sites),
                    prof._profiler + prof._meter[0](prof._meter[1]),
                )
            start = time.perf_counter()
            run(n)
            elapsed = time.perf_counter() - start
            if prof is not None:
                own = prof._profiler + prof._meter[0](prof._meter[1])
                prof.stop()
                prof.timed_seconds = prof.check_seconds - before[0]
                prof.timed_checks = sum(s.count for s in prof.sites) - before[1]
                # Unclamped (`profiler_seconds` is at most the wall time outside
                # checks, of the whole profile).
                prof.timed_own = own - before[2]
            return elapsed / n
        finally:
            gc.enable()


def measure(
    run: Any, rounds: int, calls: int, switchable: bool = True, every: bool = False
) -> dict[str, float]:
    for _ in range(2):  # trace, compile, first checks
        time_per_call(run, 1)
        time_per_call(run, 1, disabled=True)
        with typecheck_guard.profile(every_checker=every):
            run(1)
    overhead, accuracy, per_a, per_b, per_c, reported = [], [], [], [], [], []
    estimated, estimate_ratio = [], []
    for _ in range(rounds):
        a = time_per_call(run, calls)
        prof = typecheck_guard.profile(every_checker=every)
        b = time_per_call(run, calls, prof=prof)
        c = time_per_call(run, calls, disabled=True)
        checks = prof.timed_seconds / calls
        overhead.append(b / a)
        accuracy.append(checks / (a - c) if switchable and a > c else float("nan"))
        per_a.append(a)
        per_b.append(b)
        per_c.append(c)
        reported.append(checks)
        estimated.append(prof.timed_own / calls)
        estimate_ratio.append(estimated[-1] / (b - a) if b > a else float("nan"))
    return {
        "overhead": statistics.median(overhead),
        "overhead_low": min(overhead),
        "overhead_high": max(overhead),
        "accuracy": _median_measured(accuracy),
        "unprofiled_s": statistics.median(per_a),
        "profiled_s": statistics.median(per_b),
        "disabled_s": statistics.median(per_c),
        "reported_s": statistics.median(reported),
        "estimated_s": statistics.median(estimated),
        "estimate_ratio": _median_measured(estimate_ratio),
    }


def _median_measured(ratios: list[float]) -> float:
    """The median of the rounds that measured a difference (not `nan`), or `nan`
    (printed as "-") when most rounds measured none: a median over `nan`s depends
    on where they happen to sort."""
    measured = [r for r in ratios if r == r]
    return (
        statistics.median(measured) if 2 * len(measured) > len(ratios) else float("nan")
    )


def _checker_alone(checker: Any, leaves: int) -> Any:
    """The eager call, checked by the checker alone (no `@jaxtyped` around it): on
    Python 3.11 the profiler then watches every call inside the check (the fast path
    is jaxtyping's, see `typecheck_guard/_profile/_engine.py`)."""
    import jax.numpy as jnp
    from jaxtyping import Array, Float, PyTree

    def evaluate(params: PyTree[Float[Array, "..."]]) -> None:
        pass

    evaluate = checker(evaluate)
    params = {f"w{i:05d}": jnp.full((16,), 1.0) for i in range(leaves)}

    def run(n: int) -> None:
        for _ in range(n):
            evaluate(params)

    return run


def _nested_checks(checker: Any, depth: int = 60) -> Any:
    """Eleven small checks a call, 60 frames down the stack: what jaxtyping's
    import hook makes of a library's code under a test runner."""
    import jax.numpy as jnp
    from jaxtyping import Array, Float, jaxtyped

    def leaf(x):
        return x

    def middle(x):
        for _ in range(10):
            x = leaf(x)
        return x

    # Annotated with objects: under `from __future__ import annotations` the
    # strings would name what only this function's scope has, and jaxtyping would
    # check nothing.
    vector = Float[Array, " n"]
    for fn in (leaf, middle):
        fn.__annotations__ = {"x": vector, "return": vector}
    leaf = jaxtyped(typechecker=checker)(leaf)
    middle = jaxtyped(typechecker=checker)(middle)
    try:
        leaf(jnp.ones((2, 2)))
    except Exception:  # the check runs: not a vector
        pass
    else:
        raise AssertionError("_nested_checks: the checks check nothing")

    x = jnp.ones((3,))

    def run(n: int, depth: int = depth) -> None:
        if depth:
            return run(n, depth - 1)
        for _ in range(n):
            middle(x)

    return run


def _eager_jax() -> Any:
    """Eager JAX code, no check anywhere: what profiling costs the rest of a
    program."""
    import jax.numpy as jnp

    x = jnp.ones((4, 4))

    def run(n: int) -> None:
        for _ in range(n):
            y = x
            for _ in range(100):
                y = jnp.tanh(y @ x) + 1.0
            y.block_until_ready()

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--leaves", type=int, default=200)
    parser.add_argument("--checker", default="beartype")
    parser.add_argument("--every-checker", action="store_true")
    options = parser.parse_args()

    import jax

    checker = load_checker(options.checker)
    every = options.every_checker
    # The step is made under the factory patches.
    with typecheck_guard.profile(every_checker=every):
        step = flax_state_prepare(checker, options.leaves).make("none")
    preset = PRESETS["quick"]._replace(eager_leaves=options.leaves)
    eager = _eager_prepare(checker, preset).baseline
    if sys.version_info >= (3, 12):
        backend = "sys.monitoring"
    else:
        backend = "sys.setprofile" if every else "checker hooks, no profile function"
    print(
        f"Python {platform.python_version()} ({backend}), jax {jax.__version__}, "
        f"{options.checker}, {options.leaves} leaves; median of {options.rounds} "
        f"interleaved rounds x {options.calls} calls"
    )
    print(
        f"{'workload':28} {'unprofiled':>11} {'profiled':>11} {'overhead':>9} "
        f"{'on - off':>10} {'reported':>10} {'reported / (on - off)':>22} "
        f"{'estimate / (B - A)':>19} overhead rounds"
    )
    for name, run, switchable in (
        ("flax.struct state step", step, True),
        ("eager PyTree call", eager, True),
        ("eager, checker alone", _checker_alone(checker, options.leaves), False),
        ("nested checks, deep stack", _nested_checks(checker), True),
        ("eager JAX, no check", _eager_jax(), False),
    ):
        m = measure(run, options.rounds, options.calls, switchable, every)
        print(
            f"{name:28} {m['unprofiled_s'] * 1e3:9.3f}ms {m['profiled_s'] * 1e3:9.3f}ms "
            f"{m['overhead']:8.2f}x "
            f"{(m['unprofiled_s'] - m['disabled_s']) * 1e3:8.3f}ms "
            f"{m['reported_s'] * 1e3:8.3f}ms "
            + (
                f"{m['accuracy']:21.2f}x"
                if switchable and m["accuracy"] == m["accuracy"]
                else f"{'-':>22}"
            )
            + (
                f" {m['estimate_ratio']:5.2f}x"
                if m["estimate_ratio"] == m["estimate_ratio"]
                else f" {'-':>6}"
            )
            + f" ({m['estimated_s'] * 1e3:.3f}/"
            + f"{(m['profiled_s'] - m['unprofiled_s']) * 1e3:.3f}ms)"
            + f" {m['overhead_low']:.2f}-{m['overhead_high']:.2f}"
        )

    def watched(on: bool) -> Any:
        return (
            typecheck_guard.profile(every_checker=every)
            if on
            else contextlib.nullcontext()
        )

    for name, (ta, tb, ratio, low, high) in callback_cost(
        watched, options.rounds, options.calls * 10
    ).items():
        print(
            f"{'callback ' + name:28} {ta * 1e3:9.3f}ms {tb * 1e3:9.3f}ms "
            f"{ratio:8.2f}x {'':>10} {'':>10} {'-':>22} {'':>19} {low:.2f}-{high:.2f}"
        )
    typecheck_guard.uninstall()
    return 0


if __name__ == "__main__":
    sys.exit(main())
