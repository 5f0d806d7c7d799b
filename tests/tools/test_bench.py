"""`typecheck-guard bench`: every scenario runs and reports a finite ratio with its
spread, the JSON and the plot are written, the measurement alternates A and B, and a
missing library or checker is a skipped row or a clear error. No timing is asserted:
`--smoke` figures are noise by design."""

import importlib.metadata
import io
import json
import math
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import typecheck_guard
from typecheck_guard._compat import _versions
from typecheck_guard._tools._bench import _measure, _report, _run, _scenarios

HAS_CACHE = hasattr(typecheck_guard, "cache_pytree_checks")
# jaxtyping 0.3.3 resolves optax's `ArrayTree` in a typechecked TrainState.
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
    assert {s for s, *_ in rows} == set(_scenarios.SCENARIOS)
    assert set(_scenarios.SCENARIOS) == {
        "flax-state",
        "other-states",
        "ten-floats",
        "nnx",
        "trainstate",
        "pax",
        "eager",
    }
    assert {v for s, v, *_ in rows if s == "other-states"} == {"custom", "post_init"}
    assert {v for s, v, *_ in rows if s == "ten-floats"} == {
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
        if row["skipped"] and key[0] == "trainstate" and not HAS_ARRAYTREE:
            assert "jaxtyping" in row["skipped"] and "ArrayTree" in row["skipped"]
            continue
        if row["skipped"]:
            # Only the PyTree cache may be missing (it lands separately).
            assert key[0] == "eager" and key[3] in ("cache", "install"), row
            assert not HAS_CACHE, row
            continue
        assert math.isfinite(row["ratio"]) and row["ratio"] > 0, row
        assert row["checked_s"] > 0 and row["baseline_s"] > 0, row
        assert row["ratio_min"] <= row["ratio"] <= row["ratio_max"], row
        assert row["noise"] == (row["ratio_min"] <= 1.0 <= row["ratio_max"]), row


@pytest.mark.xfail(
    not HAS_CACHE,
    reason="typecheck_guard.cache_pytree_checks lands with the PyTree cache",
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
    assert report["schema"] == _report.SCHEMA == 2
    env = report["environment"]
    assert env["preset"] == "smoke"
    assert env["versions"]["jax"]
    sweep = report["sweep"]
    assert {p["leaves"] for p in sweep} == set(_scenarios.PRESETS["smoke"].sweep_leaves)
    assert {p["mode"] for p in sweep} == set(_run.SWEEP_MODES)
    assert all(math.isfinite(p["ratio"]) for p in sweep)
    # Each mode has its own baseline, measured between its own rounds.
    assert all(p["baseline_s"] > 0 for p in sweep)
    assert all(p["ratio_min"] <= p["ratio"] <= p["ratio_max"] for p in sweep)


def test_plot_writes_a_png(smoke):
    _, png, _ = smoke
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_is_printed(smoke):
    _, _, stdout = smoke
    assert "no plugin" in stdout and "install()" in stdout
    assert "flax.struct state from jit" in stdout and "eager PyTree check" in stdout
    # Scenarios are named by what they measure, and every line fits 88 columns.
    assert not any(f"S{i}" in stdout.split() for i in range(4))
    assert max(len(line) for line in stdout.splitlines()) <= 88


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


def _result(scenario, mode, ratio=None, low=None, high=None, **kw):
    return _run.Result(
        scenario,
        "v",
        "what it measures",
        kw.pop("checker", "beartype"),
        mode,
        ratio,
        None if ratio is None else 0.01,
        None if ratio is None else 2.5e-4,
        5,
        label=f"{scenario} label",
        ratio_min=low,
        ratio_max=high,
        noise=None if low is None else low <= 1.0 <= high,
        **kw,
    )


def test_table_shows_the_spread_and_marks_noise_skips_and_notes():
    results = [
        _result("flax-state", "none", 40.0, 38.2, 41.5),
        _result("flax-state", "install", 1.02, 1.01, 1.05),
        # A mode that does nothing here: some rounds faster, some slower.
        _result("flax-state", "unflatten_safe", 0.51, 0.45, 1.3),
        _result("eager", "cache", skipped="no cache"),
        _result("eager", "none", 4000.0, 3900.0, 4100.0, note="a note"),
        _result("flax-state", "none", checker="typeguard", skipped="tg4"),
    ]
    env = _run.environment(_scenarios.PRESETS["smoke"])
    text = _report.table(results, env, {"typeguard": "tg4"})
    assert "40.0x [38.2-41.5]" in text and "1.02x [1.01-1.05]" in text
    assert "250 us" in text
    assert "0.51x" not in text and "~1x [0.45-1.30]" in text
    assert "4000x [3900-4100]" in text
    assert "typeguard: skipped, tg4" in text
    assert "cache_pytree_checks(): skipped, no cache" in text
    assert "no plugin: a note" in text
    assert "flax-state label: what it measures" in text
    # typeguard can't run: it gets a line, not a column.
    assert "typeguard" not in text.split("flax-state label")[1].splitlines()[1]


def test_a_case_skipped_for_every_checker_is_one_line():
    results = [
        _result("nnx", mode, skipped="flax is not installed")
        for mode in ("none", "install")
    ]
    env = _run.environment(_scenarios.PRESETS["smoke"])
    text = _report.table(results, env)
    assert "  skipped: flax is not installed" in text
    assert "no plugin" not in text


def test_measurement_spread():
    m = _measure.Measurement(1.1, 1.0, 1.0, 3, (1, 1), (0.9, 1.1, 1.4))
    assert (m.low, m.high, m.noise) == (0.9, 1.4, True)
    m = _measure.Measurement(1.2, 1.0, 1.0, 3, (1, 1), (1.1, 1.2, 1.4))
    assert (m.low, m.high, m.noise) == (1.1, 1.4, False)


def test_missing_names_the_extra_to_install():
    assert _scenarios.missing(("json",)) is None
    assert _scenarios.missing(("no_such_module_xyz",)) == (
        "no_such_module_xyz is not installed (pip install no_such_module_xyz)"
    )


def _site_without(tmp_path: Path, *dists: str) -> Path:
    """This environment's site-packages as links, without `dists` (their modules and
    their metadata): what a fresh `pip install` without them gives, in milliseconds."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    hidden = set()
    for name in dists:
        try:
            files = importlib.metadata.distribution(name).files or ()
        except importlib.metadata.PackageNotFoundError:
            continue
        hidden.update(Path(f).parts[0] for f in files)
    view = tmp_path / "site-packages"
    view.mkdir()
    for entry in purelib.iterdir():
        if entry.name not in hidden:
            (view / entry.name).symlink_to(entry)
    return view


def _bench_without(tmp_path: Path, dists: tuple[str, ...], *args: str):
    view = _site_without(tmp_path, *dists)
    # -I -S: no site-packages but the view (and the .pth files in it, such as our
    # editable install's), no PYTHONPATH, no current directory.
    code = (
        "import site, sys\n"
        f"site.addsitedir({str(view)!r})\n"
        "from typecheck_guard._tools._cli import main\n"
        f"raise SystemExit(main(['bench', *{list(args)!r}]))\n"
    )
    return subprocess.run(
        [sys.executable, "-I", "-S", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_bench_without_flax_equinox_optax_chex_skips_their_rows(tmp_path):
    proc = _bench_without(
        tmp_path,
        ("flax", "equinox", "optax", "chex"),
        "--smoke",
        "--checker",
        "beartype",
        "--json",
        str(tmp_path / "out.json"),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "flax is not installed (pip install 'typecheck-guard[flax]')" in proc.stdout
    assert "equinox is not installed" in proc.stdout
    rows = _rows(json.loads((tmp_path / "out.json").read_text()))
    measured = {(s, v) for (s, v, _, _), r in rows.items() if r["ratio"] is not None}
    skipped = {(s, v) for (s, v, _, _), r in rows.items() if r["skipped"]}
    # What needs none of them is measured; the rest is skipped, not a crash.
    assert measured == {
        ("other-states", "custom"),
        ("ten-floats", "arrays"),
        ("ten-floats", "custom"),
        ("pax", "custom nodes"),
        ("eager", "PyTree"),
    }
    assert skipped == {
        ("flax-state", "flax.struct"),
        ("other-states", "post_init"),
        ("ten-floats", "equinox"),
        ("ten-floats", "flax.struct"),
        ("nnx", "nnx"),
        ("trainstate", "TrainState"),
    }


def test_bench_without_a_checker_says_what_to_install(tmp_path):
    proc = _bench_without(tmp_path, ("beartype", "typeguard"), "--smoke")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "typecheck-guard bench: error: no typechecker to measure with: beartype is "
        "not installed (pip install 'typecheck-guard[beartype]'); typeguard is not "
        "installed (pip install 'typecheck-guard[typeguard]' for typeguard 2.13.3, the "
        "version jaxtyping recommends)"
    ]


def test_bench_plot_without_flax_fails_before_measuring(tmp_path):
    proc = _bench_without(
        tmp_path, ("flax",), "--smoke", "--plot", str(tmp_path / "x.png")
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "typecheck-guard bench: error: --plot measures a flax.struct state, and flax "
        "is not installed (pip install 'typecheck-guard[flax]')"
    ]


def test_bench_with_every_case_skipped_exits_1(tmp_path):
    proc = _bench_without(
        tmp_path, ("flax",), "--smoke", "--checker", "beartype", "--scenario", "nnx"
    )
    assert proc.returncode == 1
    assert "skipped: flax is not installed" in proc.stdout
    assert proc.stderr.splitlines()[-1] == (
        "typecheck-guard bench: error: every case was skipped (see above)"
    )


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_bench_output_path_is_checked_before_measuring(tmp_path, option):
    bad = tmp_path / "no_such_folder" / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "typecheck_guard", "bench", option, str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"typecheck-guard bench: error: {option}: can't write {str(bad)!r}: No such "
        "file or directory"
    ]
    assert not os.path.exists(bad.parent)


def test_progress_bar_draws_on_request_only():
    stream = io.StringIO()
    bar = _measure.Progress(2, enabled=True, stream=stream)
    bar.update("first")
    bar.advance()
    bar.update("second")
    bar.close()
    assert "1/2" in stream.getvalue() and "second" in stream.getvalue()
    quiet = io.StringIO()
    bar = _measure.Progress(2, stream=quiet)  # not a terminal
    bar.update("first")
    bar.close()
    assert quiet.getvalue() == ""


def test_unavailable_typeguard_4_is_skipped_with_a_reason(monkeypatch):
    monkeypatch.setattr(
        "typecheck_guard._compat._versions.installed", lambda name: "4.6.1"
    )
    with pytest.raises(_scenarios.Unavailable, match="checks nothing under jaxtyped"):
        _scenarios.load_checker("typeguard")


def test_bench_json_to_stdout_holds_the_json_alone(tmp_path):
    # `--json -`: the JSON on standard output, the table on standard error.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "typecheck_guard",
            "bench",
            "--smoke",
            "--checker",
            "beartype",
            "--scenario",
            "eager",
            "--json",
            "-",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert {r["scenario"] for r in report["results"]} == {"eager"}
    assert "eager PyTree check" in proc.stderr and "no plugin" in proc.stderr
    assert os.listdir(tmp_path) == []
