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

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any


@contextlib.contextmanager
def guard_watching(level: str = "log") -> Iterator[None]:
    """The runtime guard on for the block, at `level`, and wholly off outside it,
    as in a run without the plugin. (`typecheck_guard.runtime_checks(level)` keeps
    the guard's patches on for the rest of the process: every unwatched round after
    the first would pay for them, jaxtyping's shape memo hooks and, on Python 3.12+,
    the guard's `sys.monitoring` events, and the ratio would be to that, not to a
    plain program.) Must be the only holder of the guard's patches: the last
    `release` takes them off."""
    from typecheck_guard._guard import _jitwrap, _runtime

    if _jitwrap.active():
        raise RuntimeError("guard_watching: the guard's patches are on already")
    _jitwrap.acquire()
    try:
        with _runtime.RuntimeChecks(level):
            yield
    finally:
        _jitwrap.release()
    if _jitwrap.active():
        raise RuntimeError("guard_watching: the guard's patches stayed on")


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

    def checked_refresh(x):
        _refresh(float(x))

    # Annotated with objects, not with the strings `from __future__ import
    # annotations` would leave: jaxtyping resolves those in the module's globals
    # only, where none of these names is, and then checks nothing.
    checked_refresh.__annotations__ = {"x": Float[ArrayLike, ""], "return": None}
    checked_refresh = jaxtyped(typechecker=beartype)(checked_refresh)
    try:
        checked_refresh("not an array")
    except Exception:  # what it is for: the check runs
        pass
    else:
        raise AssertionError("callback_cost: the callback's check checks nothing")

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
