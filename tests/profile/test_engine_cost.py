"""What the profiler's engine asks of the interpreter, and what it remembers to ask
less: the same answers as the long way, at a smaller cost.

- `_situation.walk` from an open check's frame is the walk of the whole stack;
- on Python 3.12+, `sys.monitoring`'s disabled events are switched back on (a
  `restart_events()`, which re-instruments all code) only for a code object that
  was disabled, by identity, never for another that took its id;
- a checked function first run inside another check (part of it) is not disabled
  as plain code, so its first check of its own costs no restart;
- the runtime guard's events are off until a window watches a call.
"""

import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from helpers import run_script
from typecheck_guard._guard import _situation

monitoring_only = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="sys.monitoring is Python 3.12+"
)


def _frames_to(frame: Any, bottom: Any) -> list[Any]:
    """`frame` and the frames below it, down to `bottom` (included)."""
    frames = []
    while frame is not None:
        frames.append(frame)
        if frame is bottom:
            break
        frame = frame.f_back
    return frames


def _assert_walks_agree(frame: Any, bottom: Any) -> int:
    """For each frame below `frame` down to `bottom`, resuming from its walk
    gives the walk of the whole stack; returns how many were compared."""
    whole = _situation.walk(frame)
    frames = _frames_to(frame, bottom)
    for below in frames[1:]:
        assert _situation.walk(frame, (below, _situation.walk(below))) == whole
    # A frame that is not on the way down (a suspended generator's): its walk is
    # not used, the whole stack is walked.
    suspended = _suspended()
    wrong = _situation.Walk(None, None, True, True)
    assert _situation.walk(frame, (suspended.gi_frame, wrong)) == whole
    return len(frames) - 1


def _suspended() -> Any:
    def generator() -> Any:
        yield

    suspended = generator()
    next(suspended)
    return suspended


def test_a_walk_resumed_from_an_open_checks_frame_is_the_whole_walk():
    seen: list[tuple[Any, int]] = []

    def deep(n: int, bottom: Any) -> None:
        if n:
            return deep(n - 1, bottom)
        frame = sys._getframe()
        seen.append((_situation.walk(frame), _assert_walks_agree(frame, bottom)))

    def host(x: Any) -> Any:
        deep(3, sys._getframe())
        return x

    def traced(x: Any) -> Any:
        deep(3, sys._getframe().f_back.f_back)  # JAX's tracing machinery in between
        return jax.pure_callback(host, jax.ShapeDtypeStruct((), jnp.float32), x)

    with typecheck_guard.profile():  # jitted callables made now are our wrappers
        step = jax.jit(traced)

        def caller() -> Any:
            deep(2, sys._getframe())
            return step(jnp.float32(1.0))

        jax.block_until_ready(caller())
    kinds = {
        (walk.jitted is not None, walk.in_callback, walk.compiling) for walk, _ in seen
    }
    # Eager, while JAX traced the jitted call, and in its host callback: each
    # compared against every frame between the walk's start and its bottom.
    assert (False, False, False) in kinds
    assert any(jitted for jitted, _, _ in kinds)
    assert any(in_callback for _, in_callback, _ in kinds)
    assert all(compared >= 3 for _, compared in seen)


def _counting_restarts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    restart = sys.monitoring.restart_events  # pyright: ignore[reportAttributeAccessIssue]

    def counting() -> None:
        calls.append(1)
        restart()

    monkeypatch.setattr(sys.monitoring, "restart_events", counting)
    return calls


@monitoring_only
def test_a_restart_is_for_the_code_object_that_was_disabled(
    monkeypatch: pytest.MonkeyPatch,
):
    from typecheck_guard._guard._monitoring import Monitor

    restarts = _counting_restarts(monkeypatch)
    monitor = Monitor("test")

    def plain() -> None:
        pass

    def other() -> None:
        pass

    code = plain.__code__
    assert monitor.disable(code) is sys.monitoring.DISABLE  # pyright: ignore[reportAttributeAccessIssue]
    monitor.restart_for(other.__code__)
    assert restarts == []
    # Another code object under a disabled one's id (ids are reused once a code
    # object is gone): not the one that was disabled.
    gone = types.FunctionType(code.replace(), {}).__code__
    monitor.disable(gone)
    ref = monitor._disabled.pop(id(gone))
    del gone
    monitor._disabled[id(other.__code__)] = ref
    monitor.restart_for(other.__code__)
    assert restarts == []
    monitor.restart_for(code)
    assert restarts == [1]
    monitor.restart_for(code)  # on again: nothing to restart
    assert restarts == [1]


