"""Seeing jaxtyping's checks inside host callbacks without a profile function (Python
3.11 and older).

A host callback is the user's Python, run on every call of a jitted function, and
programs time it: tqdm refreshes its bar at most every 0.1 s, so a callback that runs
slower prints more lines (an ODE library's progress-meter test failed under
`--typecheck-guard=warn` in 9 runs of 9). Under a profile function, CPython 3.11
runs every instruction through its tracing path and calls the function for every
call and return: the callback's Python ran 1.5-1.7x slower. So inside a callback we
set no profile function, and see checks where their checker enters, at points
jaxtyping already calls:

- `jaxtyping._decorator.push_shape_memo`, which the new-style `wrapped_fn` calls
  once the arguments are bound: the check starts;
- `pop_shape_memo`, which it calls in its `finally`: the check ends (failed when it
  raised from the check's own code);
- the checked function's body, which `wrapped_fn_impl` calls from a closure cell
  `fn`: the first time we see a function checked we put `_Body(fn)` in that cell,
  which tells the callback's window when the body starts and ends (the body's time
  is not the check's). Every cell is put back when the guard's patches are
  released; none keeps a function alive meanwhile.

What this does not see, on 3.11 and inside callbacks only: a check by beartype or
typeguard alone (their wrappers call nothing of a library's by a name we can patch)
and a bare `isinstance(x, PyTree[...])`. `sys.monitoring` (3.12+) sees them all at
no cost to the callback's own code (`_detect`).

The profiler (`_profile/_engine.py`) patches `pop_shape_memo` and the same cells
for its own fast path: it patches after us (it switches our patches on first) and
puts its own back first, so both chain.
"""

from __future__ import annotations

import contextlib
import operator
import sys
import threading
import weakref
from typing import Any

from . import _detect

__all__ = ["active", "current", "entered", "patch"]

_original_push: Any = None
_original_pop: Any = None
_wrapper_code: Any = None


class _Local(threading.local):
    # The callback window of this thread, while one runs (`_watch.watch_callback`).
    # A class-level default: every jaxtyped call reads it while the guard is on,
    # and a missing attribute of a `threading.local` costs an `AttributeError`
    # raised and caught (1-2 us, where the read itself costs 80 ns).
    window: Any = None


_local = _Local()
# The `wrapped_fn_impl` closures whose `fn` cell holds a `_Body` of ours.
_hooked: weakref.WeakSet[Any] = weakref.WeakSet()
_cells_lock = threading.Lock()


def current() -> Any:
    """The callback window of this thread, or `None`."""
    return _local.window


@contextlib.contextmanager
def entered(window: Any) -> Any:
    """Make `window` this thread's callback window for the block."""
    previous = _local.window
    _local.window = window
    try:
        yield
    finally:
        _local.window = previous


def active() -> bool:
    """Whether the hooks are in place (else callbacks are watched with a profile
    function, as every other watched call on 3.11)."""
    return _original_push is not None


class _Body:
    """A checked function's body, as jaxtyping's closure calls it: tells this
    thread's callback window when it starts and returns, and is the function to
    everything else that reads it. It calls the function with the arguments as
    received; its attributes are the function's (jaxtyping reads
    `__no_type_check__` on it at every call, `__module__` and `__qualname__` in its
    error messages; `_detect` its code); `inspect.signature` follows `__wrapped__`
    to the function; and a pickler that reaches it through the closure (cloudpickle
    pickles a `__main__` function's closure by value) writes the function itself.
    What it can't hide is its frame, between jaxtyping's and the body's, while the
    body runs (3.11, inside host callbacks, while the guard is on)."""

    __slots__ = ("fn", "__dict__", "__weakref__")

    def __init__(self, fn: Any):
        self.fn = fn
        for name in ("__module__", "__name__", "__qualname__", "__doc__", "__code__"):
            try:
                setattr(self, name, getattr(fn, name))
            except AttributeError:
                pass
        self.__wrapped__ = fn

    def __getattr__(self, name: str) -> Any:
        if name == "fn":  # not set yet (copy, unpickling)
            raise AttributeError(name)
        return getattr(self.fn, name)

    @property
    def __no_type_check__(self) -> Any:
        # jaxtyping reads it on every call, `getattr(fn, "__no_type_check__",
        # False)`: answered without raising (and catching) an `AttributeError` when
        # the function has none, which cost microseconds per check.
        return getattr(self.fn, "__no_type_check__", False)

    def __reduce__(self) -> Any:
        # The function, behind a standard library callable that returns it: the
        # unpickled closure holds the function, in a process with or without us.
        return (operator.itemgetter(0), ((self.fn,),))

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        window = _local.window
        stack = window._stack if window is not None else ()
        top = stack[-1] if stack else None
        if top is None or top.in_body is not None or top.body_fn is not self:
            return self.fn(*args, **kwargs)
        window.pause(top, self)
        try:
            out = self.fn(*args, **kwargs)
        except BaseException:
            window.resume(top, True)
            raise
        window.resume(top, False)
        return out


