"""What the `TYPECHECK_GUARD` start-up hook costs an interpreter's start when the
variable is unset.

Two throwaway virtual environments of the same Python, identical but for
`typecheck_guard.pth` in the first one's site-packages (both hold one other `.pth`
file, as an environment with typecheck_guard installed does; `--alone`: none): `python -c pass` in each,
alternating (A, B, B, A, A, B, ...: each round runs both, in an order that flips every
round), many rounds. Per round we keep each one's wall time, CPU time (user +
system of the child) and the time its `import site` took (which runs the `.pth`
files; `-X importtime` measures it in the child). We print the median of the
per-round ratios A/B, their spread (lowest and highest), the median of the
per-round differences A - B in milliseconds, and each one's fastest run (the least
disturbed by other processes). The variable is unset in both, as it is for every
process of a program that does not use it.

    python benchmarks/startup_hook.py [--rounds 400] [--python PATH]

Noisy on a shared machine: a start takes ~10-30 ms, the hook tens of microseconds.
So we also time, in this process, what Python does with the file as it starts
(`site.addpackage`: open it, read it, run its `import` line), against the same call
for an empty `.pth` file, interleaved, per call.

With `--set`, it also times, in the environment this script runs in, against the
variable unset: `TYPECHECK_GUARD=install python -c pass` (which imports
typecheck_guard and calls `install()`, which imports nothing heavy), and `python -c
"import jax"` (where `install()`'s parts patch JAX and read its registry, as JAX is
imported), `--rounds / 10` rounds of each.
"""

import argparse
import os
import pathlib
import resource
import site
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).parents[1]
PTH = ROOT / "src" / "typecheck_guard.pth"


def _site_packages(python: str) -> pathlib.Path:
    out = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return pathlib.Path(out.stdout.strip())


def _venv(base: str, where: pathlib.Path, with_hook: bool, alone: bool) -> str:
    subprocess.run(
        [base, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120
    )
    python = str(where / "bin" / "python")
    packages = _site_packages(python)
    if with_hook:
        (packages / PTH.name).write_text(PTH.read_text())
    if not alone:
        # Where typecheck_guard is installed there are other `.pth` files (an
        # editable install's, setuptools' `distutils-precedence.pth`): reading the
        # first one costs a process more than each next one.
        (where / "src").mkdir()
        (packages / "_other.pth").write_text(f"{where / 'src'}\n")
    return python


def _time(args: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of the child, seconds in `site`) of one run.

    The last is the `site` row of `-X importtime` (what the child itself measured of
    its `import site`, which processes the `.pth` files): it is free of the noise of
    starting a process, and of the coarse CPU accounting of some kernels."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run(
        [args[0], "-X", "importtime", *args[1:]],
        env=env,
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    site_us = next(
        int(line.split("|")[1])
        for line in out.stderr.splitlines()
        if line.startswith("import time:") and line.split("|")[2].strip() == "site"
    )
    return wall, cpu, site_us / 1e6


def _report(name: str, a: list[tuple[float, float]], b: list[tuple[float, float]]):
    for i, what in enumerate(("wall", "cpu", "site")):
        ratios = [x[i] / y[i] for x, y in zip(a, b, strict=True) if y[i] > 0]
        diffs = [(x[i] - y[i]) * 1e3 for x, y in zip(a, b, strict=True)]
        print(
            f"{name} {what}: A {statistics.median(x[i] for x in a) * 1e3:.2f} ms, "
            f"B {statistics.median(y[i] for y in b) * 1e3:.2f} ms; median ratio A/B "
            f"{statistics.median(ratios):.4f} (lowest {min(ratios):.3f}, highest "
            f"{max(ratios):.3f}); median A - B {statistics.median(diffs):+.3f} ms "
            f"(quartiles {statistics.quantiles(diffs, n=4)[0]:+.3f}, "
            f"{statistics.quantiles(diffs, n=4)[2]:+.3f}) over {len(ratios)} rounds; "
            f"fastest A {min(x[i] for x in a) * 1e3:.3f} ms, fastest B "
            f"{min(y[i] for y in b) * 1e3:.3f} ms"
        )


def _interleaved(
    a_args: list[str], b_args: list[str], a_env: dict, b_env: dict, rounds: int
) -> tuple[list, list]:
    a, b = [], []
    for i in range(rounds):
        if i % 2:
            b.append(_time(b_args, b_env))
            a.append(_time(a_args, a_env))
        else:
            a.append(_time(a_args, a_env))
            b.append(_time(b_args, b_env))
    return a, b


def _in_process(rounds: int, calls: int = 200) -> None:
    """`site.addpackage` of our `.pth` against that of an empty one, per call."""
    with tempfile.TemporaryDirectory() as tmp:
        (pathlib.Path(tmp) / PTH.name).write_text(PTH.read_text())
        (pathlib.Path(tmp) / "empty.pth").write_text("")
        saved = os.environ.pop("TYPECHECK_GUARD", None)
        try:
            per_call = {PTH.name: [], "empty.pth": []}
            for i in range(rounds):
                order = [PTH.name, "empty.pth"]
                for name in order if i % 2 else order[::-1]:
                    start = time.perf_counter()
                    for _ in range(calls):
                        site.addpackage(tmp, name, set())
                    per_call[name].append((time.perf_counter() - start) / calls)
        finally:
            if saved is not None:
                os.environ["TYPECHECK_GUARD"] = saved
        ours, empty = per_call[PTH.name], per_call["empty.pth"]
        diffs = [(a - b) * 1e6 for a, b in zip(ours, empty, strict=True)]
        print(
            f"in process, site.addpackage: ours {statistics.median(ours) * 1e6:.1f} "
            f"us, an empty .pth {statistics.median(empty) * 1e6:.1f} us per call; "
            f"median difference {statistics.median(diffs):+.1f} us (lowest "
            f"{min(diffs):+.1f}, highest {max(diffs):+.1f}) over {rounds} rounds of "
            f"{calls} calls"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--set", action="store_true", dest="variable_set")
    parser.add_argument(
        "--alone",
        action="store_true",
        help="no other .pth file in either environment (ours is the first one read)",
    )
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "TYPECHECK_GUARD"}
    base = subprocess.run(
        [args.python, "-c", "import sys; print(sys._base_executable)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"{sys.version.split()[0]} ({base}), {os.cpu_count()} CPUs")
    _in_process(max(args.rounds // 10, 5))
    with tempfile.TemporaryDirectory() as tmp:
        with_hook = _venv(base, pathlib.Path(tmp) / "a", True, args.alone)
        without = _venv(base, pathlib.Path(tmp) / "b", False, args.alone)
        command = ["-c", "pass"]
        for python in (with_hook, without):  # warm the page cache
            _time([python, *command], env)
        a, b = _interleaved(
            [with_hook, *command], [without, *command], env, env, args.rounds
        )
        _report("A: with the hook, B: without, variable unset", a, b)
    if args.variable_set:
        on = dict(env, TYPECHECK_GUARD="install")
        for command in (["-c", "pass"], ["-c", "import jax"]):
            a, b = _interleaved(
                [args.python, *command],
                [args.python, *command],
                on,
                env,
                max(args.rounds // 10, 5),
            )
            _report(
                f"A: TYPECHECK_GUARD=install, B: unset, python {' '.join(command)}",
                a,
                b,
            )


if __name__ == "__main__":
    main()
