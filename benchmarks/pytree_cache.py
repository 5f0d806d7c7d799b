"""Benchmark of the `PyTree[...]` cache: an eager call of

    @jaxtyped(typechecker=beartype)
    def f(p: PyTree[Float[Array, "..."]]): ...

on a 200-leaf dict of arrays, warm and cached, against the same call uncached
(`cache_pytree_checks(False)`) and against a bare `jax.tree_util.tree_flatten` of the
same tree (what a cache hit cannot avoid doing). `--tree nested` takes Flax-style
parameters instead (100 layers of `{"kernel", "bias"}` under `"params"`), and
`--tree nodes` a list of 100 `flax.struct` dataclasses with a static field (registered
nodes whose aux data the cache compares).

The machine may be shared and noisy, so we never compare absolute timings taken at
different moments: each round times the three one after the other, and we report the
median over rounds of the per-round ratios.

    python benchmarks/pytree_cache.py [--rounds 21] [--leaves 200] [--tree dict]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from jaxtyping import Array, Float, PyTree, jaxtyped

import typecheck_guard


def per_call(fn: Callable[[], Any], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--leaves", type=int, default=200)
    parser.add_argument("--tree", choices=["dict", "nested", "nodes"], default="dict")
    args = parser.parse_args()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()

    @jaxtyped(typechecker=beartype)
    def f(p: PyTree[Float[Array, "..."]]):  # no return annotation: one check per call
        pass

    shapes = [(16,), (16, 16), (64, 16), (3, 3, 16, 32)]

    def array(i: int) -> Any:
        return jnp.asarray(np.ones(shapes[i % len(shapes)], np.float32))

    tree: Any
    if args.tree == "dict":
        tree = {f"layer{i:03d}": array(i) for i in range(args.leaves)}
    elif args.tree == "nested":
        tree = {
            "params": {
                f"Dense_{i}": {"kernel": array(i), "bias": array(i + 1)}
                for i in range(args.leaves // 2)
            }
        }
    else:
        from flax import struct

        @struct.dataclass
        class Layer:
            kernel: Any
            bias: Any
            features: int = struct.field(pytree_node=False, default=16)

        tree = [Layer(array(i), array(i + 1)) for i in range(args.leaves // 2)]

    def cached() -> None:
        f(tree)

    def uncached() -> None:
        with typecheck_guard.cache_pytree_checks(False):
            f(tree)

    def flatten() -> None:
        jax.tree_util.tree_flatten(tree)

    # Warm up: the first cached call is the miss that fills the cache.
    for fn in (cached, uncached, flatten):
        fn()
    before = typecheck_guard.pytree_cache_info()

    speedups, floor_ratios = [], []
    times: dict[str, list[float]] = {"cached": [], "uncached": [], "flatten": []}
    for _ in range(args.rounds):
        t_cached = per_call(cached, 200)
        t_uncached = per_call(uncached, 5)
        t_flatten = per_call(flatten, 200)
        speedups.append(t_uncached / t_cached)
        floor_ratios.append(t_cached / t_flatten)
        times["cached"].append(t_cached)
        times["uncached"].append(t_uncached)
        times["flatten"].append(t_flatten)

    after = typecheck_guard.pytree_cache_info()
    # Every cached call was a hit; the uncached ones never touched the cache.
    assert after.hits - before.hits == 200 * args.rounds, (before, after)
    assert after.misses == before.misses, (before, after)

    print(f"{args.leaves}-leaf {args.tree} of arrays, {args.rounds} interleaved rounds")
    print(f"jax {jax.__version__}, typecheck_guard {typecheck_guard.__version__}")
    for name, values in times.items():
        print(f"  {name:>9}: median {statistics.median(values) * 1e6:10.1f} us/call")
    print(
        f"  uncached / cached: median {statistics.median(speedups):7.1f}x "
        f"(rounds: {min(speedups):.1f}x to {max(speedups):.1f}x; target >= 200x)"
    )
    print(
        f"  cached / tree_flatten: median {statistics.median(floor_ratios):5.2f}x "
        f"(rounds: {min(floor_ratios):.2f}x to {max(floor_ratios):.2f}x; aim <= 3x)"
    )


if __name__ == "__main__":
    main()
