"""The time a host callback's own Python takes, unwatched and watched: shared by
`runtime_guard_overhead.py` (watched by the runtime guard) and `profile_overhead.py`
(inside a running `profile()`).

A program may time its callbacks: tqdm's `update` prints one more line whenever
0.1 s has passed since its last, so a progress meter whose refreshes run slower
lives longer and prints more lines (Diffrax's `test_tqdm_progress_meter` counts
them). We time the callback's Python from inside
it, plain and checked by jaxtyping (as jaxtyping's import hook checks a library's
progress meter), unwatched and watched interleaved round by round, and report the
medians and the median of the per-round ratios. We also time the *period*, from
the start of one run of the callback to the start of the next: what tqdm's rule
sees, since a watcher's work after the callback returned (and JAX's, and the
jitted loop's) lies in it. "jaxtyped, nested" is Diffrax's progress meter under
jaxtyping's import hook: a checked function with no annotations (the hook
decorates it all the same) that calls the checked refresh, two checks a run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any


def _refresh(n: float) -> str:
    """What a progress meter's refresh does: a little formatting, a few calls."""
    width = 40
    done = int(width * (n % 100) / 100)
    parts = []
    for i in range(20):
        parts.append(f"{i:3d}|{'#' * done}{' ' * (width - done)}| {n:6.2f}%")
    return "\r".join(parts)


Row = tuple[float, float, float, float, float]


def callback_cost(
    watched: Callable[[bool], AbstractContextManager[Any]], rounds: int, calls: int
) -> dict[str, Row]:
    """Per figure ("own time": one run of the callback's own Python, "period": from
    one run's start to the next's) and kind of callback ("plain", "jaxtyped",
    "jaxtyped, nested"), labelled "FIGURE, KIND": the median outside
    `watched(False)` and inside `watched(True)`, the median of the per-round
    ratios, and the lowest and highest round."""
    import jax
    import jax.numpy as jnp
    from beartype import beartype
    from jaxtyping import ArrayLike, Float, jaxtyped

    spent: list[float] = []
    starts: list[float] = []

    def plain(x):
        start = time.perf_counter()
        starts.append(start)
        _refresh(float(x))
        spent.append(time.perf_counter() - start)

    @jaxtyped(typechecker=beartype)
    def checked_refresh(x: Float[ArrayLike, ""]) -> None:
        _refresh(float(x))

    def checked(x):
        start = time.perf_counter()
        starts.append(start)
        checked_refresh(x)
        spent.append(time.perf_counter() - start)

    @jaxtyped(typechecker=beartype)
    def step_bar(x):  # no annotations: jaxtyping's import hook decorates it too
        checked_refresh(x)

    def nested(x):
        start = time.perf_counter()
        starts.append(start)
        step_bar(x)
        spent.append(time.perf_counter() - start)

    out = {}
    for name, callback in (
        ("plain", plain),
        ("jaxtyped", checked),
        ("jaxtyped, nested", nested),
    ):

        def body(i, x, callback=callback):
            jax.debug.callback(callback, x)
            return x + 1.0

        step = jax.jit(lambda x, body=body: jax.lax.fori_loop(0, calls, body, x))

        def run(on: bool, step: Any = step) -> tuple[float, float]:
            spent.clear()
            starts.clear()
            with watched(on):
                jax.block_until_ready(step(jnp.zeros(())))
                jax.effects_barrier()
            periods = [b - a for a, b in zip(starts, starts[1:], strict=False)]
            return statistics.median(spent), statistics.median(periods)

        run(False), run(True)  # compiled, checker set up
        figures: dict[str, tuple[list[float], list[float], list[float]]] = {
            "own time": ([], [], []),
            "period": ([], [], []),
        }
        for _ in range(rounds):
            a, b = run(False), run(True)
            for i, (off, on, ratios) in enumerate(figures.values()):
                off.append(a[i])
                on.append(b[i])
                ratios.append(b[i] / a[i])
        for figure, (off, on, ratios) in figures.items():
            out[f"{figure}, {name}"] = (
                statistics.median(off),
                statistics.median(on),
                statistics.median(ratios),
                min(ratios),
                max(ratios),
            )
    return out
