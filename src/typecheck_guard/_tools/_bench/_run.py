"""Running the scenarios: every case under every checker and mode, then the sweep
over the number of leaves that `--plot` draws."""

from __future__ import annotations

import dataclasses
import math
import os
import platform
from collections.abc import Iterator, Sequence
from typing import Any

from .._interrupt import checkpoint
from ._measure import Progress, interleaved
from ._scenarios import (
    CASES,
    PRESETS,
    Case,
    Preset,
    Unavailable,
    flax_state_prepare,
    load_checker,
    missing,
    mode_context,
)

__all__ = ["CHECKERS", "Result", "SweepPoint", "environment", "run_cases", "run_sweep"]

CHECKERS = ("beartype", "typeguard")
SWEEP_MODES = ("none", "unflatten_safe", "unflatten_safe_with", "install")


@dataclasses.dataclass
class Result:
    scenario: str
    variant: str
    title: str
    checker: str
    mode: str
    ratio: float | None = None
    """Checked time / `jaxtyping_disable` time, the median of the rounds; `None` when
    skipped."""
    checked_s: float | None = None
    baseline_s: float | None = None
    """This mode's own baseline: the checks-off time measured between its rounds."""
    rounds: int = 0
    skipped: str | None = None
    note: str | None = None
    label: str = ""
    ratio_min: float | None = None
    """The lowest round's ratio."""
    ratio_max: float | None = None
    """The highest round's ratio."""
    noise: bool | None = None
    """Whether `ratio_min`..`ratio_max` includes 1.0: no difference measured."""


@dataclasses.dataclass
class SweepPoint:
    leaves: int
    checker: str
    mode: str
    ratio: float
    checked_s: float
    baseline_s: float
    """This mode's own baseline at this size: the checks-off time measured between
    its rounds."""
    ratio_min: float | None = None
    ratio_max: float | None = None


def environment(preset: Preset) -> dict[str, Any]:
    """What the numbers were measured with."""
    from ..._compat._versions import installed

    versions = {
        name: installed(name)
        for name in (
            "jax",
            "jaxlib",
            "jaxtyping",
            "beartype",
            "typeguard",
            "flax",
            "equinox",
            "optax",
        )
    }
    try:
        import jax

        backend = jax.default_backend()
        devices = [d.device_kind for d in jax.devices()]
    except Exception as e:  # noqa: BLE001 - reported, not fatal
        backend, devices = f"unavailable ({e})", []
    return {
        "preset": preset.name,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "backend": backend,
        "devices": devices,
        "versions": versions,
        "rounds": preset.rounds,
        "block_s": preset.block_s,
        "state_leaves": preset.state_leaves,
        "resnet_shapes": (
            "real shapes"
            if preset.resnet_width_divisor == 1
            else f"channel widths / {preset.resnet_width_divisor}"
        )
        + f", {preset.resnet_dtype}",
        "eager_leaves": preset.eager_leaves,
    }


def _selected(scenarios: Sequence[str] | None) -> list[Case]:
    if not scenarios:
        return list(CASES)
    wanted = {s.lower() for s in scenarios}
    return [c for c in CASES if c.scenario.lower() in wanted]


def run_cases(
    preset: Preset,
    checkers: Sequence[str] = CHECKERS,
    scenarios: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> Iterator[Result]:
    """Measure every selected case under every checker and mode, yielding each
    result as it comes (so that an interrupted run keeps what it measured). A case
    that can't run here (a checker or a library not installed, a release too old)
    is reported as skipped, with the reason, and the others still run."""
    for checker_name in checkers:
        try:
            checker = load_checker(checker_name)
        except Unavailable as e:
            for case in _selected(scenarios):
                for mode in case.modes:
                    yield _skip(case, checker_name, mode, str(e))
                    if progress:
                        progress.advance()
            continue
        for case in _selected(scenarios):
            label = f"{case.label} ({checker_name})"
            if progress:
                progress.update(f"{label}: building")
            checkpoint()
            # The plain classes, before anything is installed.
            try:
                why = missing(case.needs)
                if why is not None:
                    raise Unavailable(why)
                prepared = case.prepare(checker, preset)
            except (Unavailable, ModuleNotFoundError) as e:
                # A module found but whose own dependency is missing fails here.
                why = (
                    str(e) if isinstance(e, Unavailable) else f"{type(e).__name__}: {e}"
                )
                for mode in case.modes:
                    yield _skip(case, checker_name, mode, why)
                    if progress:
                        progress.advance()
                continue
            for mode in case.modes:
                if progress:
                    progress.update(f"{label}: {mode}")
                yield _measure(case, checker_name, mode, prepared, preset)
                if progress:
                    progress.advance()


def _skip(case: Case, checker: str, mode: str, why: str) -> Result:
    return Result(
        case.scenario,
        case.variant,
        case.title,
        checker,
        mode,
        skipped=why,
        label=case.label,
    )


def _measure(
    case: Case, checker: str, mode: str, prepared: Any, preset: Preset
) -> Result:
    try:
        with mode_context(mode):
            checked = prepared.make(mode)
            m = interleaved(
                checked, prepared.baseline, rounds=preset.rounds, block_s=preset.block_s
            )
    except Unavailable as e:
        return _skip(case, checker, mode, str(e))
    return Result(
        case.scenario,
        case.variant,
        case.title,
        checker,
        mode,
        ratio=m.ratio,
        checked_s=m.checked_s,
        baseline_s=m.baseline_s,
        rounds=m.rounds,
        note=case.notes.get(mode),
        label=case.label,
        ratio_min=m.low,
        ratio_max=m.high,
        noise=m.noise,
    )


def count_steps(
    preset: Preset,
    checkers: Sequence[str],
    scenarios: Sequence[str] | None,
    sweep: bool,
) -> int:
    steps = len(checkers) * sum(len(c.modes) for c in _selected(scenarios))
    if sweep:
        steps += len(preset.sweep_leaves) * len(SWEEP_MODES)
    return steps


def run_sweep(
    preset: Preset, checker_name: str = "beartype", progress: Progress | None = None
) -> Iterator[SweepPoint]:
    """The flax.struct state over `preset.sweep_leaves` leaves: the data of `--plot`,
    yielded point by point. Each mode is measured against its own interleaved
    baseline."""
    checker = load_checker(checker_name)
    for leaves in preset.sweep_leaves:
        if progress:
            progress.update(f"sweep: {leaves} leaves, building")
        checkpoint()
        prepared = flax_state_prepare(checker, leaves)
        for mode in SWEEP_MODES:
            if progress:
                progress.update(f"sweep: {leaves} leaves, {mode}")
            with mode_context(mode):
                m = interleaved(
                    prepared.make(mode),
                    prepared.baseline,
                    rounds=max(3, preset.rounds // 3)
                    if leaves >= 1000
                    else preset.rounds,
                    block_s=preset.block_s,
                )
            yield SweepPoint(
                leaves,
                checker_name,
                mode,
                m.ratio,
                m.checked_s,
                m.baseline_s,
                m.low,
                m.high,
            )
            if progress:
                progress.advance()


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


__all__ += ["PRESETS", "count_steps", "finite"]