class _Meta(type):
    def __instancecheck__(cls, instance: Any) -> bool:
        return bool(_inner(1))  # a checked function run inside a check, part of it


class _Thing(metaclass=_Meta):
    pass


@jaxtyped(typechecker=beartype)
def _inner(x: int) -> int:
    if x == 2:
        time.sleep(0.05)  # its own body: not its check's time
    return x


@jaxtyped(typechecker=beartype)
def _outer(thing: _Thing) -> None:
    pass


@monitoring_only
def test_a_function_first_run_inside_a_check_costs_no_restart(
    monkeypatch: pytest.MonkeyPatch,
):
    restarts = _counting_restarts(monkeypatch)
    with typecheck_guard.profile() as prof:
        restarts.clear()  # (one when the profile starts, if its id was used before)
        _outer(object())
        assert _inner(2) == 2
    rows = {(s.checked.rsplit(".", 1)[-1], s.count): s.seconds for s in prof.sites}
    assert set(rows) == {("_outer", 1), ("_inner", 1)}
    assert rows[("_inner", 1)] < 0.025
    assert restarts == []


GUARD_EVENTS = """
import sys
import jax, jax.numpy as jnp
import typecheck_guard
from typecheck_guard._guard import _detect

def events():
    tool = _detect._monitor.tool
    return None if tool is None else sys.monitoring.get_events(tool)

with typecheck_guard.profile():
    step = jax.jit(lambda x: x + 1)
    step(jnp.ones(2))
    print("profile", events() == 0)
    with typecheck_guard.runtime_checks("log"):
        step(jnp.ones(2))
    print("window", events() != 0)
"""


@monitoring_only
def test_the_guards_events_are_off_until_a_window_watches_a_call(tmp_path: Path):
    proc = run_script(tmp_path, textwrap.dedent(GUARD_EVENTS))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["profile", "True", "window", "True"]


@monitoring_only
def test_code_that_only_runs_inside_checks_is_switched_off_and_no_check_is_lost():
    import typeguard

    from typecheck_guard._profile import _engine

    @jaxtyped(typechecker=beartype)
    def by_beartype(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x

    @jaxtyped(typechecker=typeguard.typechecked)
    def by_typeguard(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x

    @typeguard.typechecked  # typeguard's wrapper code: shared with the stubs above
    def typeguard_alone(x: int) -> int:
        return x

    @beartype
    def beartype_alone(x: int) -> int:
        return by_beartype(jnp.ones(2)).shape[0] + x  # a check in its body

    x = jnp.ones(3)
    with typecheck_guard.profile() as prof:
        for _ in range(3):
            by_beartype(x)
            by_typeguard(x)
            typeguard_alone(1)
            beartype_alone(1)
        before = _engine._spent[1]
        for _ in range(50):
            by_beartype(x)
        events = _engine._spent[1] - before
    counts = {s.checked.rsplit(".", 1)[-1]: s.count for s in prof.sites}
    assert counts == {
        "by_beartype": 3 + 3 + 50,
        "by_typeguard": 3,
        "typeguard_alone": 3,
        "beartype_alone": 3,
    }
    # Its wrapper's start and return, its body's start and return: nothing else
    # calls the profiler (jaxtyping's `wrapped_fn_impl` and the beartype wrappers
    # of its argument and return stubs are switched off).
    assert events == 4 * 50


@jaxtyped(typechecker=beartype)
def _sleeps(x: int) -> int:
    time.sleep(0.05)  # its body: not its check's time
    return x


@monitoring_only
def test_a_body_run_plain_in_an_earlier_profile_is_seen_in_the_next():
    with typecheck_guard.profile():
        _sleeps.__wrapped__(1)  # the body alone, unchecked: plain code then
    with typecheck_guard.profile() as prof:
        _sleeps(1)
    (site,) = prof.sites
    assert site.count == 1
    assert site.seconds < 0.025