def _hook_body(local: dict[str, Any]) -> Any:
    """Put `_Body(fn)` in the `fn` cell of the `wrapped_fn` whose locals are `local`
    (once per checked function); the `_Body`, or `None` if we can't."""
    fn = local.get("fn")
    if isinstance(fn, _Body):
        return fn
    impl = local.get("wrapped_fn_impl")
    cell = _detect._cells(impl).get("fn") if impl is not None else None
    if cell is None:
        return None
    with _cells_lock:
        try:
            current = cell.cell_contents
        except ValueError:
            return None
        if isinstance(current, _Body):
            local["fn"] = current
            return current
        if hasattr(current, "__typecheck_guard_body__"):
            # The profiler's own body hook (`_profile/_engine.py`): it puts back
            # what it replaced when it stops, so we don't stack ours on it.
            return None
        body = _Body(current)
        cell.cell_contents = body
        local["fn"] = body  # what reading the frame's locals again would give
        # By the closure that holds the cell, weakly: a checked function the
        # program drops is not kept alive by us (cells have no weak references).
        _hooked.add(impl)
    return body


def _push(arguments: Any) -> Any:
    window = _local.window
    if window is not None:
        # `wrapped_fn` calls us, or the profiler's hook that chains to us.
        frame = sys._getframe(1)
        if frame.f_code is not _wrapper_code:
            frame = frame.f_back
        if frame.f_code is _wrapper_code and not _watched_call():
            try:
                # The frame's locals, read once for the hook and the check.
                local = frame.f_locals
                body = _hook_body(local)
                if not window.push_known(frame, local, body):
                    window.locals = local
                    if window.started(frame, _detect._JAXTYPING):
                        top = window._stack[-1]
                        top.body_fn = body
                        top.handled = sys.exc_info()[1]
            except Exception:  # never let the watching break the user's program
                pass
            window.locals = None
    return _original_push(arguments)


def _watched_call() -> bool:
    """Whether a jitted call made inside the callback watches this thread with the
    guard's profile function (it then sees its own checks)."""
    profile = sys.getprofile()
    if profile is None:
        return False
    from ._track import Window

    parts = getattr(profile, "__typecheck_guard_parts__", (profile,))
    return any(isinstance(getattr(p, "__self__", None), Window) for p in parts)


def _pop() -> Any:
    out = _original_pop()
    end = _detect._clock()
    window = _local.window
    if window is not None and window._stack:
        stack = window._stack
        # `wrapped_fn` calls us, or the profiler's hook that chains to us.
        frame = sys._getframe(1)
        if frame.f_code is not _wrapper_code:
            frame = frame.f_back
        if stack[-1].frame is frame:
            top = stack[-1]
            error = sys.exc_info()[1]
            failed = error is not None and error is not top.handled
            window.close(top, failed and not top.body_raised, end)
    return out


def patch(stack: contextlib.ExitStack) -> None:
    """Hook jaxtyping's `push_shape_memo` / `pop_shape_memo` until `stack` closes, if
    its new-style `wrapped_fn` still calls them by those global names."""
    global _original_push, _original_pop, _wrapper_code
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
    _decorator.push_shape_memo = _push  # pyright: ignore[reportAttributeAccessIssue]
    _decorator.pop_shape_memo = _pop  # pyright: ignore[reportAttributeAccessIssue]
    stack.callback(_unpatch)


def _unpatch() -> None:
    global _original_push, _original_pop, _wrapper_code
    from jaxtyping import _decorator

    # A later patch of the same names (the profiler's) chains to ours; it puts its
    # own back before we get here.
    if getattr(_decorator, "push_shape_memo", None) is _push:
        _decorator.push_shape_memo = _original_push
    if getattr(_decorator, "pop_shape_memo", None) is _pop:
        _decorator.pop_shape_memo = _original_pop
    with _cells_lock:
        for impl in list(_hooked):
            cell = _detect._cells(impl).get("fn")
            body = cell.cell_contents if cell is not None else None
            if isinstance(body, _Body):
                cell.cell_contents = body.fn  # pyright: ignore[reportOptionalMemberAccess]
        _hooked.clear()
    _original_push = _original_pop = _wrapper_code = None
