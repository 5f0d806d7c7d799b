"""What `typecheck-guard bench` prints, writes (`--json`) and draws (`--plot`)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from ._run import Result, SweepPoint
from ._scenarios import MODE_LABELS, MODES

__all__ = ["plot", "table", "to_json"]

_MISSING = "-"


def _cell(result: Result | None) -> str:
    if result is None:
        return _MISSING
    if result.ratio is None:
        return "skipped"
    r = result.ratio
    return f"{r:.0f}x" if r >= 100 else f"{r:.1f}x" if r >= 10 else f"{r:.2f}x"


def _duration(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds * 1e9:.3g} ns"


def _baseline(results: Any) -> str:
    """The time per call with `jaxtyping_disable=True`: what each ratio divides by."""
    times = sorted(r.baseline_s for r in results if r.baseline_s is not None)
    return _duration(times[len(times) // 2]) if times else _MISSING


def table(results: Sequence[Result], environment: dict[str, Any]) -> str:
    """The results as a text table: one row per scenario and checker, one column per
    mode, each cell the ratio to `jaxtyping_disable`."""
    modes = [m for m in MODES if any(r.mode == m for r in results)]
    rows: dict[tuple[str, str, str], dict[str, Result]] = {}
    titles: dict[tuple[str, str], str] = {}
    for r in results:
        rows.setdefault((r.scenario, r.variant, r.checker), {})[r.mode] = r
        titles[(r.scenario, r.variant)] = r.title
    header = ["scenario", "checker", "checks off", *(MODE_LABELS[m] for m in modes)]
    body = [
        [
            f"{s} {v}",
            c,
            _baseline(cells.values()),
            *(_cell(cells.get(m)) for m in modes),
        ]
        for (s, v, c), cells in rows.items()
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]

    def line(row: list[str]) -> str:
        first = [row[0].ljust(widths[0]), row[1].ljust(widths[1])]
        return "  ".join(
            first + [c.rjust(w) for c, w in zip(row[2:], widths[2:], strict=True)]
        ).rstrip()

    versions = environment["versions"]
    out = [
        "typecheck-guard bench ({preset}): time per call with checks on / time with "
        "jaxtyping_disable=True, median of {rounds} interleaved rounds".format(
            **environment
        ),
        "({backend}, {cpus} CPUs, Python {python}; ".format(**environment)
        + ", ".join(f"{k} {v}" for k, v in versions.items() if v)
        + ")",
        "",
        line(header),
        *(line(row) for row in body),
        "",
        "checks off: time per call with jaxtyping_disable=True, no plugin (what each "
        "ratio divides by). 1.00x: the checks cost nothing per call. Scenarios:",
    ]
    for (s, v), title in titles.items():
        out.append(f"  {s} {v}: {title}")
    out.append(
        "  S0 leaves: {s0_leaves}; S3 shapes: {s3_shapes}; eager leaves: {eager_leaves}".format(
            **environment
        )
    )
    out.extend(_notes(results))
    return "\n".join(out)


def _notes(results: Sequence[Result]) -> list[str]:
    lines = []
    whole: set[str] = set()
    for checker in dict.fromkeys(r.checker for r in results):
        reasons = {r.skipped for r in results if r.checker == checker}
        if len(reasons) == 1 and None not in reasons:
            whole.add(checker)
            lines.append(f"  {checker}: skipped, {reasons.pop()}")
    by_text: dict[str, list[str]] = {}
    for r in results:
        text = f"skipped, {r.skipped}" if r.skipped else r.note
        if text and r.checker not in whole:
            where = f"{r.scenario} {r.variant} {MODE_LABELS[r.mode]}"
            places = by_text.setdefault(text, [])
            if where not in places:
                places.append(where)
    for text, places in by_text.items():
        lines.append(f"  {'; '.join(places)}: {text}")
    return ["Notes:", *lines] if lines else []


def to_json(
    results: Sequence[Result], sweep: Sequence[SweepPoint], environment: dict[str, Any]
) -> str:
    return json.dumps(
        {
            "what": "ratio = time per call with checks on / time per call of the same "
            "workload on plain classes with jaxtyping_disable=True",
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
    one line per mode. Bottom: the time per call itself, with the checks-off
    baseline, which also grows with the leaves (dispatch, the step's own work).

    Drawn at the width of a page of text (the two panels stacked, not side by side)
    so that the labels stay readable where the image is shown at that width.
    `theme` is `"light"` or `"dark"`: dark text for a light page, light text for a
    dark one; the background is transparent in both."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
                (p.leaves, p.ratio, p.checked_s) for p in sweep if p.mode == mode
            )
            if points:
                xs, ratios, times = zip(*points, strict=True)
                ratio_ax.plot(xs, ratios, marker="o", label=MODE_LABELS[mode])
                time_ax.plot(
                    xs, [t * 1e3 for t in times], marker="o", label=MODE_LABELS[mode]
                )
        baseline: dict[int, list[float]] = {}
        for p in sweep:
            baseline.setdefault(p.leaves, []).append(p.baseline_s)
        xs = sorted(baseline)
        time_ax.plot(
            xs,
            [sorted(baseline[x])[len(baseline[x]) // 2] * 1e3 for x in xs],
            color=colours["baseline"],
            linestyle="--",
            marker=".",
            label="checks off",
        )
        ratio_ax.axhline(1.0, color=colours["grid"], linestyle="--", linewidth=1)
        for ax in (ratio_ax, time_ax):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.grid(True, which="both", color=colours["grid"], alpha=0.35)
            ax.legend(fontsize=11)
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
