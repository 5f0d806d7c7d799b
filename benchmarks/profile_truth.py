"""Whether `typecheck-guard profile`'s figures are the truth, measured against what
they claim, on a program with known counts.

1. Seconds per check. For each workload, interleaved in one process, per round:
   A, the workload with checks on, not profiled; C, the same with
   `jaxtyping_disable=True` (the checks switched off, the bodies still run); B, the
   same inside `typecheck_guard.profile()`, whose reported check time we keep. We
   print the medians of A - C (what the checks cost) and of B's reported time, per
   call, and the median of the per-round ratios reported / (A - C), which should be
   within 20% of 1. The workloads:

   - a jitted step returning a jaxtyped `flax.struct` with a
     `PyTree[Float[Array, "..."]]` field (one check per call, at dispatch);
   - an eager checked function with a `PyTree[...]` argument whose body does slow
     work and calls another checked function (two checks per call, bodies
     excluded);
   - constructing the checked `flax.struct` (one check);
   - a jitted step with a checked host callback (one check per call, in the
     callback).

2. `removable_seconds` against what `--install` removes. The program with known
   counts (`KNOWN`), run under `typecheck-guard profile --json` and
   `typecheck-guard profile --install --json`, alternately: removable_seconds of the
   plain run, against check_seconds(plain) - check_seconds(--install). And, as a
   measurement the profiler takes no part in, the CPU time of `python prog.py`
   against `typecheck-guard run prog.py` (`install()`, unprofiled), interleaved.

    python benchmarks/profile_truth.py [--rounds 9] [--calls 20] [--leaves 200]
        [--checker beartype|typeguard] [--part seconds|install|all]
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

# At module level, and no `from __future__ import annotations`: jaxtyping resolves
# annotations in the module's globals, and silently checks nothing when it can't.
from jaxtyping import Array, ArrayLike, Float, PyTree, jaxtyped

# The overhead benchmark's timing (benchmarks/ is on sys.path: this runs as a script).
from profile_overhead import time_per_call as _time

import typecheck_guard
from typecheck_guard._tools._bench._scenarios import load_checker


def _workloads(checker: Any, leaves: int) -> dict[str, tuple[Any, int]]:
    """name -> (run(n), checks per call)."""
    import jax
    import jax.numpy as jnp
    from flax import struct

    @jaxtyped(typechecker=checker)
    @struct.dataclass
    class State:
        params: PyTree[Float[Array, "..."]]
        step: Float[Array, ""]

    @jax.jit
    def step(state: State) -> State:
        return state.replace(step=state.step + 1)

    @jaxtyped(typechecker=checker)
    def inner(params: PyTree[Float[Array, "..."]]) -> Float[Array, ""]:
        return params["w00000"][0]

    @jaxtyped(typechecker=checker)
    def outer(params: PyTree[Float[Array, "..."]]) -> Float[Array, ""]:
        total = 0  # slow work, the body's, not the check's: one thread, no calls
        for i in range(100_000):
            total += i
        return inner(params)

    # A callback that checks a whole tree: JAX runs it on one of its threads, so
    # the wall time of the calls that wait for it is noisy; a check this size stands
    # out of that noise.
    @jaxtyped(typechecker=checker)
    def progress(tree: PyTree[Float[ArrayLike, "..."]]) -> None:
        pass

    @jax.jit
    def with_callback(x: Any) -> Any:
        jax.debug.callback(progress, {f"w{i}": x for i in range(leaves // 4)})
        return x + 1

    params = {f"w{i:05d}": jnp.full((16,), 1.0) for i in range(leaves)}
    state = [step(step(State(params, jnp.zeros(()))))]

    def dispatch(n: int) -> None:
        for _ in range(n):
            state[0] = step(state[0])
        jax.block_until_ready(state[0])

    def nested(n: int) -> None:
        for _ in range(n):
            outer(params)

    def construction(n: int) -> None:
        for _ in range(n):
            State(params, jnp.zeros(()))

    x = [with_callback(jnp.zeros(()))]

    def callback(n: int) -> None:
        for _ in range(n):
            x[0] = with_callback(x[0])
        jax.effects_barrier()

    return {
        "jit step, flax.struct (dispatch)": (dispatch, 1),
        "eager, nested, slow body": (nested, 2),
        "construction": (construction, 1),
        "host callback": (callback, 1),
    }


def seconds(checker_name: str, rounds: int, calls: int, leaves: int) -> None:
    checker = load_checker(checker_name)
    workloads = _workloads(checker, leaves)
    print(
        f"1. seconds per check: median of {rounds} interleaved rounds x {calls} calls; "
        f"{checker_name}, {leaves} leaves"
    )
    print(
        f"{'workload':34} {'on - off':>10} {'reported':>10} {'per check':>10} "
        f"{'reported / (on - off)':>22} {'spread':>13}"
    )
    for name, (run, per_call) in workloads.items():
        for _ in range(2):  # compile, first checks
            _time(run, 2)
            _time(run, 2, disabled=True)
            with typecheck_guard.profile():
                run(2)
        diffs, reported, ratios = [], [], []
        for _ in range(rounds):
            on = _time(run, calls)
            off = _time(run, calls, disabled=True)
            prof = typecheck_guard.profile()
            _time(run, calls, prof=prof)
            checks = prof.timed_checks
            assert checks == calls * per_call, (name, checks)
            got = prof.timed_seconds / calls
            diffs.append(on - off)
            reported.append(got)
            ratios.append(got / (on - off) if on > off else float("nan"))
        ratio = statistics.median(ratios)
        print(
            f"{name:34} {statistics.median(diffs) * 1e3:8.3f}ms "
            f"{statistics.median(reported) * 1e3:8.3f}ms "
            f"{statistics.median(reported) / per_call * 1e3:8.3f}ms "
            f"{ratio:21.2f}x {min(ratios):6.2f}-{max(ratios):.2f}"
        )


KNOWN = """
import sys

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, ArrayLike, Float, PyTree, jaxtyped

