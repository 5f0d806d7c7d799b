"""Seeing jaxtyping's checks inside host callbacks at their entry points, without a
profile function (3.11 and older) and without following their checker code with
`sys.monitoring` (3.12+).

A host callback is the user's Python, run on every call of a jitted function, and
programs time it: tqdm prints one more line for each 0.1 s a bar lives, so a
callback that runs slower prints more lines (an ODE library's progress-meter test failed under
`--typecheck-guard=warn` in 9 runs of 9). Under a profile function, CPython 3.11
runs every instruction through its tracing path and calls the function for every
call and return: the callback's Python ran 1.5-1.7x slower. So inside a callback we
set no profile function, and see checks where their checker enters, at points
jaxtyping already calls:

- `jaxtyping._decorator.push_shape_memo`, which the new-style `wrapped_fn` calls
  once the arguments are bound: the check starts;
- `pop_shape_memo`, which it calls in its `finally`: the check ends (failed when it
  raised from the check's own code);
- the checked function's body, which `wrapped_fn_impl` runs between the two
  typechecked stubs jaxtyping made for it, `param_fn` (the arguments) and
  `full_fn` (the return value), both in closure cells: the first time we see a
  function checked we put a `_Stub` in each, which tells the callback's window
  when the body starts (the argument stub returned) and ends (the return stub
  starts, or the check ends: a body that raised, or no return value to check), so
  that the body's time is not the check's, with nothing of ours between jaxtyping
  and the body;
- `param_signature.bind`, from a closure cell too: with the stubs we put an equal
  `_Bound` signature there, whose `bind` leaves the arguments it bound with the
  checked function of its closure. `push_shape_memo` receives those very
  arguments, so the next checks of that function are known without reading the
  frame's locals (2-4 us inside a callback, as much as the rest of the
  bookkeeping).

Every cell is put back when the guard's patches are released; none keeps a
function alive meanwhile.

Inside the callback these points only write down what happened, with the time
(`Window.events`): which wrapper frame started, the body's start and end, which
frame ended and with what exception. In a callback every line we add costs several
times what it costs in a loop (its caches are cold), and following the checks there
(the stack of open checks, the `Open`s, the pauses) cost as much as the check
itself. `leave` replays the record through the window's tracker once the
callback returned, with the guard's `sys.monitoring` window off: the same calls, in
the same order, with the recorded times, so the checks and their times are what
following them live gave. What had to be known at the time is tested at the time:
that JAX wasn't tracing, that the thread wasn't watched by a jitted call's own
window, and (3.12+) that no check `sys.monitoring` follows was open outside its
body.

What this does not see, on 3.11 and inside callbacks only: a check by beartype or
typeguard alone (their wrappers call nothing of a library's by a name we can patch)
and a bare `isinstance(x, PyTree[...])`. On 3.12+ `sys.monitoring` still follows
those (`_detect._on_start`), and leaves jaxtyping's wrapper, and the checker code
that runs inside a check we follow here, to us (`Window.entered`).

The profiler (`_profile/_engine.py`) patches `pop_shape_memo` and the same cells
for its own fast path: it patches after us (it switches our patches on first) and
puts its own back first, so both chain. A closure whose cells hold the profiler's
hooks (3.11, while `typecheck-guard profile` runs) gets none of ours: its checks are
known by the frame's locals, and the profiler's body hook writes down the body's
start and end. A closure whose cells hold ours when the profiler starts keeps them,
and they tell the profiler what its own body hook would (`profiled_body`).
"""

from __future__ import annotations

import contextlib
import inspect
import operator
import sys
import threading
import weakref
from typing import Any

from .._compat._jaxtyping import signature_as
from . import _detect, _track
from ._detect import unhooked

__all__ = ["active", "enter", "leave", "patch"]

_getframe = sys._getframe

# The exception being handled, as `sys.exc_info()[1]` (3.11+: without the tuple).
_exception: Any = getattr(sys, "exception", lambda: sys.exc_info()[1])

_original_push: Any = None
_original_pop: Any = None
# Our hooks in place while patched (`_make_push`, `_make_pop`).
_push: Any = None
_pop: Any = None
_wrapper_code: Any = None


class _Local(threading.local):
    # The callback window of this thread, while one runs (`_watch.watch_callback`).
    # A class-level default: every jaxtyped call reads it while the guard is on,
    # and a missing attribute of a `threading.local` costs an `AttributeError`
    # raised and caught (1-2 us, where the read itself costs 80 ns).
    window: Any = None


