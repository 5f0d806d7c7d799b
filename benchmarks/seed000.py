"""Seed 000: a jitted step returning a typechecked flax.struct state.

The state has a `PyTree[Float[Array, "..."]]` field over N leaves (200 by default)
and is checked with beartype through jaxtyping. For each mode we report the time of
a cache-hit call relative to the same call with `jaxtyping_disable` (no plugin): the
overhead that typechecking adds at dispatch time. Modes:

- no plugin: the class as users write it today;
- unflatten_safe(step): the jitted step wrapped;
- with unflatten_safe(): around the loop;
- install(): the class defined after `typecheck_guard.install()`.

Times are measured interleaved in one process (baseline, mode 1, mode 2, ...,
repeated) and we report the median of the per-round ratios: the machine is shared
and noisy, absolute times are not stable, ratios measured side by side are.

We also report the cost of an adapted class's flatten + unflatten relative to JAX's
C++ `register_dataclass` path (both unchecked).

Usage: python benchmarks/seed000.py [--leaves 200] [--rounds 15] [--calls 20]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import warnings

import jax
import jax.numpy as jnp
import jaxtyping
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped

import typecheck_guard


def make_node():
    @jaxtyped(typechecker=beartype)
    @struct.dataclass
    class Node:
        params: PyTree[Float[Array, "..."]]
        step: Float[Array, ""]
        name: str = struct.field(pytree_node=False, default="node")

    return Node


def step_fn(s):
    return s.replace(
        params=jax.tree.map(lambda p: p * 0.999, s.params), step=s.step + 1
    )


def timed(fn, state, calls):
    start = time.perf_counter()
    for _ in range(calls):
        state = fn(state)
    jax.block_until_ready(state)
    return (time.perf_counter() - start) / calls, state


def run(leaves: int, rounds: int, calls: int) -> dict[str, float]:
    params = {f"w{i}": jnp.ones((4,)) for i in range(leaves)}
    Plain = make_node()  # defined before install(): not adapted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    Adapted = make_node()
    assert typecheck_guard._register.adapted_how(Adapted) is not None

    step = jax.jit(step_fn)
    guarded = typecheck_guard.unflatten_safe(step)

    def with_block(s):
        with typecheck_guard.unflatten_safe():
            return step(s)

    modes = {
        "no plugin": (step, Plain),
        "unflatten_safe(step)": (guarded, Plain),
        "with unflatten_safe()": (None, Plain),
        "install()": (step, Adapted),
    }
    states = {name: cls(params, jnp.zeros(())) for name, (_, cls) in modes.items()}
    baseline_state = Plain(params, jnp.zeros(()))

    def loop_with(state):
        start = time.perf_counter()
        with typecheck_guard.unflatten_safe():
            for _ in range(calls):
                state = step(state)
        jax.block_until_ready(state)
        return (time.perf_counter() - start) / calls, state

    # Warm up: trace, compile, fill the verdict cache.
    for name, (fn, _) in modes.items():
        states[name] = (fn or step)(states[name])
    baseline_state = step(baseline_state)
    with_block(states["with unflatten_safe()"])

    ratios: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(rounds):
        jaxtyping.config.update("jaxtyping_disable", True)
        base, baseline_state = timed(step, baseline_state, calls)
        jaxtyping.config.update("jaxtyping_disable", False)
        for name, (fn, _) in modes.items():
            if fn is None:
                t, states[name] = loop_with(states[name])
            else:
                t, states[name] = timed(fn, states[name], calls)
            ratios[name].append(t / base)
    return {name: statistics.median(r) for name, r in ratios.items()}


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
        f"seed 000: jitted step returning a jaxtyped flax.struct, beartype, "
        f"{args.leaves} leaves; median of {args.rounds} interleaved rounds x "
        f"{args.calls} calls"
    )
    print(f"{'mode':<24} {'checked / jaxtyping_disable':>28}")
    for name, ratio in run(args.leaves, args.rounds, args.calls).items():
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
