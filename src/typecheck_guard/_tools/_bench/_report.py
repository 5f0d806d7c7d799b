"""What `typecheck-guard bench` prints, writes (`--json`) and draws (`--plot`)."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from ._measure import crosses_one
from ._run import Result, SweepPoint
from ._scenarios import MODE_LABELS, MODES

__all__ = ["plot", "table", "to_json"]

_MISSING = "-"
_WIDTH = 88
SCHEMA = 2
"""The version of `--json`'s layout. 2: scenarios named by what they measure
(`flax-state`, `ten-floats`, ...), each ratio with `ratio_min`, `ratio_max` and
`noise`, and the environment's `state_leaves` and `resnet_shapes`."""


def _ratio(r: float) -> str:
    return f"{r:.0f}" if r >= 100 else f"{r:.1f}" if r >= 10 else f"{r:.2f}"


def _cell(result: Result | None) -> str:
    if result is None:
        return _MISSING
    if result.ratio is None:
        return "skipped"
    if result.ratio_min is None or result.ratio_max is None:
        return f"{_ratio(result.ratio)}x"
    spread = f"[{_ratio(result.ratio_min)}-{_ratio(result.ratio_max)}]"
    if crosses_one(result.ratio_min, result.ratio_max):
        # Some rounds faster than checks off, some slower: the median would print
        # noise as a figure (0.51x for a mode that does nothing there).
        return f"~1x {spread}"
    return f"{_ratio(result.ratio)}x {spread}"


