"""Several processes: JAX's multi-controller runtime, two processes on this machine
with 2 CPU devices each (`multiprocess_step.py`), one 4-device global mesh.

The pair runs twice: without the plugin (then with `unflatten_safe(step)`), and with
`install()`. With the plugin, no step runs a check in either process; the results
and shardings are those of the run without it; a bad construction still raises.

Each process has a deadline, and when one fails or overruns, both are killed: a
process whose peer died would otherwise wait in a collective (or at the coordinator)
for minutes.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys
import time

import pytest

SCRIPT = pathlib.Path(__file__).with_name("multiprocess_step.py")
CHECKERS = ("beartype", "typeguard")
# Seconds for a pair of processes, start to exit (~7 s on an idle 2-core machine).
# Each process dumps its stacks and exits after `multiprocess_step.WATCHDOG`.
DEADLINE = 120.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _missing() -> str | None:
    import jax

    if not hasattr(jax, "make_array_from_process_local_data"):
        return f"jax {jax.__version__} has no jax.make_array_from_process_local_data"
    if "jax_cpu_collectives_implementation" not in getattr(jax.config, "values", {}):
        return f"jax {jax.__version__} has no jax_cpu_collectives_implementation"
    return None


def _launch(modes: tuple[str, str], tmp_path: pathlib.Path) -> list[int]:
    """Run process 0 and 1 of one program, in `modes[0]` and `modes[1]`; their exit
    codes (negative: killed)."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    # For a jax without the `jax_num_cpu_devices` option (the script prefers it).
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip()
    port = _free_port()
    procs = []
    try:
        for i, mode in enumerate(modes):
            with open(tmp_path / f"{mode}_{i}.log", "w") as log:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-W", "error", str(SCRIPT), str(i)]
                        + [str(port), mode, str(tmp_path / f"{mode}_{i}.json")],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                )
        deadline = time.monotonic() + DEADLINE
        # The first process to fail ends the pair: its peer would wait for it.
        while time.monotonic() < deadline:
            codes = [p.poll() for p in procs]
            if None not in codes or any(code not in (None, 0) for code in codes):
                break
            time.sleep(0.1)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
    return [p.returncode for p in procs]


def _run_pair(mode: str, tmp_path: pathlib.Path) -> list[dict]:
    codes = _launch((mode, mode), tmp_path)
    if codes != [0, 0]:
        logs = "\n".join(
            f"--- process {i} (exit {code}) ---\n"
            + (tmp_path / f"{mode}_{i}.log").read_text()[-3000:]
            for i, code in enumerate(codes)
        )
        pytest.fail(f"the {mode} pair failed or overran {DEADLINE:.0f} s:\n{logs}")
    return [json.loads((tmp_path / f"{mode}_{i}.json").read_text()) for i in range(2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    reason = _missing()
    if reason is not None:
        pytest.skip(reason)
    tmp_path = tmp_path_factory.mktemp("multiprocess")
    return {mode: _run_pair(mode, tmp_path) for mode in ("plain", "install")}


def _each(runs: dict, mode: str, key: str) -> list[dict]:
    return [process[key] for process in runs[mode]]


def test_two_processes_four_devices(runs):
    for mode in ("plain", "install"):
        got = [
            (p["process_index"], p["process_count"], p["devices"], p["local_devices"])
            for p in runs[mode]
        ]
        assert got == [(0, 2, 4, 2), (1, 2, 4, 2)]


@pytest.mark.parametrize("name", CHECKERS)
def test_without_the_plugin_every_step_checks(runs, name):
    # The problem, in each process: the state's three classes are checked on every
    # unflatten of the step's output.
    for run in _each(runs, "plain", f"{name}/plain"):
        assert all(checks >= 3 for checks in run["checks"]), run["checks"]


@pytest.mark.parametrize(
    "mode, how",
    [
        ("plain", "guarded-call"),
        ("install", "install"),
        ("install", "install+guarded-call"),
    ],
)
@pytest.mark.parametrize("name", CHECKERS)
def test_with_the_plugin_no_step_checks(runs, name, mode, how):
    for run in _each(runs, mode, f"{name}/{how}"):
        assert run["checks"] == [0] * len(run["checks"])


@pytest.mark.parametrize(
    "mode, how",
    [
        ("plain", "guarded-call"),
        ("install", "install"),
        ("install", "install+guarded-call"),
    ],
)
@pytest.mark.parametrize("name", CHECKERS)
def test_results_and_shardings_are_those_without_the_plugin(runs, name, mode, how):
    plain = _each(runs, "plain", f"{name}/plain")
    got = _each(runs, mode, f"{name}/{how}")
    for process in range(2):
        for key in ("digest", "shardings", "addressable", "step", "type"):
            assert got[process][key] == plain[process][key], key
        assert got[process]["params_type"] == "Params"
    # One global state: both processes gathered the same bytes.
    assert got[0]["digest"] == got[1]["digest"]
    assert got[0]["step"] == 7


@pytest.mark.parametrize(
    "mode, how",
    [
        ("plain", "plain"),
        ("plain", "guarded-call"),
        ("install", "install"),
        ("install", "install+guarded-call"),
    ],
)
@pytest.mark.parametrize("name", CHECKERS)
def test_shardings_kept_buffers_donated_bad_construction_raises(runs, name, mode, how):
    for run in _each(runs, mode, f"{name}/{how}"):
        assert run["shardings_preserved"]
        assert run["donated"]
        assert run["bad_construction"] is not None
        assert run["bad_construction_checks"] >= 1
        assert {kind for kind, _, _ in run["shardings"]} == {"NamedSharding"}


def test_a_failed_process_ends_its_pair(tmp_path):
    # Process 1 exits at once; process 0 would wait for it at the coordinator for a
    # minute. It is killed instead.
    if _missing() is not None:
        pytest.skip(_missing())
    codes = _launch(("plain", "no-such-mode"), tmp_path)
    assert codes[1] == 1
    assert codes[0] != 0
    assert (
        "unknown mode 'no-such-mode'" in (tmp_path / "no-such-mode_1.log").read_text()
    )
