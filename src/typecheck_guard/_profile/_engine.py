"""The profiler's engine: it sees every typecheck a program runs, where it was
reached from, and what it cost, and hands each to the recorders attached to it.

We recognise checker code and follow checks exactly as the runtime guard does
(`_guard/_detect.py`, `_guard/_track.py`), and file each in its window with the same
classification (`_guard/_situation.py`), but we watch the whole program, not one
jitted call:

- Python 3.11 (the default): no profile function. Checks are seen where their
  checker enters them: jaxtyping's shape memo push and pop, its bound signature and
  the checked body (cells of jaxtyping's wrapper), and `isinstance(x, PyTree[...])`.
  A check by beartype or typeguard alone of other annotations is not seen, and the
  report says so.
- Python 3.11 with `every_checker=True`: also a profile function per thread
  (`sys.setprofile` for the thread that starts us, `threading.setprofile` for
  threads started later).
- Python 3.12+: `sys.monitoring`, under a tool id of our own (the profiler's, else
  another free one), so the runtime guard's tool and ours run side by side. A
  `PY_START` callback answers `DISABLE` for any code that is no checker, and for
  checker code that only ever runs inside a jaxtyping check (`_part_of_every_check`),
  so plain code costs nothing after its first call; `PY_RETURN` is on for checker
  code and the bodies of checked functions only. A check inside another's body
  reads the stack only down to that check (`_situation.walk`).

A check's time is the checker's own: the checked function's body is not in it, and
a check that starts inside that body is its own check, with its own time and its
own window (`_track`). Only when a check starts do we look around (`_situation`).
Jitted calls are seen for jitted callables made while `_jitwrap`'s factory patches
are on, which we switch on at start: `typecheck-guard profile` does so before the
program runs, so it sees every call. `with profile():` may not: a jitted function
made before the block is called from C++, and the C++ rebuild of its output looks
like the user's code building the object. There we read what the line JAX was
called from calls (`_guard/_callee.py`): a jitted function makes the check a
`dispatch`; a line we can't read, where the class is one JAX's C++ rebuilds by
calling it, makes it `unclear` rather than a construction.

On Python 3.11 a profile function runs for every call and return inside a check,
and a 200-leaf `PyTree[...]` check makes ~44,000 calls (even a profile function that
does nothing makes it 2.6x slower; jaxtyping's argument binding alone, 10 us, takes
28 us under one). So for jaxtyping's checks, most checks, we switch the profile
function off from the moment the check starts to the moment it ends, and back on
for the checked function's body only (the *fast path*, `_fast_path`); and the
leaf-by-leaf part of any `PyTree` check runs without it (`_quiet_check`). This keeps
the overhead near 1.0x and the reported times honest
(`benchmarks/profile_overhead.py`, `benchmarks/profile_truth.py`).

One engine, any number of recorders (the command, a `with profile()` block, the
pytest option), each with its own totals.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import operator
import sys
import threading
import time
import weakref
from types import CodeType, FrameType
from typing import Any, Final

from .._compat._checkers import BEARTYPE_PREFIX
from .._compat._importhook import after_import
from .._compat._jaxtyping import signature_as
from .._guard import _callee, _detect, _entries, _situation
from .._guard._monitoring import Monitor
from .._guard._track import Open, Tracker, import_hook_of, open_described, raised
from ._data import Record, Totals

__all__ = ["attach", "detach"]


# --- what we recognise -------------------------------------------------------------

# What each code object is (`_detect._kind_of_code`), keyed by the object's id: a
# code object hashes its whole contents on every lookup (up to half a microsecond
# for jaxtyping's wrapper), and we look one up for every call on 3.11, for every
# checker event on 3.12. `_codes` holds each one, so that its id stays its own.
_kinds: dict[int, int] = {}
_codes: dict[int, CodeType] = {}


def _prepare() -> None:
    # (The guard, switched on first, reads each checker's code as it is imported,
    # and where the checkers are: `_detect.probed_by_checker`.)
    _clear_kinds()


def _kind_of_code(code: CodeType) -> int:
    """`_detect._kind_of_code`, but an array type's `isinstance` (`Float[Array,
    "..."]`, not a `PyTree[...]`) is no check of its own here: it is part of the
    check around it (a `PyTree[...]` check runs one per leaf, and on Python 3.12+
    each would call us: 10% of the check's time). The runtime guard, which only
    watches jitted calls, still counts a bare one."""
    kind = _detect._kind_of_code(code)
    if kind == _detect._ISINSTANCE and not _detect.is_pytree_check(code):
        return _detect._PLAIN
    return kind


def _classify(code: CodeType) -> int:
    kind = _kind_of_code(code)
    _remember(code, kind)
    return kind


def _remember(code: CodeType, kind: int) -> None:
    if len(_kinds) >= _detect._MAX_KINDS:  # a program that makes code without end
        _kinds.clear()
        _codes.clear()
    _kinds[id(code)] = kind
    _codes[id(code)] = code


def _clear_kinds() -> None:
    _kinds.clear()
    _codes.clear()


# --- what watching costs -------------------------------------------------------------
#
# The profiler's own time, so that the report can give each check's share of the run
# the program would have been without it (`Totals.profiler_seconds`). Two parts:
#
# - measured: the clock around the work we do when a check opens (`describe`, the
#   walk of the stack in `_situation`, a body to watch) and when it ends (its
#   record, the recorders), and when we first classify a code object: microseconds
#   each, so two reads of the clock cost little;
# - counted: every other call of ours, too cheap and too frequent to time (a
#   `sys.monitoring` callback, a profile function's event, a checker hook), times
#   what one costs, interpreter dispatch included, calibrated when the engine
#   starts (`_calibrate`): a burst of calls with and without us.
#
# On Python 3.11 a profile function also makes the interpreter run every bytecode
# instruction unspecialised (`DO_TRACING` de-optimises each one), a cost per
# instruction, not per event: we calibrate the profile function's events on a
# function with a typical amount of bytecode per call, so that cost is in the
# per-event figure, on average (`benchmarks/profile_overhead.py` compares the
# estimate with the measured difference).
#
# Counters are process-wide and unlocked: a thread switch between the read and the
# write of `+=` can lose an event, which an estimate can afford.
_spent = [0.0, 0, 0]  # measured seconds, backend events, hook calls
# Seconds per backend event and per hook call, by backend, once per process.
_rates: dict[str, tuple[float, float]] = {}
_rate = (0.0, 0.0)


def spent() -> tuple[float, int, int]:
    """The engine's counters (`_spent`), for a recorder to take differences of."""
    return (_spent[0], _spent[1], _spent[2])


def own_seconds(since: tuple[float, int, int]) -> float:
    """The profiler's own time since `spent()` returned `since`: measured, plus the
    counted calls times their calibrated cost."""
    per_event, per_hook = _rate
    return (
        _spent[0]
        - since[0]
        + (_spent[1] - since[1]) * per_event
        + (_spent[2] - since[2]) * per_hook
    )


def _median_difference(run: Any, base: Any, rounds: int = 7) -> tuple[float, int]:
    """The median over interleaved rounds of (time of `run()` - time of `base()`),
    and how many events `run()` counted (the last round's).

    Timed with `time.perf_counter`, the clock `wall_seconds` is read with, and not
    with `_detect._clock`, which the hooks read: a calibration is an estimate in wall
    seconds, cached for the process, and must not depend on the clock a check is
    timed with (a test that swaps that clock would fix its own ticks in the cache)."""
    clock = time.perf_counter
    differences = []
    counted = 0
    for _ in range(rounds):
        start = clock()
        base()
        middle = clock()
        before = _spent[1] + _spent[2]
        run()
        end = clock()
        counted = _spent[1] + _spent[2] - before
        differences.append((end - middle) - (middle - start))
    differences.sort()
    return max(differences[len(differences) // 2], 0.0), counted


def _probe(x: Any) -> Any:
    # Python code with a typical amount of bytecode per call: globals, attributes,
    # a method, arithmetic, a C call, a branch.
    total = 0
    for item in (x, x + 1, x + 2):
        if isinstance(item, int):
            total += item * 2 - 1
    return str(total).strip()


def _probe_burst(function: Any, n: int = 400) -> Any:
    def burst() -> None:
        for i in range(n):
            function(i)

    return burst


def _calibrate() -> None:
    """Set `_rate` for the backend now running: seconds per counted event, from a
    burst of calls with our callbacks on and one with them off."""
    global _rate
    backend = "monitoring" if _monitor.tool is not None else str(_mode)
    if backend in _rates:
        _rate = _rates[backend]
        return
    saved = tuple(_spent)
    per_event = per_hook = 0.0
    _state()  # as in a program that ran a check (a missing one costs an exception)
    try:
        if backend == "monitoring":
            # A body (`PY_START` and `PY_RETURN` call us, outside any check) against
            # the same code that answered `DISABLE`.
            watched = _probe_copy()
            plain = _probe_copy()
            _remember(watched.__code__, _detect._BODY)
            _monitor.instrument(watched.__code__)
            plain(0)
            extra, counted = _median_difference(
                _probe_burst(watched), _probe_burst(plain)
            )
            per_event = extra / counted if counted else 0.0
            _kinds.pop(id(watched.__code__), None)
            _codes.pop(id(watched.__code__), None)
        elif backend == "profile":
            state = _state()

            def unwatched() -> None:
                sys.setprofile(None)
                try:
                    _probe_burst(_probe)()
                finally:
                    sys.setprofile(state.event)

            extra, counted = _median_difference(_probe_burst(_probe), unwatched)
            per_event = extra / counted if counted else 0.0
        if backend in ("profile", "hooks"):
            # Our body hook outside a check: a call through it, what each hook adds.
            hooked = _Body(_probe)
            extra, counted = _median_difference(
                _probe_burst(hooked), _probe_burst(_probe)
            )
            per_hook = extra / counted if counted else 0.0
    except Exception:  # an estimate is no reason to fail
        pass
    finally:
        _spent[:] = saved
    _rate = _rates[backend] = (per_event, per_hook)


def _probe_copy() -> Any:
    """`_probe` with a code object of its own (its own `sys.monitoring` events)."""
    import types

    return types.FunctionType(_probe.__code__.replace(), _probe.__globals__, "_probe")


def _may_be_unseen_rebuild(cls: type | None) -> bool:
    """Whether JAX's C++ may have rebuilt this instance of `cls` with no Python frame
    in between (the dispatch of a jitted callable none of our wrappers saw): JAX's
    own `register_dataclass` nodes (flax.struct included) are rebuilt in C++ by
    calling the class; every other registration calls a Python unflatten function,
    which we see. A class `install()` adapted runs no check when rebuilt."""
    if cls is None or "jax" not in sys.modules:
        return False
    try:
        from .._compat._jax import registry
        from .._unflatten._records import adapted_how, is_dataclass_entry

        entry = registry().get(cls)
        return (
            entry is not None and adapted_how(cls) is None and is_dataclass_entry(entry)
        )
    except Exception:  # a label is no place to fail
        return False


# What a check reached through a jitted call none of our wrappers saw is filed as,
# were it not for `_unseen_dispatch`.
_MAYBE_UNSEEN: Final = frozenset({"construction", "tree", "eager"})


def _unseen_dispatch(
    situation: _situation.Situation,
    caller: Any,
    what: str,
    cls: type | None,
    only_jitted: bool = False,
) -> _situation.Situation:
    """`situation`, or `dispatch` when a jitted call made before the profile started
    ran the check, or `unclear` when one may have and we can't tell.

    JAX was entered from the check's caller, or from the caller of the registered
    unflatten that made the check (directly or, for a constructor, through its
    helpers): from there down to the program's own line, a frame that calls a
    jitted callable (`_situation.jitted_call_below`) makes it `dispatch`, named as
    the command line names it. Else the program's line decides: it calls the
    class itself (a construction), or a function of its own (whose frame would be
    the caller of anything it built: a tree operation, say), and the label stands;
    or it calls something we can't read, or C code that may call a jitted function
    (`list(map(step, xs))`, `functools.reduce`), and where a jitted call could have
    rebuilt the object (a class JAX's C++ rebuilds by calling it, or a rebuild by a
    registered unflatten) it is `unclear`. `only_jitted`: where every other jitted
    call is seen, a jitted call found makes it `dispatch`, and nothing else changes
    it."""
    entry = caller
    unflatten = None
    if entry is not None:
        unflatten = (
            _situation.registered_unflatten_frame(entry)
            if what == "constructor"
            else entry
            if _situation.registered_unflatten(entry.f_code)
            else None
        )
        if unflatten is not None:
            entry = unflatten.f_back
    line, called, jitted = _situation.jitted_call_below(entry)
    if jitted is not None:
        return _situation.Situation(
            "dispatch",
            _jitted_label(*jitted),
            situation.rebuild or what == "constructor",
            _callee.made_at(jitted[2]),
        )
    if only_jitted or line is None or called is cls or _callee.runs_python(called):
        return situation
    if situation.when in ("construction", "tree") and (
        unflatten is not None or _may_be_unseen_rebuild(cls)
    ):
        return situation._replace(when="unclear")
    return situation


def _named_dispatch(
    situation: _situation.Situation, caller: Any
) -> _situation.Situation:
    """A `dispatch` (a rebuild by a jitted call's own code: Equinox's, JAX's
    `pmap`) of a jitted callable made before the profile started, with the name of
    the jitted call the program's line made (`_situation.jitted_call_below`)."""
    _, _, jitted = _situation.jitted_call_below(caller)
    if jitted is None:
        return situation
    return situation._replace(
        jitted=_jitted_label(*jitted),
        made_at=situation.made_at or _callee.made_at(jitted[2]),
    )


def _jitted_label(frame: FrameType, transform: str, fun: Any) -> str:
    """`jax.jit(module.step)`; an ahead-of-time compiled call, which keeps no
    trace of its function, by its type."""
    if fun is None:
        return transform
    return _detect.describe_jitted(transform, fun, frame)


def _watch_body(code: CodeType) -> None:
    """From now on, see `code` start and return: it is a checked function's body."""
    if _kinds.get(id(code)) == _detect._BODY:
        return
    _remember(code, _detect._BODY)
    if _monitor.tool is not None:
        _monitor.instrument(code)
        # It may have answered `DISABLE` to `PY_START` before we knew it.
        _monitor.restart_for(code)


# --- the 3.11 fast path ---------------------------------------------------------------
#
# For a check by jaxtyping's new-style `wrapped_fn` we switch the thread's profile
# function off when the check starts (`_Thread.opened`) and end the check in
# jaxtyping's own `pop_shape_memo`, which `wrapped_fn` calls in its `finally`, once
# the checks and the body are done; there we switch the profile function back on
# (`_popped`). The checked function's body must run watched: it can make checks of
# its own, and its time is not the check's. jaxtyping calls it as `fn(*args,
# **kwargs)`, `fn` a variable of the closure of `wrapped_fn_impl`: the first time we
# see a function checked, we put `_Body(fn)` in that closure cell, which switches the
# profile function on for the body and off after it, and times it. (`wrapped_fn`,
# which shares the cell, calls the same `_Body(fn)` when checks are switched off: it
# then only calls `fn`.) And since the profile function is off from the start of the
# check, an argument-binding error, raised before `wrapped_fn`'s `try`, would never
# reach `pop_shape_memo`: we replace the closure's `param_signature` with an equal
# signature whose `bind` ends the check when it raises. Every cell we change is put
# back when the engine stops, and none keeps a function alive meanwhile. `sys.monitoring` (3.12+) needs none of this: it only
# calls us for checker code and bodies.
#
# We rejected cheaper-looking alternatives: a profile function that only looks for
# the body still runs for each of a check's ~100 calls (3x on a small check); reading
# the body's start from the bytecode of `wrapped_fn_impl` is version-specific
# cleverness; and wrapping the user's function in place would change what they hold.

_original_pop: Any = None
_original_push: Any = None
# Our hooks in place while patched (`_make_popped`, `_make_pushed`).
_popped: Any = None
_pushed: Any = None
_wrapper_code: CodeType | None = None  # jaxtyping's new-style `wrapped_fn`
# The `wrapped_fn_impl` closures whose cells hold our body hook and signature, by
# weak reference: a checked function the program drops is not kept alive by us.
_patched: weakref.WeakSet[Any] = weakref.WeakSet()
_cells_lock = threading.Lock()


def _make_popped(forward: Any) -> Any:
    """Our `pop_shape_memo`, calling `forward`, the function it replaces, for good:
    a program that took it while we ran (its own wrapper around it) and calls it
    after we stopped, or after another profile made its own, reaches what it would
    without us, and never a later hook of ours that calls it back."""

    def _popped() -> None:
        _spent[2] += 1
        forward()
        if _original_pop is None:  # stopped: a reference the program kept to us
            return
        end = _detect._clock()  # the check ends here; what follows is ours
        state = _local.state
        if state is None or not state._stack:
            return
        top = state._stack[-1]
        # `wrapped_fn` calls us, or the runtime guard's hook that chains to us.
        if top.fast and top.frame in (sys._getframe(1), sys._getframe(1).f_back):
            error = sys.exc_info()[1]
            failed = error is not None and error is not top.data.handled
            if top.in_body is not None:
                # A body `_stub_body` saw start raised, or returned with no return
                # value to check (jaxtyping then calls no return stub): it ran until
                # now, and its error is not the check's.
                state.resume(top, failed, end)
                failed = False
            state._error = error
            state.close(top, failed and not top.body_raised, end)
            if _mode == "profile":
                sys.setprofile(state.event)

    return _popped


def _stub_body(fn: Any, starting: bool) -> None:
    """The body of the checked function `fn` starts (`starting`) or ends, as the
    runtime guard's stubs in its closure tell (`_guard/_entries._Stub`: a function
    first checked in a host callback the guard watched, before we started, has its
    cells and not ours): what our body hook does for the others."""
    _spent[2] += 1
    now = _detect._clock()
    state = _local.state
    top = state._stack[-1] if state is not None and state._stack else None
    if top is None or not top.fast or top.data.function is not fn:
        return
    if starting:
        if top.in_body is None:
            state.pause(top, fn, now)  # type: ignore[union-attr]
    elif top.in_body is fn:
        state.resume(top, False, now)  # type: ignore[union-attr]


def _make_pushed(forward: Any) -> Any:
    """Our `push_shape_memo`, on the hooks backend, calling `forward`, the function
    it replaces, for good (as `_make_popped`): a check of jaxtyping's starts here
    (or earlier, at `_Signature.bind`, once its cells are ours)."""

    def _pushed(arguments: Any) -> Any:
        _spent[2] += 1
        frame = None
        if _mode == "hooks":
            # `wrapped_fn` calls us, or the runtime guard's hook that chains to us.
            frame = sys._getframe(1)
            if frame.f_code is not _wrapper_code:
                frame = frame.f_back
            if frame is not None and frame.f_code is _wrapper_code:
                _open_jaxtyping(frame)
        try:
            return forward(arguments)
        except BaseException:
            # (A program's own wrapper of `push_shape_memo` raised.) jaxtyping's
            # wrapper calls `pop_shape_memo` only once the push returned: the check
            # that started at the binding ends here, before it began (as where the
            # binding raises, `_Signature.bind`), or it would stay open and hold
            # every later check of the thread as part of it.
            state = _local.state
            stack = state._stack if state is not None else ()
            if frame is not None and stack and stack[-1].frame is frame:
                state.close(stack[-1], True)  # type: ignore[union-attr]
            raise

    return _pushed


def _open_jaxtyping(frame: FrameType) -> None:
    if _local.opening:
        # A check that our own bookkeeping ran (reading `__wrapped__` off a jitted
        # object of a package under jaxtyping's import hook): not the program's, and
        # watching it would open another, without end.
        return
    state = _state()
    stack = state._stack
    if stack and stack[-1].frame is frame:
        return  # opened at `bind`
    _local.opening = True
    # jaxtyping's wrapper binds and pushes only once its off-switches said it
    # checks: `describe` need not read them again.
    state.checks = True
    try:
        state.started(frame, _detect._JAXTYPING)
    except Exception:  # never let the watching break the user's program
        pass
    finally:
        _local.opening = False
        state.checks = False


class _Body:
    """What we put in jaxtyping's `fn` cell: calls the checked function with the
    arguments as received, with the profile function on and its time apart (see
    above). To everything else it is the function: its attributes, its
    `inspect.signature` (through `__wrapped__`), and what a pickler writes for it
    (cloudpickle pickles a `__main__` function's closure by value): the function,
    behind a standard library callable that returns it. What a program writes
    or deletes through the closure cell is written to or deleted from the
    function, as without us (jaxtyping reads `__no_type_check__` off the cell),
    and it compares, hashes and copies as the function (a copy is itself)."""

    __slots__ = ("__typecheck_guard_body__", "__dict__", "__weakref__")

    def __init__(self, fn: Any):
        object.__setattr__(self, "__typecheck_guard_body__", fn)
        own = self.__dict__
        # What our class would answer for itself, the function's instead.
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                own[name] = getattr(fn, name)
            except AttributeError:
                pass
        own["__wrapped__"] = fn

    def __getattr__(self, name: str) -> Any:
        if name == "__typecheck_guard_body__":  # not set yet (copy, unpickling)
            raise AttributeError(name)
        return getattr(self.__typecheck_guard_body__, name)

    def __setattr__(self, name: str, value: Any) -> None:
        fn = self.__typecheck_guard_body__
        setattr(fn, name, value)
        _follow(self, fn, name)

    def __delattr__(self, name: str) -> None:
        fn = self.__typecheck_guard_body__
        delattr(fn, name)
        _follow(self, fn, name)

    def __eq__(self, other: object) -> bool:
        return self.__typecheck_guard_body__ == other  # type: ignore[no-any-return]

    def __hash__(self) -> int:
        return hash(self.__typecheck_guard_body__)

    def __copy__(self) -> Any:
        return self

    def __deepcopy__(self, memo: Any) -> Any:
        return self

    def __reduce__(self) -> Any:
        return (operator.itemgetter(0), ((self.__typecheck_guard_body__,),))

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        now = _detect._clock()  # first: what follows is not the check's time
        _spent[2] += 1
        fn = self.__typecheck_guard_body__
        # The runtime guard's window of a host callback (`_guard/_entries.py`)
        # writes down the body's start and end, as its own stubs do in the cells
        # that are not ours.
        window = _entries._local.window
        events = window.events if window is not None else None
        state = _local.state
        top = state._stack[-1] if state is not None and state._stack else None
        if (
            top is None
            or not top.fast
            or top.in_body is not None
            or top.data.function is not fn
        ):
            if events is None:
                return fn(*args, **kwargs)
            events.append((_entries._BODY, fn, now))
            out = fn(*args, **kwargs)
            events.append((_entries._BODY_DONE, fn, _detect._clock()))
            return out
        state.pause(top, self)  # type: ignore[union-attr]
        top.paused_at = now
        if events is not None:
            events.append((_entries._BODY, fn, now))
        profiling = _mode == "profile"
        if profiling:
            sys.setprofile(state.event)  # type: ignore[union-attr]
        try:
            out = fn(*args, **kwargs)
        except BaseException:
            if profiling:
                sys.setprofile(None)
            state.resume(top, True)  # type: ignore[union-attr]
            raise
        if profiling:
            sys.setprofile(None)
        if events is not None:
            events.append((_entries._BODY_DONE, fn, _detect._clock()))
        state.resume(top, False)  # type: ignore[union-attr]
        return out


def _follow(body: _Body, fn: Any, name: str) -> None:
    """After a write to (or delete from) `fn` through `body`: our copy of what our
    class would answer for `name` (`__module__`, ...), if we keep one, follows it.
    (A function of the module, not a method: every name on `_Body` is one a
    program reading the function's attributes through the cell can't reach.)"""
    own = body.__dict__
    if name in own:
        try:
            own[name] = getattr(fn, name)
        except AttributeError:
            del own[name]


_detect.forwarders[_Body] = "__typecheck_guard_body__"


class _Signature(inspect.Signature):
    """jaxtyping's `param_signature`, whose `bind` ends the fast-path check when it
    raises (before `wrapped_fn` reaches its `try ... finally: pop_shape_memo()`).
    Equal to it, and pickled as it."""

    __slots__ = ("_typecheck_guard_original",)

    def bind(self, /, *args: Any, **kwargs: Any) -> Any:
        _spent[2] += 1
        if _mode == "hooks":
            # The check starts with the binding (jaxtyping's `wrapped_fn` binds
            # first, once its checks are on).
            frame = sys._getframe(1)
            if frame.f_code is _wrapper_code:
                _open_jaxtyping(frame)
        try:
            return inspect.Signature.bind(self, *args, **kwargs)
        except BaseException:
            end = _detect._clock()
            state = _local.state
            stack = state._stack if state is not None else ()
            if stack and stack[-1].fast and sys._getframe(1) is stack[-1].frame:
                # A call that does not match the signature: jaxtyping raised
                # Python's `TypeError` before checking anything, so it is no check
                # (`_detect.never_began`), as on the other backends; it ends here.
                state.close(stack[-1], True, end)  # type: ignore[union-attr]
                if _mode == "profile":
                    sys.setprofile(state.event)  # type: ignore[union-attr]
            raise

    def __reduce__(self) -> Any:
        return self._typecheck_guard_original.__reduce__()


def _quiet_signature(signature: inspect.Signature) -> _Signature:
    return signature_as(_Signature, signature)


def _fast_path(frame: FrameType, local: dict[str, Any]) -> bool:
    """Make the jaxtyping check whose `wrapped_fn` runs at `frame`, with these
    locals, ready for the fast path (its body hook and exception-safe binding);
    `False` if we can't."""
    fn = local.get("fn")
    if isinstance(fn, _Body):
        return True
    caller = frame.f_back
    if caller is not None and caller.f_code.co_name == "_check_dataclass_annotations":
        # jaxtyping < 0.3 checks a dataclass through a function it makes for each
        # construction: patching each would cost more than it saves. Those are
        # watched the slow way.
        return False
    impl = local.get("wrapped_fn_impl")
    if _original_pop is None or impl is None or fn is None:
        return False
    cells = _detect._cells(impl)
    fn_cell, signature_cell = cells.get("fn"), cells.get("param_signature")
    if fn_cell is None or signature_cell is None:
        return False
    with _cells_lock:
        try:
            current, signature = fn_cell.cell_contents, signature_cell.cell_contents
        except ValueError:
            return False
        if isinstance(current, _Body):
            return True
        if current is not fn or type(signature) is not inspect.Signature:
            return False
        body, quiet = _Body(fn), _quiet_signature(signature)
        fn_cell.cell_contents = body
        signature_cell.cell_contents = quiet
        _patched.add(impl)
    # We run inside the profile function of the call of `wrapped_fn` whose locals
    # these are, and on its way out CPython writes that frame's `f_locals` back
    # into its variables, cells included (`PyFrame_LocalsToFast`): the new values
    # must be there too, or the old ones come back.
    local["fn"] = body
    local["param_signature"] = quiet
    return True


def _unpatch_cells() -> None:
    with _cells_lock:
        for impl in list(_patched):
            cells = _detect._cells(impl)
            fn_cell, signature_cell = cells.get("fn"), cells.get("param_signature")
            body = fn_cell.cell_contents if fn_cell is not None else None
            if isinstance(body, _Body):
                fn_cell.cell_contents = body.__typecheck_guard_body__  # pyright: ignore[reportOptionalMemberAccess]
            quiet = signature_cell.cell_contents if signature_cell is not None else None
            if isinstance(quiet, _Signature):
                signature_cell.cell_contents = quiet._typecheck_guard_original  # pyright: ignore[reportOptionalMemberAccess]
        _patched.clear()


def _patch_pop() -> bool:
    """Route jaxtyping's `pop_shape_memo` through `_popped` (and, on the hooks
    backend, `push_shape_memo` through `_pushed`), if jaxtyping's `wrapped_fn` still
    calls them by those global names; `False` if not (we then watch jaxtyping's
    checks like any other on the profile-function backend, only slower, and not at
    all on the hooks backend)."""
    global _original_pop, _original_push, _wrapper_code, _popped, _pushed
    from jaxtyping import _decorator

    original = getattr(_decorator, "pop_shape_memo", None)
    push = getattr(_decorator, "push_shape_memo", None)
    wrapper = _detect._new_style_wrapper(_decorator.jaxtyped.__code__)
    if (
        original is None
        or wrapper is None
        or not {"pop_shape_memo", "push_shape_memo"} <= set(wrapper.co_names)
        or not {"fn", "param_signature", "wrapped_fn_impl"} <= set(wrapper.co_freevars)
        or getattr(original, "__code__", None) is None
        or original.__code__.co_argcount != 0
        or getattr(getattr(push, "__code__", None), "co_argcount", None) != 1
    ):
        return False
    _original_pop, _wrapper_code = original, wrapper
    _popped = _make_popped(original)
    setattr(_decorator, "pop_shape_memo", _popped)  # noqa: B010
    if _mode == "hooks":
        _original_push = push
        _pushed = _make_pushed(push)
        setattr(_decorator, "push_shape_memo", _pushed)  # noqa: B010
    return True


def _unpatch_pop() -> None:
    global _original_pop, _original_push, _wrapper_code, _popped, _pushed
    if _original_pop is None:
        return
    from jaxtyping import _decorator

    if getattr(_decorator, "pop_shape_memo", None) is _popped:
        setattr(_decorator, "pop_shape_memo", _original_pop)  # noqa: B010
    if _original_push is not None and _decorator.push_shape_memo is _pushed:
        setattr(_decorator, "push_shape_memo", _original_push)  # noqa: B010
    _original_pop = _original_push = _wrapper_code = _popped = _pushed = None


# The leaf-by-leaf work of a `PyTree[...]` check that no `@jaxtyped` function
# encloses (a function checked by beartype or typeguard alone, a bare `isinstance`):
# jaxtyping's `_MetaPyTree._check` runs with the profile function off. We still see
# the check start and end (its `__instancecheck__` and the checker's wrapper are
# outside `_check`); we only miss the checkers entered inside, which are part of it
# anyway.
_original_check: Any = None


def _quiet_check(cls: Any, obj: Any, pytree_memo: Any) -> Any:
    _spent[2] += 1
    profile = sys.getprofile()
    if not isinstance(getattr(profile, "__self__", None), _Thread):
        return _original_check[1](cls, obj, pytree_memo)
    sys.setprofile(None)
    try:
        return _original_check[1](cls, obj, pytree_memo)
    finally:
        sys.setprofile(profile)


def _instancecheck(cls: Any, instance: Any) -> Any:
    """`isinstance(x, PyTree[...])` on the hooks backend: a check of its own, unless
    it runs inside another check (beartype's or typeguard's of an argument, which
    it is part of)."""
    _spent[2] += 1
    original = _original_check[1]  # pyright: ignore[reportOptionalSubscript]
    if _mode != "hooks":
        return original(cls, instance)
    if _local.opening:
        # A check our own bookkeeping ran, while it opened another (`_open_jaxtyping`):
        # not the program's.
        return original(cls, instance)
    state = _state()
    stack = state._stack
    if stack and stack[-1].in_body is None:
        stack[-1].pytree = True
        return original(cls, instance)
    frame = sys._getframe()
    _local.opening = True
    try:
        opened = state.started(frame, _detect._ISINSTANCE)
    except Exception:  # never let the watching break the user's program
        opened = False
    finally:
        _local.opening = False
    if not opened:
        return original(cls, instance)
    try:
        out = original(cls, instance)
    except BaseException as error:
        state._error = error
        state.returned(frame, True)
        state._error = None
        raise
    state.returned(frame, False)
    return out


def _original() -> Any:
    return _original_check[1] if _original_check is not None else None


# What `_compat._jaxtyping.load` models is jaxtyping's own method, not ours.
_quiet_check.__typecheck_guard_unwrap__ = _original  # type: ignore[attr-defined]
_instancecheck.__typecheck_guard_unwrap__ = _original  # type: ignore[attr-defined]


def _patch_check() -> None:
    """The profile-function backend: `_quiet_check` in place of `_MetaPyTree._check`;
    the hooks backend: `_instancecheck` in place of its `__instancecheck__`."""
    global _original_check
    owner = _detect._pytree_meta
    if owner is None:
        return
    if _mode == "hooks":
        name, ours = "__instancecheck__", _instancecheck
    else:
        name, ours = "_check", _quiet_check
    original = vars(owner).get(name)
    code = getattr(original, "__code__", None)
    if code is None or code.co_varnames[:2] not in (
        ("cls", "obj"),
        ("cls", "instance"),
    ):
        return
    _original_check = (owner, original, name, ours)
    setattr(owner, name, ours)


def _unpatch_check() -> None:
    global _original_check
    if _original_check is None:
        return
    owner, original, name, ours = _original_check
    if vars(owner).get(name) is ours:
        setattr(owner, name, original)
    _original_check = None


# jaxtyping is patched when it is imported, not by us (`_guard/_jitwrap.py`): a
# program may set `JAXTYPING_DISABLE` before it imports jaxtyping.
_hooks: contextlib.ExitStack | None = None


def _patch_jaxtyping() -> None:
    global _hooks
    patches = {"jaxtyping": _patch_pop, "jaxtyping._pytree_type": _patch_check}
    later = set()
    from .._guard import _jitwrap

    for name, patch in patches.items():
        module = sys.modules.get(name)
        if module is not None and not getattr(module.__spec__, "_initializing", False):
            patch()
        else:
            later.add(name)
    if later:

        def on_import(module: Any) -> None:
            if _mode is not None:
                # The guard's hooks of the same module first (ours chain to
                # them), also when another finder loaded it without asking.
                _jitwrap._patch_pending()
                patches[module.__name__]()

        _hooks = contextlib.ExitStack()
        after_import(later, on_import, _hooks)


def _unpatch_jaxtyping() -> None:
    global _hooks
    if _hooks is not None:
        _hooks.close()
        _hooks = None
    _unpatch_pop()
    _unpatch_check()


# --- per-thread watching -----------------------------------------------------------


class _Data:
    """What the profiler keeps about an open check."""

    __slots__ = (
        "described",
        "situation",
        "cls",
        "function",
        "handled",
        "verdict",
        "walk",
    )

    def __init__(
        self,
        described: Any,
        function: Any,
        situation: Any,
        cls: Any,
        handled: Any,
        walk: _situation.Walk,
    ):
        self.described = described
        self.situation = situation
        self.cls = cls
        # The checked function, as jaxtyping's closure held it before our body hook.
        self.function = function
        # The exception being handled where the check started (`sys.exc_info()`
        # there): seeing it again at the end is not the check failing.
        self.handled = handled
        self.verdict = False
        # The stack below the check's frame (`_situation.walk`), for the checks in
        # its body.
        self.walk = walk


_PROBE = Record("<setup>", "?", "isinstance", "setup", None, None, False, "", 0.0)


def _error_ref(error: Any) -> Any:
    try:
        return weakref.ref(error) if error is not None else None
    except TypeError:
        return None


class _Thread(Tracker):
    """One thread's open checks."""

    # The error a failed check raised, when the backend tells us (`sys.monitoring`'s
    # `PY_UNWIND`, jaxtyping's `finally` on the 3.11 fast path).
    _error: Any = None
    # The check opening now is one jaxtyping's wrapper said it makes (`_pushed`,
    # `_Signature.bind`).
    checks = False

    def __init__(self) -> None:
        # This thread (made in it, `_state`): each record carries its name, which a
        # program may change while it runs.
        self.ident = threading.get_ident()
        self.thread = _registered(self.ident)

    def thread_name(self) -> str:
        thread = self.thread
        if thread is None:
            thread = self.thread = _registered(self.ident)
            if thread is None:
                # A thread `threading` does not know (one of JAX's, running a host
                # callback): `threading.current_thread()` would register it for
                # good, under a name that takes a number from the program's
                # `Thread-N`.
                return f"thread {self.ident}"
        return thread.name

    # The `sys.setprofile` backend's profile function.
    def event(
        self, frame: FrameType, event: str, arg: Any, _spent: list[Any] = _spent
    ) -> None:
        _spent[1] += 1
        if event == "call":
            if _mode != "profile":  # the engine stopped: leave this thread alone
                sys.setprofile(None)
                return
            code = frame.f_code
            kind = _kinds.get(id(code))
            if kind is None:
                start = _detect._clock()
                kind = _classify(code)
                _spent[0] += _detect._clock() - start
            if kind:
                self.started(frame, kind)
        elif frame is self._waiting and event == "return":
            self.returned(frame, raised(frame))

    # The runtime guard composes its window with us rather than stepping aside
    # (`_watch.watch`).
    event.__typecheck_guard_composes__ = True  # type: ignore[attr-defined]

    def open(self, frame: FrameType, kind: int) -> Open | None:
        start = _detect._clock()
        try:
            return self._open(frame, kind)
        finally:
            _spent[0] += _detect._clock() - start

    def _open(self, frame: FrameType, kind: int) -> Open | None:
        if kind == _detect._ISINSTANCE and _detect.in_canary(frame):
            return None  # ours, once per process: no check of the program's
        if kind == _detect._ISINSTANCE and _detect.probed_by_checker(frame):
            # A checker probing a hint while it decorates (beartype asks
            # `isinstance(None, hint)` to see whether the hint is isinstanceable):
            # counted apart, not timed (following it would make every later
            # `__instancecheck__` report its return to us).
            for recorder in _recorders:
                recorder._add(_PROBE)
            return None
        described = _detect.describe(frame, kind, self.checks)
        if described is None:
            return None
        cls = _situation.built_class(frame, described.what)
        # A check in the body of an open one: the stack below that check's frame
        # was walked when it opened.
        stack = self._stack
        top = stack[-1] if stack else None
        below = (
            (top.frame, top.data.walk)
            if top is not None and isinstance(top.data, _Data)
            else None
        )
        walked = _situation.walk(frame, below)
        situation, caller = _situation.situation(
            frame, described.what, cls, described.body, walked
        )
        if not _sees_every_jit:
            if situation.when in _MAYBE_UNSEEN:
                situation = _unseen_dispatch(situation, caller, described.what, cls)
            elif situation.when == "dispatch" and situation.jitted is None:
                situation = _named_dispatch(situation, caller)
        elif (
            situation.when in _MAYBE_UNSEEN
            and described.what == "constructor"
            and caller is not None
            and caller.f_code.co_filename.startswith(_situation._library_dirs())
            and _may_be_unseen_rebuild(cls)
        ):
            # Every jitted call is ours to see, but for an ahead-of-time compiled
            # one (no factory of ours made it), whose rebuilds' caller is JAX's
            # own code. (Only there: under jaxtyping's import hook most checks'
            # callers are a library's.)
            situation = _unseen_dispatch(
                situation, caller, described.what, cls, only_jitted=True
            )
        body = described.body
        # The checked function, as jaxtyping's closure held it before our body hook.
        function = body.__typecheck_guard_body__ if type(body) is _Body else body
        code = function.__code__ if function is not None else None
        if code is not None and _kinds.get(id(code)) != _BODY:
            if _detect.body_code(code):
                _watch_body(code)
            else:  # a checker's own code: what runs in it is part of the check
                code = None
        data = _Data(described, function, situation, cls, sys.exc_info()[1], walked)
        # `unflatten_safe`'s verdict cache checks a call it can't tell from a
        # construction, the first time it sees its key: a pass is the check of every
        # later call with that key (`_finish` files it as `verdict`); a failure is
        # not cached, and runs again each time.
        data.verdict = _detect._deliberate(frame)
        return open_described(frame, described, code, data)

    def opened(self, check: Open) -> None:
        if _original_pop is None:  # no fast path (3.12+, or jaxtyping not patched)
            return
        start = _detect._clock()
        try:
            self._opened(check)
        finally:
            _spent[0] += _detect._clock() - start

    def _opened(self, check: Open) -> None:
        data = check.data
        if (
            _original_pop is None
            or data.described is None
            or "wrapped_fn_impl" not in data.described.frame_locals
            # It may not be a check (jaxtyping's off-switch is the program's):
            # only its end tells, which the fast path would not see.
            or check.unsure
        ):
            return
        if _mode == "hooks":
            # It ends in jaxtyping's `pop_shape_memo`, with or without our body
            # hook (without it, the body's time is the check's).
            check.fast = True
            _fast_path(check.frame, data.described.frame_locals)
        elif sys.getprofile() == self.event and _fast_path(
            check.frame, data.described.frame_locals
        ):
            # Not when the runtime guard's window shares the profile function: it
            # must see the check's end itself.
            check.fast = True
            sys.setprofile(None)

    def finish(self, check: Open, seconds: float, failed: bool) -> None:
        start = _detect._clock()
        try:
            self._finish(check, seconds, failed)
        finally:
            _spent[0] += _detect._clock() - start

    def _finish(self, check: Open, seconds: float, failed: bool) -> None:
        data = check.data
        described, situation = data.described, data.situation
        if data.verdict and not failed:
            situation = _situation.Situation(
                "verdict", situation.jitted, False, situation.made_at
            )
        record = Record(
            described.checked,
            " with ".join(check.checkers),
            described.what,
            situation.when,
            situation.jitted,
            data.cls,
            check.pytree,
            self.thread_name(),
            seconds,
            failed=failed,
            rebuild=situation.rebuild,
            hook=import_hook_of(getattr(described.body, "__module__", None)),
            made_at=situation.made_at,
            error=_error_ref(self._error) if failed else None,
            frame=(id(check.frame), check.frame.f_code) if failed else None,
        )
        self._error = None
        for recorder in _recorders:
            recorder._add(record)


def _registered(ident: int) -> threading.Thread | None:
    """The `threading.Thread` of the thread `ident`, if `threading` knows it (a
    thread it started, or one a program's `threading.current_thread()` call
    registered), without registering one."""
    return getattr(threading, "_active", {}).get(ident)


def _bootstrap(frame: FrameType, event: str, arg: Any) -> None:
    """`threading.setprofile`'s hook: each new thread gets its own state."""
    sys.setprofile(_state().event)
    _state().event(frame, event, arg)


# Each thread's state, by thread (what we clear when we stop) and in a
# `threading.local` (what the hot paths read: one attribute lookup).
_threads: dict[int, _Thread] = {}


class _Local(threading.local):
    # Class-level defaults: the hot paths read them without the `AttributeError` a
    # missing attribute of a `threading.local` costs (1-2 us a read).
    state: _Thread | None = None
    opening = False


_local = _Local()


def _state() -> _Thread:
    state = _local.state
    if state is None:
        state = _local.state = _threads[threading.get_ident()] = _Thread()
    return state


def _forget_threads() -> None:
    global _local
    _threads.clear()
    _local = _Local()


# --- the sys.monitoring backend (3.12+) ----------------------------------------------

_monitor = Monitor("typecheck_guard.profile")


_BODY = _detect._BODY
_JAXTYPING = _detect._JAXTYPING
_BEARTYPE = _detect._BEARTYPE


def _on_start(
    code: CodeType, offset: int, _get: Any = _kinds.get, _spent: list[Any] = _spent
) -> Any:
    _spent[1] += 1
    kind = _get(id(code))
    if kind is None:
        start = _detect._clock()
        kind = _kind_of_code(code)
        if kind:
            _remember(code, kind)
        _spent[0] += _detect._clock() - start
        if not kind:
            return _monitor.disable(code)
    state = _local.state
    stack = state._stack if state is not None else None
    if stack:
        top = stack[-1]
        if top.in_body is None and kind != _BODY and (top.static or kind in top.known):
            # Checker code inside a check, adding nothing we don't know (each
            # leaf's array check under a `PyTree[...]` check): part of it, nothing
            # to do. The fast way out, called 200 times in a 200-leaf check.
            if kind == _JAXTYPING and code.co_name == "wrapped_fn":
                _watch_nested_body(sys._getframe(1))
            elif top.static and _part_of_every_check(
                code, kind, sys._getframe(1), top.frame
            ):
                return _monitor.disable(code)
            return None
    if _monitor.tool is None:  # stopped meanwhile
        return None
    if (state or _state()).started(sys._getframe(1), kind):
        # Its return ends the check. Only then: an array's `__instancecheck__`
        # returning once per leaf of every `PyTree[...]` check would otherwise call
        # us each time. (Per code object, not per kind: an equal code object is
        # another function's wrapper, with events of its own: `_monitoring.py`.)
        _monitor.instrument(code)
    return None


def _on_return(
    code: CodeType, offset: int, value: Any, _spent: list[Any] = _spent
) -> None:
    _spent[1] += 1
    state = _local.state
    if state is not None:
        frame = sys._getframe(1)
        if frame is state._waiting:
            state.returned(frame, False)


def _on_unwind(
    code: CodeType, offset: int, exception: BaseException, _spent: list[Any] = _spent
) -> None:
    _spent[1] += 1
    state = _local.state
    if state is not None:
        frame = sys._getframe(1)
        if frame is state._waiting:
            state._error = exception
            state.returned(frame, True)
            state._error = None


def _part_of_every_check(
    code: CodeType, kind: int, frame: FrameType, check: FrameType
) -> bool:
    """Whether `code`, starting at `frame` inside the jaxtyping check whose wrapper
    runs at `check`, runs only ever as part of such a check: jaxtyping's
    `wrapped_fn_impl`, which only its new-style wrapper `wrapped_fn` calls, or the
    beartype wrapper of one of the stubs jaxtyping checks a function's arguments and
    return value with (generated for that stub alone, and called only by
    `wrapped_fn_impl`). Their starts tell us nothing (the check's checkers are read
    from its layers): switched off (`DISABLE`, until all code's events restart),
    they cost no callback, three of the seven a check makes. Never a typeguard
    wrapper: typeguard's code is shared by every function it checks."""
    caller = frame.f_back
    if caller is None:
        return False
    if kind == _JAXTYPING:
        return (
            code.co_name == "wrapped_fn_impl"
            and caller is check
            and caller.f_code.co_name == "wrapped_fn"
        )
    return (
        kind == _BEARTYPE
        and code.co_filename.startswith(BEARTYPE_PREFIX)
        and caller.f_back is check
        and caller.f_code.co_name == "wrapped_fn_impl"
        and _kinds.get(id(caller.f_code)) == _JAXTYPING
    )


def _watch_nested_body(frame: FrameType) -> None:
    """A function checked by jaxtyping is called inside another check, as part of
    it (a checker's `isinstance` reading an attribute of an Equinox module): its
    body, which starts next, is part of that check too, but may be a check's body
    later. Known as one now, it is not switched off as plain code (`DISABLE`) when
    it starts, which would cost a `restart_events()` at its first check
    (`Monitor.restart_for`: all code re-instruments itself and calls us again; in
    Equinox's `tests/test_jit.py`, `Module.__getattribute__` and `_is_magic` run
    so first)."""
    fn = frame.f_locals.get("fn")
    code = getattr(fn, "__code__", None)
    if isinstance(code, CodeType) and _kinds.get(id(code)) != _BODY:
        _watch_body(code)


def _start_monitoring() -> bool:
    # The profiler's id first; the runtime guard asks for 4, then 3.
    _clear_kinds()
    mon: Any = getattr(sys, "monitoring", None)
    if mon is None:
        return False
    return _monitor.start((mon.PROFILER_ID, 3, 4), _on_start, _on_return, _on_unwind)


def _stop_monitoring() -> None:
    _monitor.stop()
    _clear_kinds()
    _forget_threads()


# --- the engine ----------------------------------------------------------------------

_lock = threading.RLock()
_recorders: tuple[Totals, ...] = ()
# How Python 3.11 and older watch (3.12+: `sys.monitoring`, and `None` here):
# "hooks", where checkers enter (jaxtyping's shape memo, the checked function's
# body, `isinstance(x, PyTree[...])`), with no profile function; or "profile", a
# profile function on every call (`every_checker`), which also sees beartype's and
# typeguard's own wrappers, and makes the rest of the program slower.
_mode: str | None = None
# Whether every jitted callable the program made is one of our wrappers (see the
# module docstring): decided when the first recorder attaches.
_sees_every_jit = False
_exit_hook: list[bool] = []


def _stop_at_exit() -> None:
    """Stop every recorder still attached when the interpreter exits: a
    `profile().start()` never stopped would otherwise watch the interpreter tear its
    modules down, and fail there ("Exception ignored in ...")."""
    for recorder in _recorders:
        stop = getattr(recorder, "stop", None)
        if callable(stop):
            stop()
        else:
            detach(recorder)


def attach(
    recorder: Totals, *, before_program: bool = False, every_checker: bool = False
) -> None:
    """Start recording into `recorder`. `before_program`: the program has not run
    yet (`typecheck-guard profile`, the pytest option), so every jitted callable it
    makes will be ours to see. `every_checker`: on Python 3.11 and older, watch with
    a profile function (the first recorder decides)."""
    global _recorders, _mode, _sees_every_jit
    from .._guard import _jitwrap

    with _lock:
        if recorder in _recorders:
            return
        if not _recorders:
            if not _exit_hook:
                atexit.register(_stop_at_exit)
                _exit_hook.append(True)
            _jitwrap.acquire(before_program=before_program)
            try:
                _sees_every_jit = _jitwrap.sees_every_jit()
                _prepare()
                if not _start_monitoring():
                    _mode = "profile" if every_checker else "hooks"
                    _patch_jaxtyping()
                    if _mode == "profile":
                        threading.setprofile(_bootstrap)
                        sys.setprofile(_state().event)
                _calibrate()
            except BaseException:
                _mode = None
                _jitwrap.release()
                raise
        if _mode == "hooks":
            _entries.profiled_body = _stub_body
        recorder.unwatched = (
            None if _mode != "hooks" else "checks by beartype or typeguard alone"
        )
        recorder._meter = (own_seconds, spent())
        _recorders = (*_recorders, recorder)


def detach(recorder: Totals) -> None:
    global _recorders, _mode
    from .._guard import _jitwrap

    with _lock:
        if recorder not in _recorders:
            return
        if recorder._meter is not None:
            recorder._profiler += own_seconds(recorder._meter[1])
            recorder._meter = None
        _recorders = tuple(r for r in _recorders if r is not recorder)
        if _recorders:
            return
        _entries.profiled_body = None
        if _monitor.tool is not None:
            _stop_monitoring()
        else:
            _mode = None
            _unpatch_jaxtyping()
            _unpatch_cells()
            threading.setprofile(None)  # pyright: ignore[reportArgumentType]
            if isinstance(getattr(sys.getprofile(), "__self__", None), _Thread):
                sys.setprofile(None)
            _forget_threads()
        _jitwrap.release()
