"""The profile of a real library's test suite under jaxtyping's import hook, against
what the checks cost there, measured without the profiler.

Under `--jaxtyping-packages=PKG,beartype.beartype` every function of PKG is checked,
bodies nest deep, and most checks run while JAX traces. Per round, interleaved:

- on: `pytest ARGS` with the import hook, as the suite runs it;
- off: the same with `JAXTYPING_DISABLE=1` (jaxtyping's switch: the hook still
  decorates, no check runs);
- profiled: `typecheck-guard profile --json -m pytest ARGS`, with checks on, whose
  reported check time we keep.

We print the CPU time (user + system, children) of each run, and the ratio of the
reported check time to on - off (the issue's bar: within 25%).

    python benchmarks/import_hook_suite.py --suite DIR [--rounds 3] [--every-checker] \\
        -- pytest args...

(`--every-checker`: profile with `typecheck-guard profile --every-checker`.)

e.g. Equinox's own tests at the installed release's tag, with its own settings
(its `pyproject.toml` passes `--jaxtyping-packages=equinox,beartype.beartype(...)`):

    python benchmarks/import_hook_suite.py --suite /tmp/eqxsuite -- \\
        tests/test_jit.py tests/test_module.py tests/test_tree.py

or Diffrax's (an ODE library; its `pyproject.toml` checks `diffrax` the same way):

    python benchmarks/import_hook_suite.py --suite /tmp/dfxsuite -- \\
        test/test_progress_meter.py test/test_term.py
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


def _cpu(args: list[str], cwd: str, env: dict[str, str]) -> tuple[float, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    last = (proc.stdout.strip().splitlines() or [""])[-1]
    return seconds, last


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", required=True, help="the directory to run pytest in")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--every-checker", action="store_true")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    args = [a for a in options.pytest_args if a != "--"]
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args]
    env = dict(os.environ)
    env.pop("JAXTYPING_DISABLE", None)
    off_env = dict(env, JAXTYPING_DISABLE="1")
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f}; pytest {' '.join(args)} in {options.suite}"
    )
    ons, offs, profiled_cpu, reported, ratios = [], [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "profile.json")
        for i in range(options.rounds):
            on, on_last = _cpu(pytest, options.suite, env)
            off, off_last = _cpu(pytest, options.suite, off_env)
            cpu, prof_last = _cpu(
                [
                    sys.executable,
                    "-m",
                    "typecheck_guard",
                    "profile",
                    *(["--every-checker"] if options.every_checker else []),
                    "--json",
                    out,
                    "-m",
                    "pytest",
                    # The profiler imports jaxtyping, beartype and typeguard before
                    # pytest starts, too late for pytest to rewrite their plugins'
                    # asserts: it warns, and `filterwarnings = error` stops it.
                    "-W",
                    "ignore::pytest.PytestAssertRewriteWarning",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    *args,
                ],
                options.suite,
                env,
            )
            with open(out) as f:
                checks = json.load(f)["check_seconds"]
            ons.append(on)
            offs.append(off)
            profiled_cpu.append(cpu)
            reported.append(checks)
            ratios.append(checks / (on - off) if on > off else float("nan"))
            print(
                f"round {i + 1}: on {on:7.2f} s ({on_last}); off {off:7.2f} s "
                f"({off_last}); profiled {cpu:7.2f} s ({prof_last}), reported checks "
                f"{checks:6.2f} s; reported / (on - off) {ratios[-1]:.2f}; profiled / "
                f"on {cpu / on:.2f}x"
            )
    # The checks are a few percent of a suite's CPU time, about as much as two runs
    # of it differ: a single round's ratio is noise, so we also compare the
    # reported time with the difference of the medians and of the means.
    diffs = [on - off for on, off in zip(ons, offs, strict=True)]
    reported_median = statistics.median(reported)
    of_medians = statistics.median(ons) - statistics.median(offs)
    of_means = statistics.mean(ons) - statistics.mean(offs)
    print(
        f"on - off: {of_medians:.2f} s CPU (medians), {of_means:.2f} s (means), "
        f"{statistics.median(diffs):.2f} s (median of rounds, "
        f"{min(diffs):.2f} to {max(diffs):.2f}); reported {reported_median:.2f} s "
        f"({min(reported):.2f}-{max(reported):.2f})"
    )
    # The overhead, as every benchmark here reports a ratio: the median of the
    # per-round ratios, with the lowest and highest round.
    overheads = [p / on for p, on in zip(profiled_cpu, ons, strict=True)]
    print(
        f"reported / (on - off): {reported_median / of_medians:.2f} (medians), "
        f"{statistics.mean(reported) / of_means:.2f} (means); profiled / on "
        f"{statistics.median(overheads):.2f}x CPU (rounds {min(overheads):.2f}-"
        f"{max(overheads):.2f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
