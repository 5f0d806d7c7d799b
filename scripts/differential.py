"""Run the differential suite (tests/differential/) and print, per region, how many
programs ran and how many differ from plain JAX in each plugin mode, then every
difference: the program, the mode and what differs.

    python scripts/differential.py                 # the default batches (as in CI)
    python scripts/differential.py --full          # every program of every region
    python scripts/differential.py --region nested --region aot --seed 7 --size 20
    python scripts/differential.py --full --region custom --mode install
    python scripts/differential.py --program nested-post_init-struct-jt_bt-inner_struct-again_fail
    python scripts/differential.py --dump DIR      # write the programs out, run nothing
    python scripts/differential.py --full --selfcheck   # plain twice: the harness's noise
    python scripts/differential.py --again         # each program's main() twice (as in CI)

A dumped program runs alone: `PYTHONPATH=tests/differential python DIR/NAME.py MODE`
(`DIFFERENTIAL_REPEAT=2` before it: its `main()` twice, as `--again` runs it)
prints its record. Exit status: 1 when any exactness difference was found.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "differential"))

import differential_programs as programs_mod  # noqa: E402
import differential_runner as runner  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--full", action="store_true", help="every program of each region"
    )
    parser.add_argument("--region", action="append", choices=programs_mod.REGIONS)
    parser.add_argument("--mode", action="append", choices=runner.PLUGIN_MODES)
    parser.add_argument(
        "--program", action="append", help="run only these programs (by name)"
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="the default batches' seed"
    )
    parser.add_argument(
        "--size",
        type=int,
        default=programs_mod.DEFAULT_SIZE,
        help="programs per region",
    )
    parser.add_argument(
        "--parallel", type=int, default=2, help="interpreters at a time"
    )
    parser.add_argument(
        "--dump", type=pathlib.Path, help="write the programs to this folder and stop"
    )
    parser.add_argument(
        "--json", type=pathlib.Path, help="write every record and difference here"
    )
    parser.add_argument(
        "--coverage",
        action="store_true",
        help="also list `not covered` and `row 7` (verdict cache) checks",
    )
    parser.add_argument(
        "--again",
        action="store_true",
        help="run each program's main() twice: its constructions again after its "
        "first unflattens",
    )
    parser.add_argument(
        "--selfcheck",
        action="store_true",
        help="run the programs twice without the plugin: every difference is noise",
    )
    args = parser.parse_args()

    regions = args.region or list(programs_mod.REGIONS)
    seed = programs_mod.default_seed() if args.seed is None else args.seed
    chosen: list[programs_mod.Program] = []
    for region in regions:
        if args.full or args.program:
            chosen += programs_mod.generate(region)
        else:
            chosen += programs_mod.batch(region, seed, args.size)
    if args.program:
        chosen = [p for p in chosen if p.name in set(args.program)]
        if not chosen:
            parser.error("no such program")
    if args.again:
        chosen = programs_mod.again(chosen)
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        for p in chosen:
            (args.dump / f"{p.name}.py").write_text(p.source)
        print(f"wrote {len(chosen)} programs to {args.dump}")
        return 0

    print(
        f"{len(chosen)} programs, seed {seed}{' (full)' if args.full else ''}"
        f"{' (each main() twice)' if args.again else ''}",
        flush=True,
    )
    started = time.monotonic()
    if args.selfcheck:
        noise, log = runner.selfcheck(chosen, args.parallel)
        for line in log:
            print("note:", line)
        for d in noise:
            print(f"  {d}")
        print(
            f"plain against plain: {len(noise)} differences "
            f"({time.monotonic() - started:.0f} s)"
        )
        return 1 if noise else 0
    results, log = runner.run_all(chosen, args.mode, args.parallel)
    elapsed = time.monotonic() - started
    diffs = runner.compare_all(chosen, results)
    modes = [m for m in runner.PLUGIN_MODES if m in diffs]

    by_region = collections.defaultdict(list)
    for p in chosen:
        by_region[p.region].append(p)
    head = f"{'region':<12} {'generated':>9} {'run':>5} " + " ".join(
        f"{m + ' exact/cover':>22}" for m in modes
    )
    print(head)
    print("-" * len(head))
    totals = collections.Counter()
    for region in regions:
        cells = []
        for m in modes:
            ran = {p.name for p in by_region[region] if p.name in results.get(m, {})}
            d = [x for x in diffs[m] if x.region == region]
            exact = len({x.program for x in d if x.exact})
            cover = len(
                {x.program for x in d if not x.exact and x.kind == "not covered"}
            )
            totals[m, "exact"] += exact
            cells.append(f"{exact:>5}/{cover:<4} of {len(ran):<4}".rjust(22))
        generated = len(programs_mod.generate(region))
        print(
            f"{region:<12} {generated:>9} {len(by_region[region]):>5} "
            + " ".join(cells)
        )
    print(
        f"(programs with an exactness difference / with a check still run on unflatten, of those run; {elapsed:.0f} s)"
    )
    for line in log:
        print("note:", line)

    for m in modes:
        shown = [d for d in diffs[m] if d.exact or args.coverage]
        if not shown:
            continue
        print(f"\n== {m}: {len(shown)} differences")
        for d in shown:
            print(f"  {d}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "seed": seed,
                    "results": results,
                    "differences": {
                        m: [vars(d) for d in ds] for m, ds in diffs.items()
                    },
                },
                indent=1,
            )
        )
    return 1 if any(totals[m, "exact"] for m in modes) else 0


if __name__ == "__main__":
    sys.exit(main())
