"""What `install()` costs where it has nothing to remove, and what it leaves of a
check where it removes one: each unflatten of a class registered after `install()`
against the same class registered before it (JAX's own registration), measured
interleaved in one process (A, B, A, B, ...), the median of the per-round ratios
with the lowest and highest.

- An Equinox model of 1,000 modules: Equinox's unflatten never calls `__init__`, so
  `install()` leaves its registration alone; after / before should be 1.00x.
- An unchecked custom node (`tree_unflatten` calls the constructor, no checker):
  `install()` wraps its unflatten to mark JAX's calls, which costs one Python call
  per node; after / before is that cost.
- A checked custom node, the same with `@jaxtyped(typechecker=beartype)` on
  `__init__`: after `install()` / before it with checks off (`jaxtyping_disable`),
  i.e. what is left once the check is removed.

    python benchmarks/install_overhead.py [--rounds 21] [--nodes 1000]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jaxtyping
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard


def _equinox(nodes: int) -> Any:
    class Layer(eqx.Module):
        weight: jax.Array
        bias: jax.Array

    class Model(eqx.Module):
        layers: list

    return Model([Layer(jnp.ones((2, 2)), jnp.zeros(2)) for _ in range(nodes)])


def _custom(nodes: int, checked: bool) -> Any:
    @jax.tree_util.register_pytree_node_class
    class Node:
        def __init__(self, weight: Float[Array, "a b"], bias: Float[Array, " b"]):
            self.weight = weight
            self.bias = bias

        if checked:
            __init__ = jaxtyped(typechecker=beartype)(__init__)

        def tree_flatten(self) -> tuple[tuple[Any, ...], None]:
            return (self.weight, self.bias), None

        @classmethod
        def tree_unflatten(cls, aux: None, children: Any) -> Any:
            return cls(*children)

    return [Node(jnp.ones((2, 2)), jnp.zeros(2)) for _ in range(nodes)]


def unflattening(tree: Any) -> Callable[[], Any]:
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    return lambda: jax.tree_util.tree_unflatten(treedef, leaves)


def per_call(fn: Callable[[], Any], seconds: float = 0.2) -> float:
    # The collector runs when it likes: off while we time, each side the same.
    gc.disable()
    try:
        number, start = 0, time.perf_counter()
        while True:
            fn()
            number += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                return elapsed / number
    finally:
        gc.enable()


def interleaved(
    a: Callable[[], Any],
    b: Callable[[], Any],
    rounds: int,
    switch: Callable[[bool], None] | None = None,
) -> tuple[float, float, float]:
    """Median, lowest and highest of a / b over `rounds`; `switch(True)` before each
    b (checks off), `switch(False)` after."""
    ratios = []
    for _ in range(rounds):
        ta = per_call(a)
        if switch:
            switch(True)
        tb = per_call(b)
        if switch:
            switch(False)
        ratios.append(ta / tb)
    return statistics.median(ratios), min(ratios), max(ratios)


def checks_off(on: bool) -> None:
    jaxtyping.config.update("jaxtyping_disable", on)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--nodes", type=int, default=1000)
    args = parser.parse_args()
    before = {
        "equinox": _equinox(args.nodes),
        "unchecked": _custom(args.nodes, checked=False),
        "checked": _custom(args.nodes, checked=True),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    after = {
        "equinox": _equinox(args.nodes),
        "unchecked": _custom(args.nodes, checked=False),
        "checked": _custom(args.nodes, checked=True),
    }
    rows = [
        (
            f"Equinox model, {args.nodes} modules: after / before install()",
            interleaved(
                unflattening(after["equinox"]),
                unflattening(before["equinox"]),
                args.rounds,
            ),
        ),
        (
            f"unchecked custom nodes x{args.nodes}: after / before install()",
            interleaved(
                unflattening(after["unchecked"]),
                unflattening(before["unchecked"]),
                args.rounds,
            ),
        ),
        (
            f"checked custom nodes x{args.nodes}: after install() / before, checks off",
            interleaved(
                unflattening(after["checked"]),
                unflattening(before["checked"]),
                args.rounds,
                switch=checks_off,
            ),
        ),
    ]
    print(f"unflatten, median of {args.rounds} interleaved rounds [lowest-highest]")
    for label, (median, low, high) in rows:
        print(f"  {label:<66} {median:5.2f}x [{low:.2f}-{high:.2f}]")
    typecheck_guard.uninstall()


if __name__ == "__main__":
    main()