from typecheck_guard._tools._bench._scenarios import load_checker

checker = load_checker(sys.argv[1])
N, LEAVES = int(sys.argv[2]), int(sys.argv[3])


@jaxtyped(typechecker=checker)
@struct.dataclass
class State:
    params: PyTree[Float[Array, "..."]]
    step: Float[Array, ""]


@jaxtyped(typechecker=checker)
def progress(step: Float[ArrayLike, ""]) -> None:
    pass


@jax.jit
def train_step(state):
    jax.debug.callback(progress, state.step)
    return state.replace(step=state.step + 1)


@jaxtyped(typechecker=checker)
def norm(params: PyTree[Float[Array, "..."]]) -> Float[Array, ""]:
    return jnp.sqrt(sum(jnp.sum(p * p) for p in jax.tree.leaves(params)))


state = State({f"w{i}": jnp.ones(16) for i in range(LEAVES)}, jnp.zeros(()))
for i in range(N):
    state = train_step(state)
    if i % 10 == 0:
        norm(state.params)
jax.effects_barrier()
state = jax.tree.map(lambda x: x, state)
"""


def _run(args: list[str], cwd: str) -> tuple[float, float]:
    """(CPU seconds (user + system), wall seconds) of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def install(checker_name: str, rounds: int, steps: int, leaves: int) -> None:
    cli = [sys.executable, "-m", "typecheck_guard"]
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "prog.py").write_text(textwrap.dedent(KNOWN))
        program = ["prog.py", checker_name, str(steps), str(leaves)]
        ratios, removable, removed = [], [], []
        plain_cpu, installed_cpu, plain_wall, installed_wall = [], [], [], []
        for _ in range(rounds):
            reports = []
            for extra in ([], ["--install"]):
                out = os.path.join(tmp, "p.json")
                _run([*cli, "profile", *extra, "--json", out, *program], tmp)
                with open(out) as f:
                    reports.append(json.load(f))
            plain, after = reports
            removable.append(plain["removable_seconds"])
            removed.append(plain["check_seconds"] - after["check_seconds"])
            ratios.append(removable[-1] / removed[-1])
            cpu, wall = _run([sys.executable, *program], tmp)
            plain_cpu.append(cpu)
            plain_wall.append(wall)
            cpu, wall = _run([*cli, "run", *program], tmp)
            installed_cpu.append(cpu)
            installed_wall.append(wall)
    saved = [p - i for p, i in zip(plain_cpu, installed_cpu, strict=True)]
    saved_wall = [p - i for p, i in zip(plain_wall, installed_wall, strict=True)]
    print(
        f"2. removable_seconds against what --install removes: median of {rounds} "
        f"rounds; {checker_name}, {steps} steps, {leaves} leaves"
    )
    print(
        f"   removable_seconds (plain run)            {statistics.median(removable):8.3f} s"
    )
    print(
        f"   check_seconds: plain - --install          {statistics.median(removed):8.3f} s"
        f"   removable / removed {statistics.median(ratios):.2f}x "
        f"({min(ratios):.2f}-{max(ratios):.2f})"
    )
    print(
        f"   CPU time: python - typecheck-guard run    {statistics.median(saved):8.3f} s"
        f"   removable / that    {statistics.median(removable) / statistics.median(saved):.2f}x"
        f"   (CPU {statistics.median(plain_cpu):.2f} s -> "
        f"{statistics.median(installed_cpu):.2f} s)"
    )
    print(
        f"   wall time: python - typecheck-guard run   {statistics.median(saved_wall):8.3f} s"
        f"   removable / that    "
        f"{statistics.median(removable) / statistics.median(saved_wall):.2f}x"
        f"   (wall {statistics.median(plain_wall):.2f} s -> "
        f"{statistics.median(installed_wall):.2f} s)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--leaves", type=int, default=200)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--install-rounds", type=int, default=5)
    parser.add_argument("--checker", default="beartype")
    parser.add_argument("--part", choices=("seconds", "install", "all"), default="all")
    options = parser.parse_args()
    import jax

    backend = "sys.monitoring" if sys.version_info >= (3, 12) else "sys.setprofile"
    print(
        f"Python {platform.python_version()} ({backend}), jax {jax.__version__}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    if options.part in ("seconds", "all"):
        seconds(options.checker, options.rounds, options.calls, options.leaves)
    if options.part in ("install", "all"):
        install(options.checker, options.install_rounds, options.steps, 50)
    return 0


if __name__ == "__main__":
    sys.exit(main())
