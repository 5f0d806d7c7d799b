"""Interleaved timing: a checked workload against its `jaxtyping_disable` baseline,
in one process, A, B, A, B, ..., and the median of the per-round ratios, with their
spread (the lowest and the highest round).

We don't time A's rounds and then B's: on a shared machine the load changes over
seconds (other processes, CPU frequency), and a drift between two separate runs
shows up as a ratio. Alternating short blocks puts both sides under the same load,
and the median of per-round ratios discards the rounds a spike hit.
"""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, TextIO

from .._interrupt import checkpoint

__all__ = [
    "Measurement",
    "Progress",
    "crosses_one",
    "interleaved",
    "jaxtyping_disabled",
]

# A workload: `run(n)` does `n` iterations and waits for JAX to finish them.
Run = Callable[[int], Any]


class Measurement(NamedTuple):
    ratio: float
    """Median over rounds of (checked time per iteration) / (baseline time per iteration)."""
    checked_s: float
    """Median time per iteration of the checked workload, seconds."""
    baseline_s: float
    """Median time per iteration of the baseline, seconds."""
    rounds: int
    iterations: tuple[int, int]
    """Iterations per block: (checked, baseline)."""
    ratios: tuple[float, ...] = ()
    """Each round's ratio, in the order measured."""

    @property
    def low(self) -> float:
        """The lowest round's ratio."""
        return min(self.ratios, default=self.ratio)

    @property
    def high(self) -> float:
        """The highest round's ratio."""
        return max(self.ratios, default=self.ratio)

    @property
    def noise(self) -> bool:
        """Whether the rounds fall on both sides of 1.0: the checked workload was
        faster than the baseline in some rounds and slower in others, so no
        difference was measured, whatever the median says."""
        return crosses_one(self.low, self.high)


def crosses_one(low: float, high: float) -> bool:
    """Whether the spread `low`..`high` of a ratio includes 1.0."""
    return low <= 1.0 <= high


@contextlib.contextmanager
def jaxtyping_disabled(disabled: bool = True) -> Iterator[None]:
    """`jaxtyping.config.jaxtyping_disable`, set for the duration of the block.

    jaxtyping reads it at call time, so flipping it between two blocks switches every
    `jaxtyped` check of the process off and on without redefining anything.
    """
    from jaxtyping import config

    before = config.jaxtyping_disable
    config.update("jaxtyping_disable", disabled)
    try:
        yield
    finally:
        config.update("jaxtyping_disable", before)


def _time(run: Run, n: int, disabled: bool) -> float:
    with jaxtyping_disabled(disabled):
        # Like `timeit`: a collection in the middle of one block, not the other,
        # would be charged to whichever side happened to allocate last.
        enabled = gc.isenabled()
        gc.disable()
        try:
            start = time.perf_counter()
            run(n)
            return time.perf_counter() - start
        finally:
            if enabled:
                gc.enable()


def interleaved(
    checked: Run,
    baseline: Run,
    *,
    rounds: int,
    block_s: float,
    iterations: int | None = None,
) -> Measurement:
    """Time `checked` (checks on) against `baseline` (`jaxtyping_disable=True`).

    **Arguments:**

    - `checked`, `baseline`: `run(n)` callables.
    - `rounds`: how many A/B pairs.
    - `block_s`: the wall time each block aims for; the number of iterations per
        block is chosen from one timed iteration of each side.
    - `iterations`: a fixed number of iterations per block instead (both sides).

    **Returns:**

    A `Measurement`.
    """
    # Warm up: the first call traces and compiles. Ctrl-C is taken between blocks
    # (`checkpoint`), never inside one, which may be inside JAX.
    checkpoint()
    _time(checked, 1, False)
    _time(baseline, 1, True)
    if iterations is not None:
        n_a = n_b = iterations
    else:
        n_a = max(1, math.ceil(block_s / max(_time(checked, 1, False), 1e-9)))
        n_b = max(1, math.ceil(block_s / max(_time(baseline, 1, True), 1e-9)))
    ratios, per_a, per_b = [], [], []
    for _ in range(rounds):
        checkpoint()
        a = _time(checked, n_a, False) / n_a
        checkpoint()
        b = _time(baseline, n_b, True) / n_b
        per_a.append(a)
        per_b.append(b)
        ratios.append(a / b)
    return Measurement(
        statistics.median(ratios),
        statistics.median(per_a),
        statistics.median(per_b),
        rounds,
        (n_a, n_b),
        tuple(ratios),
    )


class Progress:
    """A one-line progress bar on stderr, redrawn in place; silent when stderr is
    not a terminal (CI logs, pytest) unless forced on."""

    def __init__(
        self, total: int, *, enabled: bool | None = None, stream: TextIO | None = None
    ):
        self.total = max(total, 1)
        self.done = 0
        self.stream = sys.stderr if stream is None else stream
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._start = time.perf_counter()
        self._width = 0

    def update(self, label: str) -> None:
        """Show `label` as the step now running."""
        if not self.enabled:
            return
        filled = int(24 * self.done / self.total)
        elapsed = time.perf_counter() - self._start
        line = (
            f"[{'#' * filled}{'.' * (24 - filled)}] {self.done}/{self.total} "
            f"{elapsed:4.0f}s  {label}"
        )[:100]
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def advance(self) -> None:
        self.done += 1

    def close(self) -> None:
        """Clear the bar (once: closing it again does nothing)."""
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0
