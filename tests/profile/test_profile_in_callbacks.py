"""The profiler inside host callbacks: jaxtyping's checks are written down while the
callback runs and followed once it returned (`_profile/_engine._in_callback`,
`_guard/_entries.py`), with what following them live gives.

A program may time its callbacks (tqdm prints one more line for each 0.1 s a bar
lives), so the callback's own time carries only the writing down: no stack walk,
no window, no record. These tests compare the records of the same program followed
live and written down, check by check, and count what runs inside the callback.
"""

import collections
import sys
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from typecheck_guard._guard import _detect, _entries, _situation, _watch
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


def _program(typecheck: Any) -> Any:
    """A jitted step whose host callback runs checks of every shape jaxtyping's
    wrapper takes: passing, failing, arguments that don't bind, a check in another's
    body, recursion, a body that raises, no return value to check, a checked
    constructor, and checks while JAX traces inside the callback."""

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
    jax.block_until_ready(step(jnp.float32(0.0)))
    jax.effects_barrier()

    def run() -> None:
        x = jnp.float32(1.0)
        for _ in range(N_CALLS):
            x = step(x)
        jax.block_until_ready(x)
        jax.effects_barrier()

    return run


def _profiled(run: Any, live: bool) -> _Records:
    """The records of `run()` in a profile that writes a callback's checks down, or
    (`live`) follows them live."""
    recorder = _Records()
    _engine.attach(recorder)
    try:
        with pytest.MonkeyPatch.context() as patch:
            if live:
                patch.setattr(_watch, "profiled", None)
            run()
    finally:
        _engine.detach(recorder)
    return recorder


@pytest.fixture(params=["profiler alone", "guard too"])
def guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Whether the runtime guard watches host callbacks too (under the pytest
    plugin's `--typecheck-guard=strict` it does; under `typecheck-guard profile`
    alone it does not)."""
    if request.param == "guard too":
        monkeypatch.setattr(_watch, "_sinks", [lambda tally: False])
    else:
        monkeypatch.setattr(_watch, "_sinks", [])
        assert _watch._level.get() == "allow"
    return request.param


def _name(record: _data.Record) -> str:
    parts = record.checked.split(".")
    return parts[-2] if parts[-1] == "__init__" else parts[-1]


@pytest.mark.allow_runtime_typechecks  # the checks run at dispatch, in a callback
def test_checks_written_down_in_a_callback_are_the_checks_followed_live(
    typecheck, guard, monkeypatch
):
    run = _program(typecheck)
    replayed = []
    original = _entries._replay

    def replay(window: Any, events: Any) -> None:
        if isinstance(window, _engine._Replay):
            replayed.append(len(events))
        original(window, events)

    monkeypatch.setattr(_entries, "_replay", replay)
    written = _profiled(run, live=False)
    # The profiler wrote them down itself only where the guard does not watch the
    # callback (there, both follow them as before).
    assert bool(replayed) == (guard == "profiler alone")
    assert all(replayed)
    live = _profiled(run, live=True)
    assert collections.Counter(map(_key, written.records)) == collections.Counter(
        map(_key, live.records)
    )
    names = collections.Counter((_name(r), r.when, r.failed) for r in written.records)
    assert names == {
        ("scale", "callback", False): 2 * N_CALLS,  # one in `outer`'s body
        ("scale", "callback", True): 2 * N_CALLS,  # a wrong shape; no binding
        ("outer", "callback", False): N_CALLS,
        ("countdown", "callback", False): 4 * N_CALLS,
        ("raises", "callback", False): N_CALLS,  # its body raised, not its check
        ("unannotated_return", "callback", False): N_CALLS,
        ("Reading", "callback", False): N_CALLS,
        ("Reading", "callback", True): N_CALLS,
        ("outer", "trace", False): N_CALLS,
        ("scale", "trace", False): N_CALLS,
    }
    assert {_key(r)[5] for r in written.records if _name(r) == "Reading"} == {
        "_program.<locals>.Reading"
    }


@pytest.mark.allow_runtime_typechecks
def test_a_body_is_not_its_checks_time_in_a_callback(typecheck, guard, monkeypatch):
    # A clock that only moves while a checked function's body runs: every check's
    # time must then be 0, written down or followed live.
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
    jax.block_until_ready(step(jnp.float32(0.0)))
    jax.effects_barrier()

    def run() -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(_detect, "_clock", lambda: now[0])
            jax.block_until_ready(step(jnp.float32(1.0)))
            jax.effects_barrier()

    for live in (False, True):
        records = _profiled(run, live).records
        names = collections.Counter(map(_name, records))
        assert names == {"slow": 2, "calls_slow": 1, "failing_body": 1}, live
        assert [r.seconds for r in records] == [0.0] * 4, live
        assert not any(r.failed for r in records), live


@pytest.mark.allow_runtime_typechecks
def test_nothing_is_classified_or_recorded_while_the_callback_runs(
    typecheck, monkeypatch
):
    monkeypatch.setattr(_watch, "_sinks", [])  # the profiler alone
    # What a program that times its callback sees: the callback's own Python
    # carries no stack walk, no window, no record (tqdm's rule makes a slower
    # refresh print more lines: Diffrax's progress-meter test counts them).
    inside = [False]
    during: list[str] = []

    @jaxtyped(typechecker=typecheck)
    def refresh(x: Float[Array, ""]) -> None:
        pass

    def host(x: Any) -> None:
        inside[0] = True
        try:
            for _ in range(5):
                refresh(jnp.asarray(x))
        finally:
            inside[0] = False

    def counted(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if inside[0]:
                during.append(name)
            return fn(*args, **kwargs)

        return wrapper

    step = jax.jit(lambda x: jax.debug.callback(host, x) or x)
    jax.block_until_ready(step(jnp.float32(0.0)))
    jax.effects_barrier()
    recorder = _Records()
    _engine.attach(recorder)
    try:
        for module, name in (
            (_situation, "walk"),
            (_situation, "situation"),
            (_detect, "describe"),
            (_engine, "Record"),
        ):
            monkeypatch.setattr(module, name, counted(name, getattr(module, name)))
        for _ in range(N_CALLS):
            jax.block_until_ready(step(jnp.float32(1.0)))
        jax.effects_barrier()
    finally:
        monkeypatch.undo()
        _engine.detach(recorder)
    assert during == []
    assert [(_name(r), r.when) for r in recorder.records] == [
        ("refresh", "callback")
    ] * (5 * N_CALLS)


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.11's profile function")
@pytest.mark.allow_runtime_typechecks
def test_every_checker_follows_callbacks_live(typecheck, monkeypatch):
    # `every_checker=True` (3.11) watches with a profile function everywhere: a
    # callback's checks are followed live, as before.
    monkeypatch.setattr(_watch, "_sinks", [])

    @jaxtyped(typechecker=typecheck)
    def refresh(x: Float[Array, ""]) -> None:
        pass

    step = jax.jit(lambda x: jax.debug.callback(refresh, x) or x)
    jax.block_until_ready(step(jnp.float32(0.0)))
    jax.effects_barrier()
    with typecheck_guard.profile(every_checker=True) as prof:
        assert _watch.profiled is None
        jax.block_until_ready(step(jnp.float32(1.0)))
        jax.effects_barrier()
    assert [(s.when, s.count) for s in prof.sites] == [("callback", 1)]
