"""What the runtime guard (and so the pytest plugin) adds to a jitted call.

For each scenario we build the same jitted callable twice: once with the guard off
(A: the library's own callable) and once through the patched factory while the guard
listens (B: `typecheck_guard`'s wrapper around the library's callable, as under
`--typecheck-guard=strict`). Both are warmed up, then timed interleaved in one
process, A, B, A, B, ..., and we report the median of the per-round ratios B / A.
No scenario runs a typecheck at dispatch time: this is the price of watching.

    python benchmarks/runtime_guard_overhead.py [--rounds 15] [--calls 300]

Also reported: an eager call of a small jaxtyped function with the guard on but
nothing watched, against a run without the guard (what every check of a program
pays once the guard is on), the first call (trace + compile) of a fresh `jax.jit`
function, the cost per call of a wrapper made while the guard was on, once nothing
listens, and
the time a host callback's own Python takes watched / plain (a progress meter's
refresh, which a program may time: tqdm prints one more line for each 0.1 s a bar
lives), measured
inside the callback, plain and checked by jaxtyping (as jaxtyping's import hook
checks a library's progress meter), the two interleaved round by round. Those
rows come first, and their plain rounds run with none of the guard's patches (as
a run without the plugin does): the guard is switched on for each watched round
and off after it (`_callback_cost.guard_watching`).
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

from _callback_cost import callback_cost, guard_watching

import typecheck_guard
from typecheck_guard._guard import _jitwrap, _watch


def _per_call(fn, args, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn(*args)
    return (time.perf_counter() - start) / calls


def _interleaved(
    a, b, args, rounds: int, calls: int
) -> tuple[float, float, float, float, float]:
    for fn in (a, b):
        for _ in range(3):
            fn(*args)
    return _rounds(
        lambda: _per_call(a, args, calls), lambda: _per_call(b, args, calls), rounds
    )


def _rounds(
    time_a: Callable[[], float], time_b: Callable[[], float], rounds: int
) -> tuple[float, float, float, float, float]:
    """`time_a()`, `time_b()`, A, B, ... for `rounds` rounds: the medians of A and
    B, the median of the per-round ratios B / A, and the lowest and highest."""
    ratios, times_a, times_b = [], [], []
    for _ in range(rounds):
        ta, tb = time_a(), time_b()
        ratios.append(tb / ta)
        times_a.append(ta)
        times_b.append(tb)
    return (
        statistics.median(times_a),
        statistics.median(times_b),
        statistics.median(ratios),
        min(ratios),
        max(ratios),
    )


def _scenarios():
    """name -> (make(transform-factory) -> callable, args). Imported lazily so that
    the "A" callables are built before the guard patches anything."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    from beartype import beartype
    from flax import nnx, struct
    from jaxtyping import Array, Float, PyTree, jaxtyped

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()

    @jaxtyped(typechecker=beartype)
    @struct.dataclass
    class State:  # adapted by install(): unflattens without its check
        params: PyTree[Float[Array, "..."]]
        step: Float[Array, ""]

    class Module(eqx.Module):
        w: Float[Array, " n"]

        @jaxtyped(typechecker=beartype)
        def __init__(self, w: Float[Array, " n"]):
            self.w = w

    class Model(eqx.Module):  # a diffrax-sized argument: 64 leaves, nested
        layers: list
        scale: Float[Array, ""]

    class NNXModel(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(3))

    x = jnp.ones(3)
    state = State({f"w{i}": jnp.ones(3) for i in range(16)}, jnp.zeros(()))
    model = NNXModel()
    big = Model([{"w": jnp.ones(3), "b": jnp.ones(3)} for _ in range(32)], x[0])

    def with_callback(x):
        jax.debug.callback(lambda x: None, x)
        return x + 1

    def nnx_step(m, x):
        return m.w[...] * x

    return {
        "jax.jit, one array": (lambda: jax.jit(lambda x: x + 1), (x,)),
        "jax.jit, flax.struct (16 leaves, install())": (
            lambda: jax.jit(lambda s: s.replace(step=s.step + 1)),
            (state,),
        ),
        "jax.jit, equinox.Module": (lambda: jax.jit(lambda m: m), (Module(x),)),
        "equinox.filter_jit, one array": (
            lambda: eqx.filter_jit(lambda x: x + 1),
            (x,),
        ),
        "equinox.filter_jit, equinox.Module": (
            lambda: eqx.filter_jit(lambda m: m),
            (Module(x),),
        ),
        "equinox.filter_jit, 64-leaf Module": (
            lambda: eqx.filter_jit(lambda m, x: (m, x + 1)),
            (big, x),
        ),
        "jax.jit, jax.debug.callback": (lambda: jax.jit(with_callback), (x,)),
        "flax.nnx.jit, nnx.Module": (lambda: nnx.jit(nnx_step), (model, x)),
        "jax.pmap, one array": (lambda: jax.pmap(lambda x: x + 1), (jnp.ones((1, 3)),)),
    }


