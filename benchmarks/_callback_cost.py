"""The time a host callback's own Python takes, unwatched and watched: shared by
`runtime_guard_overhead.py` (watched by the runtime guard) and `profile_overhead.py`
(inside a running `profile()`).

A program may time its callbacks: tqdm's `update` prints one more line whenever
0.1 s has passed since its last, so a progress meter whose refreshes run slower
lives longer and prints more lines (Diffrax's `test_tqdm_progress_meter` counts
them). We time the callback's Python from inside
it, plain and checked by jaxtyping (as jaxtyping's import hook checks a library's
progress meter), unwatched and watched interleaved round by round, and report the
medians and the median of the per-round ratios.
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


def callback_cost(
    watched: Callable[[bool], AbstractContextManager[Any]], rounds: int, calls: int
) -> dict[str, tuple[float, float, float, float, float]]:
    """Per kind of callback ("plain", "jaxtyped"): the median time of one run of its
    own Python outside `watched(False)` and inside `watched(True)`, the median of the
    per-round ratios, and the lowest and highest round."""
    import jax
    import jax.numpy as jnp
    from beartype import beartype
    from jaxtyping import ArrayLike, Float, jaxtyped

    spent: list[float] = []

    def plain(x):
        start = time.perf_counter()
        _refresh(float(x))
        spent.append(time.perf_counter() - start)

    @jaxtyped(typechecker=beartype)
    def checked_refresh(x: Float[ArrayLike, ""]) -> None:
        _refresh(float(x))

    def checked(x):
        start = time.perf_counter()
        checked_refresh(x)
        spent.append(time.perf_counter() - start)

    out = {}
    for name, callback in (("plain", plain), ("jaxtyped", checked)):

        def body(i, x, callback=callback):
            jax.debug.callback(callback, x)
            return x + 1.0

        step = jax.jit(lambda x, body=body: jax.lax.fori_loop(0, calls, body, x))

        def run(on: bool, step: Any = step) -> float:
            spent.clear()
            with watched(on):
                jax.block_until_ready(step(jnp.zeros(())))
                jax.effects_barrier()
            return statistics.median(spent)

        run(False), run(True)  # compiled, checker set up
        plain_times, watched_times, ratios = [], [], []
        for _ in range(rounds):
            a, b = run(False), run(True)
            plain_times.append(a)
            watched_times.append(b)
            ratios.append(b / a)
        out[name] = (
            statistics.median(plain_times),
            statistics.median(watched_times),
            statistics.median(ratios),
            min(ratios),
            max(ratios),
        )
    return out