_local = _Local()
# While the profiler follows checks on 3.11 (`_profile/_engine._stub_body`): told by
# our `_Stub`s when a checked function's body starts (`True`) and ends (a function
# first checked in a host callback the guard watched, before the profiler started,
# has our cells, not its).
profiled_body: Any = None
# The `wrapped_fn_impl` closures whose cells hold our `_Stub`s and `_Bound`.
_hooked: weakref.WeakSet[Any] = weakref.WeakSet()
_cells_lock = threading.Lock()


def enter(window: Any) -> Any:
    """Make `window` this thread's callback window until `leave(window, previous)`,
    with `previous` what this returns. (Two calls, not a context manager: a
    generator's frame, its `__enter__` and its `__exit__` would be in the time
    between two runs of a callback, which a program may time.)"""
    previous = _local.window
    window.events = []
    if _detect.monitoring:
        window.entered = []
    _local.window = window
    return previous


def leave(window: Any, previous: Any) -> None:
    """End `window`'s run as this thread's callback window (`enter`), and follow
    the checks it recorded (`_replay`)."""
    events = window.events
    _local.window = previous
    window.events = window.entered = window.bound = None
    _replay(window, events)


# What the hooks write down in a callback window's `events`, in order:
# `(_STARTED, frame, locals or None, checked function, exception being handled,
# time, the `_Bound` that bound its arguments or None)`; `(_BODY, checked function,
# time)` when a `_Stub` of arguments returned and `(_BODY_DONE, checked function,
# time)` when a `_Stub` of a return value starts; `(_ENDED, frame, exception,
# time)`.
_STARTED, _BODY, _BODY_DONE, _ENDED = range(4)


def _replay(window: Any, events: list[tuple[Any, ...]]) -> None:
    """Follow the checks of `events` through `window`, as the hooks would have live:
    a check opens where jaxtyping's wrapper started, its body's run is not its time
    when it is the body of the innermost open check, and it ends where that
    wrapper's frame ended."""
    try:
        if _replay_known(window, events):
            return
    except Exception:  # the long way, which changed nothing yet
        pass
    for event in events:
        what = event[0]
        try:
            if what == _STARTED:
                _, frame, local, body, handled, start, signature = event
                key = _key(local, signature)
                if not window.push_known(frame, local, body, handled, start, key):
                    window.locals = local
                    window.recorded = True
                    try:
                        if window.started(frame, _detect._JAXTYPING):
                            top = window._stack[-1]
                            top.body_fn = body
                            top.handled = handled
                            top.start = start
                    finally:
                        window.locals = None
                        window.recorded = False
            elif what == _BODY:
                stack = window._stack
                top = stack[-1] if stack else None
                if top is not None and top.in_body is None and top.body_fn is event[1]:
                    window.pause(top, event[1], event[2])
            elif what == _BODY_DONE:
                stack = window._stack
                top = stack[-1] if stack else None
                if top is not None and top.in_body is event[1]:
                    window.resume(top, False, event[2])
            else:
                _, frame, error, end = event
                stack = window._stack
                if stack and stack[-1].frame is frame:
                    top = stack[-1]
                    failed = error is not None and error is not top.handled
                    if top.in_body is not None:
                        # The body raised, or returned with no return value to check
                        # (jaxtyping then calls no `full_fn`): it ran until now.
                        window.resume(top, failed, end)
                        failed = False
                    window.close(top, failed and not top.body_raised, end)
        except Exception:  # never let the watching break the user's program
            pass


