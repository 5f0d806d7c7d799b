"""The profiler and the runtime guard inside host callbacks, whichever of them put
its hooks in a checked function's closure first.

On Python 3.11 both follow a jaxtyping check through cells of jaxtyping's closure:
the profiler's body hook and signature (`_profile/_engine.py`), or the guard's
stubs and signature, put there when the guard first saw the function checked in a
host callback (`_guard/_entries.py`). Each keeps the other's, and each must still
see what its own would show: the body's start and end (its time is not the check's,
and a check in it is its own), and a call whose arguments don't bind. These tests
run the same program with either set of hooks in place and compare the records,
check by check. (On 3.12+ `sys.monitoring` sees the body itself: the same tests
pass there.)
"""

import collections
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from typecheck_guard._guard import _detect, _watch
from typecheck_guard._profile import _data, _engine

N_CALLS = 3


class _Records(_data.Totals):
    """A recorder that keeps every record the engine hands it."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[_data.Record] = []

    def _add(self, record: _data.Record) -> None:
        self.records.append(record)
        super()._add(record)


def _key(record: _data.Record) -> tuple[Any, ...]:
    return (
        record.checked,
        record.checker,
        record.kind,
        record.when,
        record.jitted,
        getattr(record.cls, "__qualname__", None),
        record.pytree,
        record.failed,
        record.rebuild,
        record.hook,
        record.made_at,
        record.error is not None,
        record.frame is not None,
    )


def _name(record: _data.Record) -> str:
    parts = record.checked.split(".")
    return parts[-2] if parts[-1] == "__init__" else parts[-1]


def _program(typecheck: Any, guard_first: bool) -> Any:
    """A jitted step whose host callback runs checks of every shape jaxtyping's
    wrapper takes: passing, failing, arguments that don't bind, a check in another's
    body, recursion, a body that raises, no return value to check, a checked
    constructor, and checks while JAX traces inside the callback. Its first run is
    watched by the runtime guard (`guard_first`: the guard's hooks go in the
    closures) or by nothing."""

    @jaxtyped(typechecker=typecheck)
    def scale(x: Float[Array, ""], k: float) -> Float[Array, ""]:
        return x * k

    @jaxtyped(typechecker=typecheck)
    def outer(x: Float[Array, ""]) -> Float[Array, ""]:
        return scale(x, 2.0) + 1.0

    @jaxtyped(typechecker=typecheck)
    def countdown(n: int) -> int:
        return 0 if n == 0 else countdown(n - 1)

    @jaxtyped(typechecker=typecheck)
    def raises(x: Float[Array, ""]) -> Float[Array, ""]:
        raise ValueError("the body")

    @jaxtyped(typechecker=typecheck)
    def unannotated_return(x: Float[Array, ""]):
        return None

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Reading:
        x: Float[Array, ""]

    def host(x: Any) -> None:
        x = jnp.asarray(x)
        scale(x, 3.0)
        outer(x)
        countdown(3)
        with pytest.raises(typecheck.errors):
            scale(jnp.zeros(2), 1.0)
        with pytest.raises(TypeError):
            scale(x)  # pyright: ignore[reportCallIssue]
        with pytest.raises(ValueError):
            raises(x)
        unannotated_return(x)
        Reading(x)
        with pytest.raises(typecheck.errors):
            Reading(jnp.zeros(2))
        jax.eval_shape(lambda y: outer(y), x)  # JAX traces, in the callback

    step = jax.jit(lambda x: jax.debug.callback(host, x) or x + 1.0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_watch, "_sinks", [lambda tally: False] if guard_first else [])
        with typecheck_guard.runtime_checks("log" if guard_first else "allow"):
            jax.block_until_ready(step(jnp.float32(0.0)))
            jax.effects_barrier()

    def run() -> None:
        x = jnp.float32(1.0)
        for _ in range(N_CALLS):
            x = step(x)
        jax.block_until_ready(x)
        jax.effects_barrier()

    return run


def _profiled(run: Any) -> _Records:
    recorder = _Records()
    _engine.attach(recorder)
    try:
        run()
    finally:
        _engine.detach(recorder)
    return recorder


@pytest.fixture(params=["profiler alone", "guard too"])
def guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Whether the runtime guard watches host callbacks while the profile runs
    (under the pytest plugin's `--typecheck-guard=strict` it does; under
    `typecheck-guard profile` alone it does not)."""
    sinks = [lambda tally: False] if request.param == "guard too" else []
    monkeypatch.setattr(_watch, "_sinks", sinks)
    return request.param


