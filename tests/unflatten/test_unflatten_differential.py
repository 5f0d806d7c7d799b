"""The same programs (`unflatten_programs.py`) in two processes, plain and inside
`unflatten_safe()`, compared program by program: every check that fails without the
plugin fails with it, every value is the same, and only the placeholder trees (which
a typechecked `__init__` rejects without the plugin) may differ."""

import json
import pathlib
import subprocess
import sys

import pytest

from helpers import _too_old

SCRIPT = pathlib.Path(__file__).with_name("unflatten_programs.py")
PLACEHOLDERS = {"tree.map(None)", "eval_shape(init)"}


def _run(mode: str) -> dict[str, str]:
    out = subprocess.run(
        [sys.executable, str(SCRIPT), mode],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-5000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs() -> tuple[dict[str, str], dict[str, str]]:
    return _run("plain"), _run("block")


def test_constructions_fail_as_without_the_plugin(runs):
    plain, block = runs
    failing = {name for name, outcome in plain.items() if outcome == "raised"}
    expected = {
        "direct",
        "traced",
        "eval_shape(lambda)",
        "tree.map(cls)",
        "jit(cls)",
        "replace",
        "from_parts by hand",
        "validator",
    }
    if not _too_old("beartype", "0.18.2")[0]:  # older beartype checks no dict items
        expected.add("dict order")
    assert failing - PLACEHOLDERS >= expected
    for name in failing - PLACEHOLDERS:
        assert block[name] == "raised", name


def test_values_are_those_without_the_plugin(runs):
    plain, block = runs
    assert plain.keys() == block.keys()
    for name in plain.keys() - PLACEHOLDERS:
        assert block[name] == plain[name], name
    # The host callback caught its own failed check in both runs: same value.
    assert block["callback"] == plain["callback"] != "raised"


def test_only_placeholder_trees_differ(runs):
    plain, block = runs
    assert {name for name in plain if plain[name] != block[name]} == PLACEHOLDERS
    assert all(plain[name] == "raised" for name in PLACEHOLDERS)