def _replay_known(window: Any, events: list[tuple[Any, ...]]) -> bool:
    """What `_replay` does, the short way, when `events` are those of a callback
    that runs as it ran before (a progress meter's): every check in them is of a
    function checked in a callback already, whose arguments `_Bound` bound
    (`Window.push_known` opens it), starts where no check is open or in the body of
    the innermost one, passes, and ends. Each one's time is then its wrapper's less
    its body's, computed as `pause`, `resume` and `close` compute it, and it joins
    the window's `pending` as `finish` adds it, in the order the checks ended.
    Returns `False`, having changed nothing, for anything else (a first check, one
    that failed or raised, checker code outside a body, a check left open), which
    `_replay` follows one event at a time: the same result, with an `Open` per
    check. The time between two runs of a callback is what a progress meter
    measures, and this was most of ours there."""
    if window._stack or not window.callback:
        return False
    known_of = _track._known_in_callback
    kinds = _detect._kinds
    body_kind = _detect._BODY
    # Per open check: [frame, known entry, checked function, start, paused at,
    # the body while it runs].
    stack: list[list[Any]] = []
    done = []
    for event in events:
        what = event[0]
        if what == _STARTED:
            if event[2] is not None or (stack and stack[-1][5] is None):
                return False
            signature = event[6]
            # What `_in_callbacks` holds for the closure of this `_Bound`, kept on it
            # once found: the same entry, without two weak references and a lookup
            # in the time between two runs of a callback.
            known = signature._typecheck_guard_known
            if known is None:
                known = known_of(_key(None, signature))
                if known is None:
                    return False
                signature._typecheck_guard_known = known
            code = known[2]
            if code is not None and kinds.get(id(code)) != body_kind:
                return False
            stack.append([event[1], known, event[3], event[5], 0.0, None])
        elif what == _BODY:
            if stack:
                top = stack[-1]
                if top[5] is None and top[2] is event[1]:
                    top[4] = event[2]
                    top[5] = event[1]
        elif what == _BODY_DONE:
            if stack:
                top = stack[-1]
                if top[5] is event[1]:
                    top[3] += event[2] - top[4]
                    top[5] = None
        else:
            _, frame, error, end = event
            if not stack or stack[-1][0] is not frame:
                continue  # a check it did not open (one JAX traced): as `_replay`
            if error is not None:
                return False
            top = stack.pop()
            if top[5] is not None:  # no return value to check: its body ran to here
                top[3] += end - top[4]
            done.append((frame, top[1], end - top[3]))
    if stack:
        return False
    if done:
        pending = window.pending
        if pending is None:
            window.pending = pending = []
        for frame, known, seconds in done:
            pending.append((frame, known[4], known[5], seconds, False))
    return True


def _key(local: dict[str, Any] | None, signature: Any) -> Any:
    """What `_track._in_callbacks` knows a check by: the `wrapped_fn_impl` closure of
    the jaxtyping decoration it runs, from the wrapper's locals `local` or the
    `_Bound` `signature` of that closure. One per decoration: the same function
    decorated twice, with two checkers, is two of them."""
    if local is not None:
        return local.get("wrapped_fn_impl")
    impl = getattr(signature, "_typecheck_guard_impl", None)
    return impl() if impl is not None else None


def active() -> bool:
    """Whether the hooks are in place (else callbacks are watched with a profile
    function, as every other watched call on 3.11)."""
    return _original_push is not None


class _Stub:
    """What we put in the `param_fn` and `full_fn` cells of jaxtyping's
    `wrapped_fn_impl`: the typechecked stubs it checks the arguments and the return
    value with. Between the two, `wrapped_fn_impl` runs the checked function's
    body, whose time is not the check's: in a host callback's window, the argument
    stub leaves "the body of `fn` starts" once it returned, the return stub "it
    ended" before it runs. So nothing of ours is between jaxtyping's frame and the
    body's (its caller, a warning's `stacklevel`, its recursion are as without us).
    It calls the stub with the arguments as received, and is the stub to everything
    else that reads it: its attributes are the stub's, and a pickler that reaches it
    through the closure (cloudpickle pickles a `__main__` function's closure by
    value) writes the stub itself. Its own frame shows in the traceback of a failed
    check (the checker's error, which jaxtyping raises its own from)."""

    __slots__ = (
        "_typecheck_guard_stub",
        "_typecheck_guard_fn",
        "_typecheck_guard_returns",
        "__weakref__",
    )

    def __init__(self, stub: Any, fn: Any, returns: bool):
        self._typecheck_guard_stub = stub
        self._typecheck_guard_fn = fn
        self._typecheck_guard_returns = returns

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_typecheck_guard_"):  # not set yet (copy, unpickling)
            raise AttributeError(name)
        return getattr(self._typecheck_guard_stub, name)

    @property
    def __typecheck_guard_original__(self) -> Any:
        """What our readers of jaxtyping's closures see here (`_detect.unhooked`)."""
        return self._typecheck_guard_stub

    def __reduce__(self) -> Any:
        # The stub, behind a standard library callable that returns it: the
        # unpickled closure holds the stub, in a process with or without us.
        return (operator.itemgetter(0), ((self._typecheck_guard_stub,),))

    def __eq__(self, other: Any) -> bool:
        return self._typecheck_guard_stub == unhooked(other)

    def __hash__(self) -> int:
        return hash(self._typecheck_guard_stub)

    def __repr__(self) -> str:
        return repr(self._typecheck_guard_stub)

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        window = _local.window
        events = window.events if window is not None else None
        if events is None and profiled_body is None:
            return self._typecheck_guard_stub(*args, **kwargs)
        fn = self._typecheck_guard_fn
        if self._typecheck_guard_returns:  # the body returned: its value is checked
            if profiled_body is not None:
                profiled_body(fn, False)
            if events is not None:
                events.append((_BODY_DONE, fn, _detect._clock()))
                entered = window.entered
                if entered and entered[-1] is None:
                    entered.pop()
            return self._typecheck_guard_stub(*args, **kwargs)
        out = self._typecheck_guard_stub(*args, **kwargs)
        if events is not None:
            if window.entered is not None:
                window.entered.append(None)
            events.append((_BODY, fn, _detect._clock()))
        if profiled_body is not None:
            profiled_body(fn, True)
        return out