@pytest.mark.allow_runtime_typechecks  # the checks run at dispatch, in a callback
def test_a_callbacks_checks_are_the_same_whoever_hooked_the_function_first(
    typecheck, guard
):
    records = {}
    for guard_first in (False, True):
        run = _program(typecheck, guard_first)
        records[guard_first] = _profiled(run).records
    assert collections.Counter(map(_key, records[True])) == collections.Counter(
        map(_key, records[False])
    )
    names = collections.Counter((_name(r), r.when, r.failed) for r in records[True])
    assert names == {
        ("scale", "callback", False): 2 * N_CALLS,  # one in `outer`'s body
        ("scale", "callback", True): N_CALLS,  # a wrong shape (no binding: no check)
        ("outer", "callback", False): N_CALLS,
        ("countdown", "callback", False): 4 * N_CALLS,
        ("raises", "callback", False): N_CALLS,  # its body raised, not its check
        ("unannotated_return", "callback", False): N_CALLS,
        ("Reading", "callback", False): N_CALLS,
        ("Reading", "callback", True): N_CALLS,
        ("outer", "trace", False): N_CALLS,
        ("scale", "trace", False): N_CALLS,
    }
    assert {_key(r)[5] for r in records[True] if _name(r) == "Reading"} == {
        "_program.<locals>.Reading"
    }


@pytest.mark.allow_runtime_typechecks
@pytest.mark.parametrize("guard_first", [False, True], ids=["profiler", "guard"])
def test_a_body_is_not_its_checks_time_in_a_callback(
    typecheck, guard, guard_first, monkeypatch
):
    # A clock that only moves while a checked function's body runs: every check's
    # time must then be 0, in the profile and in the guard's tally, whoever's hooks
    # are in the closures.
    now = [0.0]

    @jaxtyped(typechecker=typecheck)
    def slow(x: Float[Array, ""]) -> Float[Array, ""]:
        now[0] += 1000.0
        return x

    @jaxtyped(typechecker=typecheck)
    def failing_body(x: Float[Array, ""]) -> Float[Array, ""]:
        now[0] += 1000.0
        raise ValueError("the body")

    @jaxtyped(typechecker=typecheck)
    def calls_slow(x: Float[Array, ""]) -> Float[Array, ""]:
        now[0] += 1000.0
        return slow(x)

    def host(x: Any) -> None:
        x = jnp.asarray(x)
        slow(x)
        calls_slow(x)
        with pytest.raises(ValueError):
            failing_body(x)

    step = jax.jit(lambda x: jax.debug.callback(host, x) or x)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_watch, "_sinks", [lambda tally: False] if guard_first else [])
        with typecheck_guard.runtime_checks("log" if guard_first else "allow"):
            jax.block_until_ready(step(jnp.float32(0.0)))
            jax.effects_barrier()
    tallies: list[Any] = []
    if guard == "guard too":
        _watch._sinks[:] = [lambda tally: tallies.append(tally) or False]

    def run() -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_detect, "_clock", lambda: now[0])
            jax.block_until_ready(step(jnp.float32(1.0)))
            jax.effects_barrier()

    records = _profiled(run).records
    names = collections.Counter(map(_name, records))
    assert names == {"slow": 2, "calls_slow": 1, "failing_body": 1}
    assert [r.seconds for r in records] == [0.0] * 4
    assert not any(r.failed for r in records)
    if guard == "guard too":
        seen = collections.Counter()
        for tally in tallies:
            for site, (count, seconds, *_) in tally.items():
                seen[site.checked.rsplit(".", 1)[-1]] += count
                assert seconds == 0.0, site
        assert seen == {"slow": 2, "calls_slow": 1, "failing_body": 1}