def _duration(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _baseline(results: Any) -> str:
    """The time per call with `jaxtyping_disable=True`: the median of the baselines
    each mode was measured against."""
    times = sorted(r.baseline_s for r in results if r.baseline_s is not None)
    return _duration(times[len(times) // 2]) if times else _MISSING


def _wrap(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(
        text,
        _WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "    ",
        break_on_hyphens=False,
    )


def table(
    results: Sequence[Result],
    environment: dict[str, Any],
    unavailable: Mapping[str, str] | None = None,
) -> str:
    """The results as text: one block per case, one row per mode, one column per
    checker, each cell the median ratio to `jaxtyping_disable` and its spread.
    `unavailable` maps each checker that can't run here (not installed, typeguard
    4) to the reason: those get a line, not a column."""
    versions = environment["versions"]
    out = [
        *textwrap.wrap(
            "typecheck-guard bench ({preset}): the time per call with checks on, "
            "divided by the time per call of the same workload with "
            "jaxtyping_disable=True (checks off), in {rounds} interleaved rounds: the "
            "median round [the lowest and the highest]. 1.00x: the checks cost "
            "nothing per call. ~1x: some rounds were faster than checks off and some "
            "slower, so no difference was measured.".format(**environment),
            _WIDTH,
        ),
        *textwrap.wrap(
            "({backend}, {cpus} CPUs, Python {python}; ".format(**environment)
            + ", ".join(f"{k} {v}" for k, v in versions.items() if v)
            + ")",
            _WIDTH,
            subsequent_indent=" ",
        ),
    ]
    whole = dict(unavailable or {})
    columns = [c for c in dict.fromkeys(r.checker for r in results) if c not in whole]
    cases: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        cases.setdefault((r.scenario, r.variant), []).append(r)
    for rows in cases.values():
        out.append("")
        out.extend(_block(rows, columns, environment))
    if whole:
        out.append("")
        for checker, why in whole.items():
            out.extend(_wrap(f"{checker}: skipped, {why}"))
    return "\n".join(out)


def _block(
    rows: Sequence[Result], columns: Sequence[str], environment: dict[str, Any]
) -> list[str]:
    first = rows[0]
    title = first.title.format(**environment)
    out = _wrap(f"{first.label}: {title}" if first.label else title)
    shown = [r for r in rows if r.checker in columns]
    reasons = {r.skipped for r in shown}
    if len(reasons) == 1 and None not in reasons:
        out.extend(_wrap(f"skipped: {reasons.pop()}", "  "))
        return out
    modes = [m for m in MODES if any(r.mode == m for r in shown)]
    cells = {(r.checker, r.mode): r for r in shown}
    grid = [
        ["", *columns],
        [
            "checks off",
            *(_baseline(r for r in shown if r.checker == c) for c in columns),
        ],
        *(
            [MODE_LABELS[m], *(_cell(cells.get((c, m))) for c in columns)]
            for m in modes
        ),
    ]
    widths = [max(len(line[i]) for line in grid) for i in range(len(grid[0]))]
    for line in grid:
        cells_ = (cell.ljust(w) for cell, w in zip(line, widths, strict=True))
        out.append(("  " + "  ".join(cells_)).rstrip())
    notes: dict[str, list[str]] = {}
    for r in shown:
        text = f"skipped, {r.skipped}" if r.skipped else r.note
        if text:
            where = MODE_LABELS[r.mode]
            if len(columns) > 1 and r.skipped:
                where += f" ({r.checker})"
            places = notes.setdefault(text, [])
            if where not in places:
                places.append(where)
    for text, places in notes.items():
        out.extend(_wrap(f"{', '.join(places)}: {text}", "  "))
    return out


def to_json(
    results: Sequence[Result], sweep: Sequence[SweepPoint], environment: dict[str, Any]
) -> str:
    return json.dumps(
        {
            "schema": SCHEMA,
            "what": "ratio = time per call with checks on / time per call of the same "
            "workload on plain classes with jaxtyping_disable=True (baseline_s), "
            "measured interleaved with it: the median round, and the lowest and "
            "highest (ratio_min, ratio_max); noise: they fall on both sides of 1.0",
            "environment": environment,
            "results": [dataclasses.asdict(r) for r in results],
            "sweep": [dataclasses.asdict(p) for p in sweep],
        },
        indent=2,
    )


# Figure colours per page background: the documentation shows the light image in
# its light palette and the dark one in its dark palette. Both have a transparent
# background, so each sits on the page's own colour.
_THEMES = {
    "light": {"text": "#1f1f1f", "baseline": "black", "grid": "#9e9e9e"},
    "dark": {"text": "#e2e2e2", "baseline": "#f5f5f5", "grid": "#8a8a8a"},
}


def plot(
    sweep: Sequence[SweepPoint],
    path: str,
    environment: dict[str, Any],
    *,
    theme: str = "light",
) -> None:
    """Top: overhead (ratio to `jaxtyping_disable`) against the number of leaves,
    one line per mode, with the band from its lowest to its highest round. Bottom:
    the time per call itself, each mode (solid) with the checks-off baseline it was
    measured against (dashed, same colour), which also grows with the leaves
    (dispatch, the step's own work). Each mode has its own baseline because each is
    measured interleaved with its own checks-off rounds: on a shared machine they
    differ from mode to mode, and one common line would make a mode look faster or
    slower than unchecked.

    Drawn at the width of a page of text (the two panels stacked, not side by side)
    so that the labels stay readable where the image is shown at that width.
    `theme` is `"light"` or `"dark"`: dark text for a light page, light text for a
    dark one; the background is transparent in both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    colours = _THEMES[theme]
    style: dict[Any, Any] = {
        "font.size": 12,
        "text.color": colours["text"],
        "axes.labelcolor": colours["text"],
        "axes.edgecolor": colours["text"],
        "xtick.color": colours["text"],
        "ytick.color": colours["text"],
        "legend.frameon": False,
        "savefig.transparent": True,
    }
    with plt.rc_context(style):
        fig, (ratio_ax, time_ax) = plt.subplots(2, 1, figsize=(7.5, 9), dpi=150)
        for mode in MODES:
            points = sorted(
                (p.leaves, p.ratio, p.checked_s, p.baseline_s, p.ratio_min, p.ratio_max)
                for p in sweep
                if p.mode == mode
            )
            if not points:
                continue
            xs, ratios, times, baselines, lows, highs = zip(*points, strict=True)
            (line,) = ratio_ax.plot(xs, ratios, marker="o", label=MODE_LABELS[mode])
            colour = line.get_color()
            if None not in lows and None not in highs:
                ratio_ax.fill_between(xs, lows, highs, color=colour, alpha=0.15)
            time_ax.plot(
                xs,
                [t * 1e3 for t in times],
                marker="o",
                color=colour,
                label=MODE_LABELS[mode],
            )
            time_ax.plot(
                xs,
                [t * 1e3 for t in baselines],
                color=colour,
                linestyle="--",
                marker=".",
                linewidth=1,
            )
        ratio_ax.axhline(1.0, color=colours["grid"], linestyle="--", linewidth=1)
        for ax in (ratio_ax, time_ax):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="both", color=colours["grid"], alpha=0.35)
        ratio_ax.legend(fontsize=11)
        handles, _ = time_ax.get_legend_handles_labels()
        handles.append(
            Line2D(
                [],
                [],
                color=colours["baseline"],
                linestyle="--",
                marker=".",
                linewidth=1,
                label="its checks-off baseline",
            )
        )
        time_ax.legend(handles=handles, fontsize=11)
        time_ax.set_xlabel("leaves in the PyTree field of the state")
        ratio_ax.set_ylabel("time per call / checks off")
        time_ax.set_ylabel("time per call (ms)")
        checker = sweep[0].checker if sweep else "beartype"
        ratio_ax.set_title(
            f"flax.struct state returned from jit ({checker}, "
            f"{environment['backend']}, {environment['cpus']} CPUs)",
            fontsize=12,
        )
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
