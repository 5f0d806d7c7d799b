"""A jitted step returning a typechecked flax.struct state, under each mode.

The state has a `PyTree[Float[Array, "..."]]` field over N leaves (200 by default)
and is checked with beartype through jaxtyping. For each mode we report the time of
a cache-hit call relative to the same call with `jaxtyping_disable` (no plugin): the
overhead that typechecking adds at dispatch time. Modes:

- no plugin: the class as users write it today;
- unflatten_safe(step): the jitted step wrapped;
- with unflatten_safe(): around the loop;
- install(): the class defined after `typecheck_guard.install()`.

The state is the case of jaxtyping's issue #213, "jaxtyping with JAX severely
slowing down training speed", and `typecheck-guard bench --scenario flax-state`
measures it too (also under typeguard, next to the other scenarios): each mode is
measured interleaved with its baseline in one process (A, B, A, B, ...), and we
report the median of the per-round ratios with their spread: the machine is shared
and noisy, absolute times are not stable, ratios measured side by side are. See
`src/typecheck_guard/_tools/_bench/README.md`.

We also report `jax.tree.unflatten` of the state (a tree operation outside `jit`),
checked under `with unflatten_safe()` relative to `jaxtyping_disable`, and the cost
of an adapted class's flatten + unflatten relative to JAX's C++ `register_dataclass`
path (both unchecked).

Usage: python benchmarks/flax_struct_state.py [--leaves 200] [--rounds 15] [--calls 20]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import jax
import jax.numpy as jnp
from beartype import beartype

import typecheck_guard
from typecheck_guard._tools._bench._measure import interleaved
from typecheck_guard._tools._bench._scenarios import flax_state_prepare, mode_context

MODES = {
    "no plugin": "none",
    "unflatten_safe(step)": "unflatten_safe",
    "with unflatten_safe()": "unflatten_safe_with",
    "install()": "install",
}


def run(leaves: int, rounds: int, calls: int) -> dict[str, tuple[float, float, float]]:
    # The plain class (baseline, no plugin, unflatten_safe) is defined here, before
    # anything is installed; the install() mode defines its own inside its context.
    prepared = flax_state_prepare(beartype, leaves)
    ratios = {}
    for label, mode in MODES.items():
        with mode_context(mode):
            m = interleaved(
                prepared.make(mode),
                prepared.baseline,
                rounds=rounds,
                block_s=0.0,
                iterations=calls,
            )
        ratios[label] = (m.ratio, m.low, m.high)
    return ratios


def tree_unflatten_ratio(leaves: int, rounds: int, calls: int) -> dict[str, float]:
    """`jax.tree.unflatten` of the state (a tree operation, no jit): checked
    under each mode relative to `jaxtyping_disable`."""
    from typecheck_guard._tools._bench._scenarios import _state_define, _state_value

    Node, _ = _state_define(beartype)
    leaves_, treedef = jax.tree.flatten(_state_value(Node, leaves))

    def plain(n: int) -> None:
        for _ in range(n):
            jax.tree.unflatten(treedef, leaves_)

    def in_block(n: int) -> None:
        with typecheck_guard.unflatten_safe():
            for _ in range(n):
                jax.tree.unflatten(treedef, leaves_)

    out = {}
    for label, fn in (("no plugin", plain), ("with unflatten_safe()", in_block)):
        m = interleaved(fn, plain, rounds=rounds, block_s=0.0, iterations=calls)
        out[label] = m.ratio
    typecheck_guard.uninstall()
    return out


def flatten_unflatten_ratio(
    leaves: int, rounds: int, reps: int = 2000
) -> dict[str, float]:
    """Adapted (Python, generated) vs JAX's C++ dataclass node, both unchecked."""

    def make(register):
        @register
        @dataclasses.dataclass
        class S:
            a: jax.Array
            b: jax.Array
            params: dict
            tag: str = dataclasses.field(default="t", metadata=dict(static=True))

        return S

    out = {}
    for label, n in (
        ("4 fields, 3 leaves", 1),
        (f"4 fields, {leaves + 2} leaves", leaves),
    ):
        value = dict(
            a=jnp.ones(2),
            b=jnp.ones(2),
            params={f"w{i}": jnp.ones(2) for i in range(n)},
        )
        theirs = make(jax.tree_util.register_dataclass)(**value)
        ours = make(typecheck_guard.register_dataclass)(**value)

        def round_trip(x, reps=reps):
            flatten, unflatten = (
                jax.tree_util.tree_flatten,
                jax.tree_util.tree_unflatten,
            )
            start = time.perf_counter()
            for _ in range(reps):
                leaves_, treedef = flatten(x)
                x = unflatten(treedef, leaves_)
            return (time.perf_counter() - start) / reps

        per_round = []
        for _ in range(rounds):
            per_round.append(round_trip(ours) / round_trip(theirs))
        out[label] = statistics.median(per_round)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leaves", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    print(
        f"jitted step returning a jaxtyped flax.struct state, beartype, "
        f"{args.leaves} leaves; median of {args.rounds} interleaved rounds x "
        f"{args.calls} calls [lowest and highest round]"
    )
    print(f"{'mode':<24} {'checked / jaxtyping_disable':>28}")
    for name, (ratio, low, high) in run(args.leaves, args.rounds, args.calls).items():
        print(f"{name:<24} {ratio:>27.2f}x [{low:.2f}-{high:.2f}]")
    print()
    print("jax.tree.unflatten of the state (no jit), checked / jaxtyping_disable")
    for name, ratio in tree_unflatten_ratio(
        args.leaves, args.rounds, args.calls
    ).items():
        print(f"{name:<24} {ratio:>27.2f}x")
    print()
    print(
        "flatten + unflatten, adapted class / JAX's C++ register_dataclass (unchecked)"
    )
    for label, ratio in flatten_unflatten_ratio(args.leaves, args.rounds).items():
        print(f"{label:<24} {ratio:>27.2f}x")
    typecheck_guard.uninstall()


if __name__ == "__main__":
    main()