def _only_unbound_calls(typecheck: Any) -> Any:
    @jaxtyped(typechecker=typecheck)
    def h(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x + 1

    return h


@pytest.mark.parametrize("every_checker", [False, True])
def test_a_call_whose_arguments_dont_bind_is_no_check_even_first(
    typecheck, every_checker
):
    # jaxtyping raises Python's `TypeError` before any typecheck: not counted, on
    # every backend, also before the function's first check in the profile (where
    # on 3.11 no hook of the profiler's is in its closure yet).
    h = _only_unbound_calls(typecheck)
    x = jnp.ones(3)
    with typecheck_guard.profile(every_checker=every_checker) as prof:
        for _ in range(3):
            with pytest.raises(TypeError):
                h(x, x)  # pyright: ignore[reportCallIssue]
        h(x)
        with pytest.raises(TypeError):
            h(x, x)  # pyright: ignore[reportCallIssue]
    assert [(s.when, s.count, s.failed) for s in prof.sites] == [("eager", 1, 0)]


@pytest.mark.allow_runtime_typechecks
def test_the_guard_and_the_profile_count_a_callbacks_checks_alike(typecheck):
    # `dispatch` and `callback` rows count what the guard counts: a call whose
    # arguments don't bind is in neither.
    h = _only_unbound_calls(typecheck)
    tallies: list[Any] = []

    def host(x: Any) -> Any:
        x = jnp.asarray(x)
        h(x)
        with pytest.raises(TypeError):
            h(x, x)  # pyright: ignore[reportCallIssue]
        return x

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_watch, "_sinks", [lambda tally: tallies.append(tally) or False])
        with typecheck_guard.profile() as prof:
            f = jax.jit(
                lambda x: jax.pure_callback(
                    host, jax.ShapeDtypeStruct(x.shape, x.dtype), x
                )
            )
            for _ in range(N_CALLS):
                jax.block_until_ready(f(jnp.ones(3)))
    guard = sum(count for tally in tallies for (count, *_) in tally.values())
    (site,) = [s for s in prof.sites if s.when == "callback"]
    assert guard == site.count == N_CALLS
    assert site.failed == 0


@pytest.mark.allow_runtime_typechecks
@pytest.mark.parametrize("guard", ["profiler alone", "guard too"])
def test_a_trace_inside_a_callback_belongs_to_the_function_traced_there(
    typecheck, guard
):
    # The jitted call that ran the callback is not the one its checks belong to: a
    # function jitted and traced inside the callback is, whichever of them our
    # wrappers made (with the guard on before they were made, all of them).
    @jaxtyped(typechecker=typecheck)
    def traced_fn(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x * 5

    def program() -> Any:
        inner = jax.jit(traced_fn)

        def host(x: Any) -> Any:
            inner(jnp.asarray(x))  # traced at the first callback
            jax.eval_shape(lambda y: traced_fn(y), jnp.asarray(x))  # traced each time
            return x

        f = jax.jit(
            lambda x: jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        )
        for i in range(N_CALLS):
            jax.block_until_ready(f(jnp.ones(3) * i))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            _watch, "_sinks", [lambda tally: False] if guard == "guard too" else []
        )
        with typecheck_guard.profile() as prof:
            program()
    rows = sorted((s.when, s.jitted or "", s.count) for s in prof.sites)
    assert rows == [
        ("trace", "", N_CALLS),
        (
            "trace",
            "jax.jit(test_profile_in_callbacks."
            "test_a_trace_inside_a_callback_belongs_to_the_function_traced_there."
            "<locals>.traced_fn)",
            1,
        ),
    ]


