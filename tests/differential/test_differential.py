"""The differential suite: generated programs (`differential_programs.py`), by
region, run once without the plugin and once per plugin mode (`install()`, `with
unflatten_safe():`, `unflatten_safe(jax.jit(...))`), each mode's batch in one
interpreter, and compared program by program (`differential_runner.py` states what
must be equal, and the documented exceptions).

One interpreter per mode runs every region's default batch (the core programs of
each region, the shapes the issues reported, and a seeded sample of the rest; the
seed depends on the Python version, so that CI's sessions sample differently).
Each program runs its `main()` twice, so that every construction is made again
after the class's first unflatten (where `install()` puts its guards in place).
`TYPECHECK_GUARD_DIFFERENTIAL_SEED` / `_SIZE` change the seed and the programs per
region; `TYPECHECK_GUARD_DIFFERENTIAL_AGAIN=0` runs each `main()` once. `python
scripts/differential.py --full` runs every program.

- `test_exact[region-mode]`: no lost check, crash, different error, changed value
  or count mismatch.
- `test_covered[region-mode]`: no check left on the unflattens the mode covers.
- `test_programs_are_well_formed`: without the plugin, each program ran to the end
  or raised a checker's error (a program that fails for another reason tests
  nothing).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import differential_programs as programs_mod
import differential_runner as runner
import pytest


@dataclasses.dataclass
class Run:
    seed: int
    programs: list[programs_mod.Program]
    results: dict[str, dict[str, dict[str, Any]]]
    differences: dict[str, list[runner.Difference]]
    log: list[str]


@pytest.fixture(scope="module")
def run() -> Run:
    seed = int(
        os.environ.get("TYPECHECK_GUARD_DIFFERENTIAL_SEED", programs_mod.default_seed())
    )
    size = int(
        os.environ.get("TYPECHECK_GUARD_DIFFERENTIAL_SIZE", programs_mod.DEFAULT_SIZE)
    )
    chosen = [
        p
        for region in programs_mod.REGIONS
        for p in programs_mod.batch(region, seed, size)
    ]
    if os.environ.get("TYPECHECK_GUARD_DIFFERENTIAL_AGAIN", "1") != "0":
        chosen = programs_mod.again(chosen)
    results, log = runner.run_all(chosen)
    return Run(seed, chosen, results, runner.compare_all(chosen, results), log)


def _report(run: Run, differences: list[runner.Difference]) -> str:
    lines = [str(d) for d in differences]
    lines.append(
        f"(seed {run.seed}; rerun one with: python scripts/differential.py --again "
        "--program NAME)"
    )
    return "\n".join(lines)


@pytest.mark.parametrize("mode", runner.PLUGIN_MODES)
@pytest.mark.parametrize("region", programs_mod.REGIONS)
def test_exact(run: Run, region: str, mode: str) -> None:
    found = [d for d in run.differences.get(mode, []) if d.region == region and d.exact]
    assert not found, _report(run, found)


@pytest.mark.parametrize("mode", runner.PLUGIN_MODES)
@pytest.mark.parametrize("region", programs_mod.REGIONS)
def test_covered(run: Run, region: str, mode: str) -> None:
    if region == "importhook" and mode != "install":
        # Under jaxtyping's import hook a node's registered `tree_unflatten` is a
        # checker's wrapper: `unflatten_safe` sees neither it (row 5 looks for the
        # registered function's own frame, called by JAX) nor, then, the rebuild it
        # makes. `install()`, which registers the unflatten, covers both
        # (docs/how-it-works.md, "What each form covers").
        pytest.skip("unflatten_safe does not cover import-hooked unflattens")
    found = [
        d
        for d in run.differences.get(mode, [])
        if d.region == region and d.kind == "not covered"
    ]
    assert not found, _report(run, found)


def test_programs_are_well_formed(run: Run) -> None:
    plain = run.results["plain"]
    bad = []
    for program in run.programs:
        record = plain[program.name]
        if not runner.well_formed(program, record):
            bad.append(f"{program.name}: {runner.describe_outcome(record['outcome'])}")
    assert not bad, "\n".join(bad)
    assert not run.log, run.log