def _eager_check(rounds: int, calls: int) -> tuple[float, float, float, float, float]:
    """An eager call of a small jaxtyped function (two 3-element arrays), with none
    of the guard's patches on (A) and with the guard on, after it watched a jitted
    call, but no call in flight (B): what every check of a program
    pays anywhere once the guard is on (on 3.12+, the calls of the guard's
    `sys.monitoring` events; on 3.11, jaxtyping's shape memo hooks). The guard is
    switched on for each B round and off after it (`guard_watching`)."""
    import jax
    import jax.numpy as jnp
    from beartype import beartype
    from jaxtyping import Array, Float, jaxtyped

    def f(x, y):
        return x

    # Annotated with objects: under `from __future__ import annotations` the
    # strings would name what only this function's scope has, and jaxtyping would
    # check nothing.
    vector = Float[Array, " n"]
    f.__annotations__ = {"x": vector, "y": vector, "return": vector}
    f = jaxtyped(typechecker=beartype)(f)
    x = jnp.ones(3)
    try:
        f(x, jnp.ones(4))
    except Exception:  # the check runs: `n` is 3, then 4
        pass
    else:
        raise AssertionError("_eager_check: the check checks nothing")

    def bump(x):
        return x + 1

    def timed(on: bool) -> float:
        with guard_watching() if on else contextlib.nullcontext():
            if on:
                jax.jit(bump)(x)  # a watched call: the guard listens from now on
            for _ in range(calls // 10):
                f(x, x)
            return _per_call(f, (x, x), calls)

    timed(False), timed(True)
    return _rounds(lambda: timed(False), lambda: timed(True), rounds)


def _first_calls(fresh: int) -> float:
    """Median ratio guarded / plain of trace + compile of fresh jitted functions."""
    import jax
    import jax.numpy as jnp

    original = jax.jit.__typecheck_guard_original__  # type: ignore[attr-defined]
    x = jnp.ones((8, 8))
    ratios = []
    for i in range(fresh):
        times = []
        for factory in (original, jax.jit):

            def body(x, i=i):
                for _ in range(20):
                    x = jnp.sin(x) * 2 + jnp.cos(x @ x.T)[:, : x.shape[1]] + i
                return x

            start = time.perf_counter()
            jax.block_until_ready(factory(body)(x))
            times.append(time.perf_counter() - start)
        ratios.append(times[1] / times[0])
    return statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--fresh", type=int, default=7)
    options = parser.parse_args()

    import jax

    print(
        f"Python {platform.python_version()}, jax {jax.__version__}, "
        f"{jax.devices()[0].platform}; {options.rounds} rounds x {options.calls} calls, "
        "median of per-round ratios"
    )
    print(f"{'scenario':46} {'plain':>9} {'guarded':>9} {'ratio':>6} {'added':>9}")

    # First, while the guard has never been on in this process: a host callback's
    # own Python in a run without the guard against one under it (`guard_watching`
    # switches it on for each watched round only, as a plain run has none of its
    # patches).
    def watched(on: bool) -> Any:
        return guard_watching() if on else contextlib.nullcontext()

    for name, (ta, tb, ratio, low, high) in callback_cost(
        watched, options.rounds, options.calls // 3
    ).items():
        print(
            f"{'host callback ' + name:46} {ta * 1e6:7.1f}us {tb * 1e6:7.1f}us "
            f"{ratio:6.2f} {(tb - ta) * 1e6:+7.1f}us (rounds {low:.2f}-{high:.2f})"
        )

    ta, tb, ratio, low, high = _eager_check(options.rounds, options.calls)
    print(
        f"{'eager jaxtyped call, guard on, nothing watched':46} {ta * 1e6:7.1f}us "
        f"{tb * 1e6:7.1f}us {ratio:6.2f} {(tb - ta) * 1e6:+7.1f}us "
        f"(rounds {low:.2f}-{high:.2f})"
    )

    scenarios = _scenarios()
    plain = {name: (make(), args) for name, (make, args) in scenarios.items()}
    _jitwrap.acquire()  # what the plugin does at startup
    guarded = {name: (make(), args) for name, (make, args) in scenarios.items()}
    with typecheck_guard.runtime_checks("log"):  # listening, as under the plugin
        for name in scenarios:
            fn_a, args = plain[name]
            fn_b, _ = guarded[name]
            ta, tb, ratio, low, high = _interleaved(
                fn_a, fn_b, args, options.rounds, options.calls
            )
            print(
                f"{name:46} {ta * 1e6:7.1f}us {tb * 1e6:7.1f}us {ratio:6.2f} "
                f"{(tb - ta) * 1e6:+7.1f}us (rounds {low:.2f}-{high:.2f})"
            )
        print(
            f"{'jax.jit first call (trace + compile)':46} {'':>9} {'':>9} "
            f"{_first_calls(options.fresh):6.2f}"
        )

    # Nothing listens any more (no plugin, level "allow"): the wrapper only forwards.
    fn_a, args = plain["jax.jit, one array"]
    fn_b, _ = guarded["jax.jit, one array"]
    assert not _watch.listening(), "run this outside pytest"
    ta, tb, ratio, low, high = _interleaved(
        fn_a, fn_b, args, options.rounds, options.calls
    )
    print(
        f"{'jax.jit, one array, wrapper not listening':46} {ta * 1e6:7.1f}us "
        f"{tb * 1e6:7.1f}us {ratio:6.2f} {(tb - ta) * 1e6:+7.1f}us "
        f"(rounds {low:.2f}-{high:.2f})"
    )
    _jitwrap.release()


if __name__ == "__main__":
    sys.exit(main())