def _step_in_a_callback(typecheck: Any) -> Any:
    """A checked flax.struct value, a jitted step returning it, and a jitted
    function whose host callback calls that step (`jax.debug.callback`)."""

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class State:
        w: Float[Array, " n"]

    state = State(jnp.ones(3))
    step = jax.jit(lambda s: s.replace(w=s.w + 1))

    def host(x: Any) -> None:
        step(state)

    outer = jax.jit(lambda x: jax.debug.callback(host, x) or x)
    return state, step, outer


def _run(fn: Any, *args: Any) -> None:
    jax.block_until_ready(fn(*args))
    jax.effects_barrier()


@pytest.mark.allow_runtime_typechecks
@pytest.mark.parametrize("callbacks", [False, True])
def test_a_jitted_call_inside_a_callback_is_the_callbacks(typecheck, callbacks):
    # Its checks are the callback's: never raised from inside the callback (JAX
    # would fail the whole computation), raised from the call that ran it when
    # asked (`callbacks=True`), and named after the callback.
    raised = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_watch, "_sinks", [])
        with typecheck_guard.runtime_checks("log"):
            _, _, outer = _step_in_a_callback(typecheck)
            _run(outer, jnp.ones(3))  # compiled
            for _ in range(N_CALLS):
                try:
                    with typecheck_guard.runtime_checks(
                        "disallow", callbacks=callbacks
                    ):
                        _run(outer, jnp.ones(3))
                except typecheck_guard.RuntimeTypecheckError as error:
                    raised.append(sorted(s.jitted for s in error.sites))
    if callbacks:
        assert len(raised) == N_CALLS
        for sites in raised:
            assert len(sites) == 1 and sites[0].startswith("jax.debug.callback(")
    else:
        assert raised == []


@pytest.mark.allow_runtime_typechecks
@pytest.mark.parametrize("guard", ["profiler alone", "guard too"])
def test_a_function_jitted_in_a_callback_compiles_in_its_own_rows(typecheck, guard):
    # Its first run's rebuilds (with JAX 0.10 and 0.12 on Python 3.11+, a failing
    # one on placeholder leaves among them) are its compile, once; only its dispatch rebuilds run on every run of the callback,
    # as the same step's called at top level.
    tallies: list[Any] = []
    sinks = (
        [lambda tally: tallies.append(tally) or False] if guard == "guard too" else []
    )

    def rows(prof: Any) -> dict[str, tuple[int, int]]:
        return {
            s.when: (s.count, s.failed) for s in prof.sites if s.kind == "constructor"
        }

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_watch, "_sinks", sinks)
        with typecheck_guard.profile() as inside:
            _, _, outer = _step_in_a_callback(typecheck)
            for _ in range(N_CALLS):
                _run(outer, jnp.ones(3))
        patch.setattr(_watch, "_sinks", [])
        with typecheck_guard.profile() as at_top:
            state, step, _ = _step_in_a_callback(typecheck)
            for _ in range(N_CALLS):
                _run(step, state)
    top = rows(at_top)
    top.pop("construction", None)
    in_callback = rows(inside)
    in_callback.pop("construction", None)
    assert in_callback.pop("callback") == top.pop("dispatch") == (N_CALLS, 0)
    assert in_callback == top  # compile and trace alike (failed ones included)
    assert top["compile"][0] >= 1
    if guard == "guard too":
        counted = sum(entry[0] for tally in tallies for entry in tally.values())
        assert counted == N_CALLS


