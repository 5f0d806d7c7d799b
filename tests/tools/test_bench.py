"""`typecheck-guard bench`: every scenario runs and reports a finite ratio, the
JSON and the plot are written, and the measurement alternates A and B. No timing
is asserted: `--smoke` figures are noise by design."""

import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

import typecheck_guard
from typecheck_guard._compat import _versions
from typecheck_guard._tools._bench import _measure, _report, _run, _scenarios

HAS_CACHE = hasattr(typecheck_guard, "cache_pytree_checks")
# jaxtyping 0.3.3 resolves optax's `ArrayTree` in a typechecked TrainState (S3).
HAS_ARRAYTREE = _versions.parse(_versions.installed("jaxtyping") or "0") >= (0, 3, 3)


def _usable(checker: str) -> bool:
    # typeguard 4.x is reported as skipped: under jaxtyped it checks nothing.
    try:
        _scenarios.load_checker(checker)
    except _scenarios.Unavailable:
        return False
    return True


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, str]:
    # One run for the module: each run builds and compiles every scenario under
    # both checkers (~20 s on two cores), in a fresh interpreter so that its
    # classes don't land in this process's JAX registry.
    out = tmp_path_factory.mktemp("bench")
    json_path, png_path = out / "bench.json", out / "bench.png"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "typecheck_guard",
            "bench",
            "--smoke",
            "--json",
            str(json_path),
            "--plot",
            str(png_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(json_path.read_text()), png_path, proc.stdout


def _rows(report: dict) -> dict[tuple[str, str, str, str], dict]:
    return {
        (r["scenario"], r["variant"], r["checker"], r["mode"]): r
        for r in report["results"]
    }


def test_every_scenario_mode_and_checker_is_reported(smoke):
    report, _, _ = smoke
    rows = _rows(report)
    expected = {
        (case.scenario, case.variant, checker, mode)
        for case in _scenarios.CASES
        for checker in _run.CHECKERS
        for mode in case.modes
    }
    assert set(rows) == expected
    assert {s for s, *_ in rows} == {"S0", "S1", "S2", "S3", "eager"}
    assert {v for s, v, *_ in rows if s == "S1"} == {
        "arrays",
        "equinox",
        "flax.struct",
        "custom",
    }


def test_ratios_are_finite(smoke):
    report, _, _ = smoke
    for key, row in _rows(report).items():
        if row["skipped"] and not _usable(key[2]):
            assert (
                "checks nothing" in row["skipped"] or "not installed" in row["skipped"]
            )
            continue
        if row["skipped"] and key[0] == "S3" and not HAS_ARRAYTREE:
            assert "jaxtyping" in row["skipped"] and "ArrayTree" in row["skipped"]
            continue
        if row["skipped"]:
            # Only the PyTree cache may be missing (it lands separately).
            assert key[0] == "eager" and key[3] in ("cache", "install"), row
            assert not HAS_CACHE, row
            continue
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
        assert row["checked_s"] > 0 and row["baseline_s"] > 0, row


@pytest.mark.xfail(
    not HAS_CACHE,
    reason="typecheck_guard.cache_pytree_checks lands with the PyTree cache (issue 3)",
    strict=True,
)
def test_eager_pytree_check_is_measured_with_the_cache(smoke):
    report, _, _ = smoke
    rows = _rows(report)
    for checker in filter(_usable, _run.CHECKERS):
        for mode in ("none", "cache", "install"):
            row = rows[("eager", "PyTree", checker, mode)]
            assert row["skipped"] is None, row
            assert math.isfinite(row["ratio"])


def test_json_has_environment_and_sweep(smoke):
    report, _, _ = smoke
    env = report["environment"]
    assert env["preset"] == "smoke"
    assert env["versions"]["jax"]
    sweep = report["sweep"]
    assert {p["leaves"] for p in sweep} == set(_scenarios.PRESETS["smoke"].sweep_leaves)
    assert {p["mode"] for p in sweep} == set(_run.SWEEP_MODES)
    assert all(math.isfinite(p["ratio"]) for p in sweep)


def test_plot_writes_a_png(smoke):
    _, png, _ = smoke
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_is_printed(smoke):
    _, _, stdout = smoke
    assert "no plugin" in stdout and "install()" in stdout
    assert "S0 flax.struct" in stdout and "eager PyTree" in stdout


def test_plot_without_matplotlib_is_one_line_exit_2(tmp_path):
    code = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "from typecheck_guard._tools._cli import main\n"
        f"raise SystemExit(main(['bench', '--plot', {str(tmp_path / 'x.png')!r}]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "typecheck-guard bench: error: --plot needs matplotlib: pip install "
        "'typecheck-guard[plot]'"
    ]


def test_interleaved_alternates_checked_and_disabled_baseline():
    from jaxtyping import config

    calls = []

    def checked(n):
        calls.append(("A", n, config.jaxtyping_disable))

    def baseline(n):
        calls.append(("B", n, config.jaxtyping_disable))

    before = config.jaxtyping_disable
    m = _measure.interleaved(checked, baseline, rounds=3, block_s=0.0)
    assert config.jaxtyping_disable == before
    # Warm-up, one calibration call each, then A, B, A, B, A, B.
    assert [c[0] for c in calls] == ["A", "B", "A", "B"] + ["A", "B"] * 3
    assert all(disabled == (side == "B") for side, _, disabled in calls)
    assert m.rounds == 3 and m.ratio > 0


def test_resnet50_shapes():
    import numpy as np

    def leaves(tree):
        if isinstance(tree, dict):
            return [x for v in tree.values() for x in leaves(v)]
        return [tree]

    real = leaves(_scenarios.resnet50_shapes())
    assert len(real) == 161
    assert sum(int(np.prod(s)) for s in real) == 25_557_032
    assert len(leaves(_scenarios.resnet50_shapes(8))) == 161


def test_table_marks_skips_and_notes():
    results = [
        _run.Result(
            "S0", "flax.struct", "t0", "beartype", "none", 40.0, 0.01, 0.00025, 5
        ),
        _run.Result(
            "S0", "flax.struct", "t0", "beartype", "install", 1.0, 2.5e-4, 2.5e-4, 5
        ),
        _run.Result("eager", "PyTree", "t1", "beartype", "cache", skipped="no cache"),
        _run.Result("S0", "flax.struct", "t0", "typeguard", "none", skipped="tg4"),
    ]
    env = _run.environment(_scenarios.PRESETS["smoke"])
    text = _report.table(results, env)
    assert "40.0x" in text and "1.00x" in text and "250 us" in text
    assert "skipped" in text
    assert "typeguard: skipped, tg4" in text
    assert "eager PyTree cache_pytree_checks(): skipped, no cache" in text


def test_progress_bar_draws_on_request_only():
    stream = io.StringIO()
    bar = _measure.Progress(2, enabled=True, stream=stream)
    bar.update("S0")
    bar.advance()
    bar.update("S1")
    bar.close()
    assert "1/2" in stream.getvalue() and "S1" in stream.getvalue()
    quiet = io.StringIO()
    bar = _measure.Progress(2, stream=quiet)  # not a terminal
    bar.update("S0")
    bar.close()
    assert quiet.getvalue() == ""


def test_unavailable_typeguard_4_is_skipped_with_a_reason(monkeypatch):
    monkeypatch.setattr(
        "typecheck_guard._compat._versions.installed", lambda name: "4.6.1"
    )
    with pytest.raises(_scenarios.Unavailable, match="checks nothing under jaxtyped"):
        _scenarios.load_checker("typeguard")