class _Bound(inspect.Signature):
    """jaxtyping's `param_signature`, which the new-style `wrapped_fn` binds each
    call's arguments with and then passes `bound.arguments` to `push_shape_memo`:
    in a host callback's window, its `bind` leaves what it bound with the checked
    function of its closure, so that `_push` knows whose check starts without
    reading the frame's locals (those very arguments are the evidence). Equal to
    the signature, and it prints, copies and pickles as one."""

    __slots__ = (
        "_typecheck_guard_original",
        "_typecheck_guard_fn",
        "_typecheck_guard_impl",
        "_typecheck_guard_known",
    )

    def bind(self, /, *args: Any, **kwargs: Any) -> Any:
        window = _local.window
        if window is None:
            return self._bind(args, kwargs)  # what `inspect.Signature.bind` does
        start = _detect._clock()
        bound = self._bind(args, kwargs)
        # The check started with the binding, as it does where it is followed. On
        # the window, not `_local`: setting a thread-local's attribute costs a
        # callback's own time several times what an object's does.
        window.bound = (bound, getattr(self, "_typecheck_guard_fn", None), start, self)
        return bound

    def __reduce__(self) -> Any:
        return (
            inspect.Signature,
            (tuple(self.parameters.values()),),
            {"_return_annotation": self.return_annotation},
        )

    def __repr__(self) -> str:
        return f"<Signature {self}>"


def _hook(local: dict[str, Any]) -> Any:
    """Put our `_Stub`s in the `param_fn` and `full_fn` cells and a `_Bound` in the
    `param_signature` cell of the closure whose `wrapped_fn` has the locals `local`
    (once per checked function). Returns the checked function, which the stubs and
    the signature name in the window's events, or `None` if we can't (another
    jaxtyping, or the profiler's hooks in those cells)."""
    impl = local.get("wrapped_fn_impl")
    cells = _detect._cells(impl) if impl is not None else {}
    try:
        cell_fn, cell_param, cell_full = (
            cells["fn"],
            cells["param_fn"],
            cells["full_fn"],
        )
        cell_signature = cells["param_signature"]
    except KeyError:
        return None
    with _cells_lock:
        try:
            fn, param, full = (
                c.cell_contents for c in (cell_fn, cell_param, cell_full)
            )
            signature = cell_signature.cell_contents
        except ValueError:
            return None
        if isinstance(param, _Stub):
            return param._typecheck_guard_fn
        body = getattr(fn, "__typecheck_guard_body__", None)
        if body is not None:
            # The profiler's hooks (`_profile/_engine.py`, 3.11): it puts back what
            # it replaced when it stops, so we don't stack ours on them. Its body
            # hook tells the window when the body starts and ends, as ours would.
            return body
        if type(signature) is not inspect.Signature or isinstance(full, _Stub):
            return None
        cell_param.cell_contents = _Stub(param, fn, False)
        cell_full.cell_contents = _Stub(full, fn, True)
        bound = signature_as(
            _Bound,
            signature,
            _typecheck_guard_fn=fn,
            # Weakly: the closure holds this signature.
            _typecheck_guard_impl=weakref.ref(impl),
            _typecheck_guard_known=None,
        )
        cell_signature.cell_contents = bound
        local["param_signature"] = bound  # what reading the locals again would give
        # By the closure that holds the cells, weakly: a checked function the
        # program drops is not kept alive by us (cells have no weak references).
        _hooked.add(impl)
    return fn