@pytest.mark.parametrize("inner", ["typeguard", "beartype"])
def test_a_function_checked_twice_is_one_check_a_call(inner):
    # `@jaxtyped(typechecker=typechecked)` over `@typechecked`: the inner wrapper is
    # the checked function's body, and its code is every typechecked function's
    # (jaxtyping's own argument stubs included): a passing call is one check, a
    # failing one one failed check, a call that doesn't bind none.
    if inner == "typeguard":
        from typeguard import typechecked as checker
    else:
        from beartype import beartype as checker

    @jaxtyped(typechecker=checker)
    @checker
    def twice(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x

    x = jnp.ones(3)
    with typecheck_guard.profile() as prof:
        twice(x)
        with pytest.raises(TypeError):
            twice(x, x)  # pyright: ignore[reportCallIssue]
        with pytest.raises(TypeError, match="Type-check error"):
            twice(x.astype(jnp.int32))
        twice(x)
    assert [
        (s.name.rsplit(".", 1)[-1], s.when, s.count, s.failed) for s in prof.sites
    ] == [("twice", "eager", 3, 1)]


@pytest.mark.allow_runtime_typechecks
def test_a_check_belongs_to_the_innermost_callback(typecheck, guard):
    # A host callback that runs a jitted function with a host callback of its own:
    # each check is its own callback's, named after it, and a tree rebuilt in a
    # callback is a rebuild there (the stack below the innermost callback is not
    # read).
    @jaxtyped(typechecker=typecheck)
    def inner_check(x: Float[Array, ""]) -> Float[Array, ""]:
        return x

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Reading:
        x: Float[Array, ""]

    def inner_host(x: Any) -> Any:
        inner_check(jnp.asarray(x))
        leaves, treedef = jax.tree_util.tree_flatten(Reading(jnp.asarray(x)))
        jax.tree_util.tree_unflatten(treedef, leaves)
        return x

    inner = jax.jit(
        lambda x: jax.pure_callback(
            inner_host, jax.ShapeDtypeStruct(x.shape, x.dtype), x
        )
    )

    def outer_host(x: Any) -> None:
        inner_check(jnp.asarray(x))
        jax.block_until_ready(inner(jnp.asarray(x)))

    outer = jax.jit(lambda x: jax.debug.callback(outer_host, x) or x)
    _run(outer, jnp.float32(0.0))  # compiled
    recorder = _profiled(lambda: [_run(outer, jnp.float32(i)) for i in range(N_CALLS)])
    prefix = "test_profile_in_callbacks.test_a_check_belongs_to_the_innermost_callback"
    rows = collections.Counter(
        (_name(r), r.when, r.jitted, r.rebuild) for r in recorder.records
    )
    assert rows == {
        (
            "inner_check",
            "callback",
            f"jax.debug.callback({prefix}.<locals>.outer_host)",
            False,
        ): N_CALLS,
        (
            "inner_check",
            "callback",
            f"jax.pure_callback({prefix}.<locals>.inner_host)",
            False,
        ): N_CALLS,
        (
            "Reading",
            "callback",
            f"jax.pure_callback({prefix}.<locals>.inner_host)",
            False,
        ): N_CALLS,
        (
            "Reading",
            "callback",
            f"jax.pure_callback({prefix}.<locals>.inner_host)",
            True,
        ): N_CALLS,
    }


@pytest.mark.allow_runtime_typechecks
def test_a_callback_is_named_as_it_is_now(typecheck):
    # A callback's name is read at each check: one renamed between runs (its
    # `__qualname__` is writable) names each run's row as it was then.
    @jaxtyped(typechecker=typecheck)
    def scale(x: Float[Array, ""]) -> Float[Array, ""]:
        return x * 2

    def host(x: Any) -> Any:
        scale(jnp.asarray(x))
        return x

    step = jax.jit(
        lambda x: jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    )
    _run(step, jnp.float32(0.0))  # compiled
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_watch, "_sinks", [])

        def run() -> None:
            for i in range(N_CALLS):
                host.__qualname__ = f"host_v{i}"
                _run(step, jnp.float32(i))

        recorder = _profiled(run)
    assert collections.Counter(r.jitted for r in recorder.records) == {
        f"jax.pure_callback({__name__}.host_v{i})": 1 for i in range(N_CALLS)
    }
