"""Many devices: a sharded, donated data-parallel train step (`device_step.py`, on 8
CPU devices in a subprocess) runs zero checks per cache-hit call with `install()` and
with `unflatten_safe`, gives bitwise the results it gives without the plugin, and
keeps every output sharding."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).with_name("device_step.py")
CHECKERS = ("beartype", "typeguard")
KINDS = ("jit", "shard_map")
PLUGIN = ("install", "guarded-call", "with-block")


@pytest.fixture(scope="module")
def runs() -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (
        env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-W", "error", str(SCRIPT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-5000:]
    return json.loads(out.stdout)


def test_eight_devices(runs):
    assert runs["devices"] == 8


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", CHECKERS)
def test_without_the_plugin_every_call_checks(runs, name, kind):
    # The problem, on many devices: the state's classes are checked on every
    # unflatten of the step's output (three constructions per call).
    plain = runs[f"{name}/{kind}/plain"]
    assert plain["checks"] >= 3 * 6


@pytest.mark.parametrize("how", PLUGIN)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", CHECKERS)
def test_with_the_plugin_no_call_checks(runs, name, kind, how):
    assert runs[f"{name}/{kind}/{how}"]["checks"] == 0


@pytest.mark.parametrize("how", PLUGIN)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", CHECKERS)
def test_results_are_bitwise_those_without_the_plugin(runs, name, kind, how):
    plain = runs[f"{name}/{kind}/plain"]
    run = runs[f"{name}/{kind}/{how}"]
    assert run["digest"] == plain["digest"]
    assert run["step"] == plain["step"] == 8
    assert (run["type"], run["params_type"]) == ("State", "Params")


@pytest.mark.parametrize("how", ("plain", *PLUGIN))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", CHECKERS)
def test_shardings_preserved_and_buffers_donated(runs, name, kind, how):
    run = runs[f"{name}/{kind}/{how}"]
    assert run["shardings_preserved"]
    assert run["sharding_kind"] == ["NamedSharding"]
    assert run["donated"]


@pytest.mark.parametrize("name", CHECKERS)
def test_device_put_with_a_sharding_prefix_after_install(runs, name):
    assert runs[f"{name}/install/device_put_prefix"] == {
        "checks": 0,
        "digest_equal": True,
    }