def _make_push(forward: Any) -> Any:
    """Our `push_shape_memo`, calling `forward`, the function it replaces, for good:
    a program that took it while the guard was on (its own wrapper around it) and
    calls it after, or after another patch made its own, reaches what it would
    without us, and never a later hook of ours that calls it back."""

    def _push(arguments: Any) -> Any:
        window = _local.window
        if window is not None and window.events is not None:
            # `wrapped_fn` calls us, or the profiler's hook that chains to us.
            frame = _getframe(1)
            if frame.f_code is not _wrapper_code:
                frame = frame.f_back
            stack = window._stack
            if (
                frame.f_code is _wrapper_code
                # (A jitted call inside the callback sets no window of its own
                # (`_watch.watch`): the checks inside it are the callback's, ours.)
                and not _detect._is_tracing()  # then never flagged, as `Window.open`
                # (3.12+) Inside a check `sys.monitoring` follows, not in its body:
                # part of it.
                and not (stack and stack[-1].in_body is None)
            ):
                try:
                    bound = window.bound
                    if bound is not None and bound[0].arguments is arguments:
                        # `_Bound.bind` bound these very arguments for this call: its
                        # closure's checked function is this check's, which started
                        # with the binding.
                        window.bound = None
                        local = None
                        _, body, start, signature = bound
                    else:  # the first check of this function we see
                        local = frame.f_locals
                        body = _hook(local)
                        start = _detect._clock()
                        signature = None
                    entered = window.entered
                    if entered is not None:
                        entered.append(frame)
                    window.events.append(
                        (_STARTED, frame, local, body, _exception(), start, signature)
                    )
                except Exception:  # never let the watching break the user's program
                    pass
        return forward(arguments)

    return _push


def _make_pop(forward: Any) -> Any:
    """Our `pop_shape_memo`, calling `forward` for good (as `_make_push`)."""

    def _pop() -> Any:
        out = forward()
        end = _detect._clock()
        window = _local.window
        events = window.events if window is not None else None
        if events is not None:
            # `wrapped_fn` calls us, or the profiler's hook that chains to us.
            frame = _getframe(1)
            if frame.f_code is not _wrapper_code:
                frame = frame.f_back
            events.append((_ENDED, frame, _exception(), end))
            entered = window.entered
            if entered:
                if entered[-1] is None and len(entered) > 1 and entered[-2] is frame:
                    # Its body's mark: the body raised, or returned with no return value
                    # to check (no `full_fn` ended it).
                    entered.pop()
                if entered[-1] is frame:
                    entered.pop()
        return out

    return _pop


def patch(stack: contextlib.ExitStack) -> None:
    """Hook jaxtyping's `push_shape_memo` / `pop_shape_memo` until `stack` closes, if
    its new-style `wrapped_fn` still calls them by those global names."""
    global _original_push, _original_pop, _wrapper_code, _push, _pop
    if _original_push is not None:
        return
    from jaxtyping import _decorator

    push = getattr(_decorator, "push_shape_memo", None)
    pop = getattr(_decorator, "pop_shape_memo", None)
    wrapper = _detect._new_style_wrapper(_decorator.jaxtyped.__code__)
    if (
        wrapper is None
        or not {"push_shape_memo", "pop_shape_memo"} <= set(wrapper.co_names)
        or not {"fn", "wrapped_fn_impl"} <= set(wrapper.co_freevars)
        or getattr(getattr(push, "__code__", None), "co_argcount", None) != 1
        or getattr(getattr(pop, "__code__", None), "co_argcount", None) != 0
    ):
        return  # another jaxtyping: callbacks are watched the slow way
    _original_push, _original_pop, _wrapper_code = push, pop, wrapper
    _push, _pop = _make_push(push), _make_pop(pop)
    _detect.entries_wrapper = wrapper
    _decorator.push_shape_memo = _push  # pyright: ignore[reportAttributeAccessIssue]
    _decorator.pop_shape_memo = _pop  # pyright: ignore[reportAttributeAccessIssue]
    stack.callback(_unpatch)


def _unpatch() -> None:
    global _original_push, _original_pop, _wrapper_code, _push, _pop
    from jaxtyping import _decorator

    # A later patch of the same names (the profiler's) chains to ours; it puts its
    # own back before we get here.
    if getattr(_decorator, "push_shape_memo", None) is _push:
        _decorator.push_shape_memo = _original_push
    if getattr(_decorator, "pop_shape_memo", None) is _pop:
        _decorator.pop_shape_memo = _original_pop
    with _cells_lock:
        for impl in list(_hooked):
            cells = _detect._cells(impl)
            for name in ("param_fn", "full_fn"):
                hook = _detect._cell_value(cells, name)
                if isinstance(hook, _Stub):
                    cells[name].cell_contents = hook._typecheck_guard_stub
            signature = _detect._cell_value(cells, "param_signature")
            if isinstance(signature, _Bound):
                cells[
                    "param_signature"
                ].cell_contents = signature._typecheck_guard_original
        _hooked.clear()
    _original_push = _original_pop = _wrapper_code = _push = _pop = None
    _detect.entries_wrapper = None
