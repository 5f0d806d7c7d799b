"""What `install()` costs, now that it imports nothing and patches each library as
the program imports it.

Three programs, each in a fresh interpreter, alternating (A, B, C, then C, B, A, ...)
for `--rounds` rounds; each reports the CPU time of its own process (user + system,
`resource.getrusage`) and, in-process, the wall time of the `install()` call:

- A, first: `install()`, then `import jax`, `from jaxtyping import PyTree`,
  `import flax.struct` (the parts patch JAX and jaxtyping as they are imported);
- B, after: the same imports, then `install()` (it patches them at once);
- C, plain: the same imports, no `install()`.

We print the median of the per-round ratios A/C and B/C with their lowest and
highest, and the median `install()` call in A and in B. All three import
`typecheck_guard` first.

    python benchmarks/install_imports.py [--rounds 20]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

PROGRAM = """
import resource, sys, time, json
import typecheck_guard
mode = sys.argv[1]
took = None
if mode == "first":
    t = time.perf_counter(); typecheck_guard.install(); took = time.perf_counter() - t
import jax
from jaxtyping import PyTree
import flax.struct
if mode == "after":
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter(); typecheck_guard.install(); took = time.perf_counter() - t
u = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"cpu": u.ru_utime + u.ru_stime, "install": took}))
"""


def _one(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TYPECHECK_GUARD"}
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM, mode],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    modes = ["first", "after", "plain"]
    runs: dict[str, list[dict]] = {m: [] for m in modes}
    for i in range(args.rounds):
        for mode in modes if i % 2 == 0 else modes[::-1]:
            runs[mode].append(_one(mode))
    print(f"{sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.rounds} rounds")
    for mode in ("first", "after"):
        ratios = [
            a["cpu"] / c["cpu"] for a, c in zip(runs[mode], runs["plain"], strict=True)
        ]
        calls = [r["install"] * 1e3 for r in runs[mode]]
        print(
            f"install() {mode}: CPU time / plain, median {statistics.median(ratios):.3f} "
            f"(lowest {min(ratios):.3f}, highest {max(ratios):.3f}); the install() "
            f"call, median {statistics.median(calls):.2f} ms (lowest {min(calls):.2f}, "
            f"highest {max(calls):.2f})"
        )
    plain = [r["cpu"] * 1e3 for r in runs["plain"]]
    print(f"plain: CPU time median {statistics.median(plain):.0f} ms")


if __name__ == "__main__":
    main()
