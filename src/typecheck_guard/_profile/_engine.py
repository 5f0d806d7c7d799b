"""The profiler's engine: it sees every typecheck a program runs, where it was
reached from, and what it cost, and hands each to the recorders attached to it.

We recognise checker code exactly as the runtime guard does (`_detect`: jaxtyping's
`wrapped_fn_impl`, beartype's generated wrappers, typeguard's wrappers and
functions, jaxtyping's `__instancecheck__`s), but we watch the whole program, not
one jitted call:

- Python 3.11 and older: a profile function per thread (`sys.setprofile` for the
  thread that starts us, `threading.setprofile` for threads started later).
- Python 3.12+: `sys.monitoring`, under a tool id of our own (the profiler's, else
  another free one), so the runtime guard's tool and ours run side by side. A
  `PY_START` callback answers `DISABLE` for any code that is no checker, so plain
  code costs nothing after its first call; `PY_RETURN` is on for checker code only.

The first checker a thread enters is one *check*, until that frame returns or
unwinds; checkers it reaches (beartype under jaxtyping, the `PyTree` check under
beartype) are part of it, as the runtime guard counts them. Only when a check
starts do we look around: is JAX tracing (`trace`)? Is a jitted call in flight on
this thread (a `_jitwrap.Jitted` or `unflatten_safe(jitted)` frame below us:
`dispatch`)? Is the checked constructor's caller JAX's tree code or a registered
unflatten function (`tree`)? Otherwise a checked `__init__`/`__post_init__` is a
`construction`, anything else `eager`. Jitted calls are seen only for jitted
callables made while `_jitwrap`'s factory patches are on, which we switch on at
start: `typecheck-guard profile` does so before the program runs.

On Python 3.11 a profile function runs for every call inside a check too, and a
200-leaf `PyTree[...]` check makes ~44,000 calls: we switch it off for the duration
of a `@jaxtyped` check and for the leaf-by-leaf part of any `PyTree` check (see
`_popped` and `_quiet_check`), which keeps the overhead near 1.0x and the reported
times honest (`benchmarks/profile_overhead.py`).

One engine, any number of recorders (the command, a `with profile()` block, the
pytest option), each with its own totals.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from types import CodeType, FrameType
from typing import Any, Final

from .._compat._checkers import BEARTYPE_PREFIX
from .._guard import _detect
from .._guard._monitoring import Monitor
from ._data import Record, Totals

__all__ = ["attach", "detach"]


# --- what we recognise -------------------------------------------------------------

_kinds: dict[CodeType, int] = {}
_jitted_codes: dict[CodeType, str] = {}  # Jitted.__call__ / _GuardedCall.__call__
_skip_dirs: tuple[str, ...] = ()  # checker libraries and us: not "the caller"
_checker_dirs: tuple[str, ...] = ()
_tree_dirs: tuple[str, ...] = ()  # JAX's tree code
_callback_files: frozenset[str] = frozenset()
_pytree_files: frozenset[str] = frozenset()
_unflatten_codes: set[CodeType] = set()
_registry_seen = -1


def _dirs(names: tuple[str, ...]) -> tuple[str, ...]:
    import importlib.util

    out = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            out.extend(os.path.join(p, "") for p in spec.submodule_search_locations)
    return tuple(out)


def _prepare() -> None:
    global _skip_dirs, _tree_dirs, _callback_files, _pytree_files, _checker_dirs
    from .._guard import _jitwrap
    from .._unflatten import _safe as _unflatten

    if not _detect._known:  # the guard has not prepared them yet
        _detect.prepare()
    _jitted_codes[_jitwrap.Jitted.__call__.__code__] = "jitted"
    _jitted_codes[_unflatten._GuardedCall.__call__.__code__] = "unflatten_safe"
    _checker_dirs = _dirs(("jaxtyping", "beartype", "typeguard"))
    _skip_dirs = (*_checker_dirs, *_dirs(("typecheck_guard",)))
    _tree_dirs = _dirs(("jax", "jaxlib"))
    import importlib

    files = []
    # Where JAX runs host callbacks (`pure_callback`, `io_callback`,
    # `jax.debug.callback`): private modules, so a move only costs us the label.
    for name in ("jax._src.callback", "jax._src.debugging"):
        try:
            files.append(importlib.import_module(name).__file__)
        except ImportError:
            pass
    _callback_files = frozenset(f for f in files if f is not None)
    # `_MetaPyTree`'s module (the first owner `_detect` found).
    owners = _detect._instancecheck_owners[:1]
    module = sys.modules.get(owners[0].__module__) if owners else None
    _pytree_files = frozenset({getattr(module, "__file__", None) or "<none>"})
    _kinds.clear()


def _classify(code: CodeType) -> int:
    return _detect.remember(_kinds, code)


def _is_pytree_check(code: CodeType) -> bool:
    if code.co_filename in _pytree_files:
        return True
    owner = _detect._instancecheck_owners[0] if _detect._instancecheck_owners else None
    method = vars(owner).get("__instancecheck__") if owner is not None else None
    return getattr(method, "__code__", None) is code


def _registered_unflatten(code: CodeType) -> bool:
    """Whether `code` is the Python unflatten function of a registered class."""
    global _registry_seen
    from .._compat._jax import registry, registry_items
    from .._unflatten._records import function_of, unflatten_of

    if len(registry()) != _registry_seen:
        items = registry_items()
        for _, entry in items:
            fn = unflatten_of(entry)
            # `install()` registers the class's own unflatten wrapped (`__wrapped__`):
            # that one calls the constructor.
            for layer in (fn, getattr(fn, "__wrapped__", None)):
                code = getattr(function_of(layer), "__code__", None)
                if code is not None:
                    _unflatten_codes.add(code)
        _registry_seen = len(items)
    return code in _unflatten_codes


def _jitted_name(frame: FrameType, what: str) -> str | None:
    obj = frame.f_locals.get("self")
    if what == "unflatten_safe":
        obj = getattr(obj, "__wrapped__", None)
    transform = getattr(obj, "_typecheck_guard_transform", None)
    if transform is not None:
        return _detect.describe_jitted(transform, obj._typecheck_guard_fun)  # pyright: ignore[reportOptionalMemberAccess]
    fun = getattr(obj, "__wrapped__", obj)
    return f"jit({_detect._qualified(fun)})"


def _jit_disabled() -> bool:
    jax = sys.modules.get("jax")
    return bool(jax is not None and jax.config.jax_disable_jit)  # pyright: ignore[reportAttributeAccessIssue]


# The functions of a jitted call's first (cache-miss) call that unflatten its
# inputs or outputs once per compilation, outside tracing proper: `jax.jit` computes
# the inputs' key paths and re-flattens the outputs for its C++ fast path. Checks
# they run are paid once per compilation, like those in the trace. (The output
# unflatten of that first call, `_run_python_pjit`, is the one every call repeats.)
_ONCE_PER_COMPILATION: Final = frozenset({"_infer_params", "_get_fastpath_data"})


def _situation(frame: FrameType) -> tuple[str, str | None, bool]:
    """(when, the jitted function's name, reached in a host callback). Runs once per
    check, when it starts."""
    tracing = _detect._is_tracing
    traced = tracing is not None and tracing()
    caller: FrameType | None = None
    jitted: tuple[FrameType, str] | None = None
    callback = False
    compiling = False
    f = frame.f_back
    while f is not None:
        code = f.f_code
        what = _jitted_codes.get(code)
        if what is not None:
            jitted = (f, what)  # keep walking: the outermost one is the user's
        else:
            filename = code.co_filename
            if filename in _callback_files:
                callback = True
            elif jitted is None and code.co_name in _ONCE_PER_COMPILATION:
                compiling = filename.startswith(_tree_dirs)
            if caller is None and not (
                filename.startswith(_skip_dirs) or filename.startswith(BEARTYPE_PREFIX)
            ):
                caller = f
        f = f.f_back
    if traced or (jitted is not None and compiling and not callback):
        return "trace", _jitted_name(*jitted) if jitted is not None else None, False
    if jitted is not None and not _jit_disabled():
        return "dispatch", _jitted_name(*jitted), callback
    if callback:
        return "dispatch", None, True
    if caller is not None and (
        caller.f_code.co_filename.startswith(_tree_dirs)
        or _registered_unflatten(caller.f_code)
    ):
        return "tree", None, False
    return "", None, False


def _self_class(frame: FrameType) -> type | None:
    """The class of the instance a checked `__init__` / `__post_init__` builds."""
    local = frame.f_locals
    args = local.get("args")
    if isinstance(args, tuple) and args:
        return type(args[0])
    code = frame.f_code
    if code.co_argcount:
        value = local.get(code.co_varnames[0])
        if value is not None:
            return type(value)
    return None


def _has_pytree(annotation: Any, depth: int = 0) -> bool:
    import typing

    owner = _detect._instancecheck_owners[0] if _detect._instancecheck_owners else None
    if owner is not None and isinstance(annotation, owner):
        return True
    if depth > 8:
        return False
    return any(_has_pytree(a, depth + 1) for a in typing.get_args(annotation))


_jaxtyping_infos: weakref.WeakKeyDictionary[Any, tuple[str, bool]] = (
    weakref.WeakKeyDictionary()
)


def _jaxtyping_info(frame: FrameType) -> tuple[str, bool]:
    """For a check by jaxtyping's `wrapped_fn_impl`: the checkers (jaxtyping and the
    typechecker it was given) and whether a `PyTree[...]` annotation is checked,
    read once per checked function from what jaxtyping built when it decorated it.
    We name them from there rather than from the checkers entered inside, which we
    don't watch on the fast path (`_pause`)."""
    from .._compat._checkers import peel

    local = frame.f_locals
    param_fn = local.get("param_fn")
    try:
        return _jaxtyping_infos[param_fn]
    except (KeyError, TypeError):
        pass
    checkers = ["jaxtyping"]
    layer, depth = param_fn, 0
    while layer is not None and depth < 16:
        # A checker's layer by its code (typeguard 2's `wrapper` is renamed by
        # `functools.wraps`), else as `peel` knows it.
        code = getattr(layer, "__code__", None)
        kind = _detect._kind_of_code(code) if code is not None else _detect._PLAIN
        name = _detect._CHECKER_NAMES[kind] if kind else None
        for found in (name, *peel(layer).checkers[:1]):
            if found is not None and found not in checkers:
                checkers.append(found)
        layer, depth = getattr(layer, "__wrapped__", None), depth + 1
    signature = local.get("full_signature")
    pytree = False
    if signature is not None:
        annotations = [p.annotation for p in signature.parameters.values()]
        annotations.append(signature.return_annotation)
        pytree = any(_has_pytree(a) for a in annotations)
    info = (" with ".join(checkers), pytree)
    try:
        _jaxtyping_infos[param_fn] = info
    except TypeError:
        pass
    return info


# The `sys.setprofile` backend's fast path for jaxtyping's checks. A profile function
# runs for every call and return inside a check too: a 200-leaf `PyTree[...]` check
# makes ~44,000 Python calls, and even a profile function that does nothing makes it
# 2.6x slower (Python 3.11). So when a check starts in jaxtyping's `wrapped_fn_impl`
# (most checks: every `@jaxtyped` function and class), we switch the thread's
# profile function off, and end the check in jaxtyping's own `pop_shape_memo`, which
# its `wrapped_fn` calls right after `wrapped_fn_impl` returns or raises; there we
# switch the profile function back on. `sys.monitoring` (3.12+) needs none of this:
# it only calls us for checker code.
_paused: dict[int, _Thread] = {}
_original_pop: Any = None


def _popped() -> None:
    _original_pop()
    state = _paused.get(threading.get_ident())
    if state is not None and sys._getframe(1) is state.caller:
        del _paused[threading.get_ident()]
        state.leave()
        if _on:
            sys.setprofile(state.event)


def _patch_pop() -> bool:
    """Route jaxtyping's `pop_shape_memo` through `_popped`, if jaxtyping's
    `wrapped_fn` still calls it by that global name; `False` if not (we then watch
    jaxtyping's checks like any other, only slower)."""
    global _original_pop
    from jaxtyping import _decorator

    original = getattr(_decorator, "pop_shape_memo", None)
    wrapper = None
    for const in _decorator.jaxtyped.__code__.co_consts:
        if (
            isinstance(const, CodeType)
            and const.co_name == "wrapped_fn"
            and "wrapped_fn_impl" in const.co_freevars
        ):
            wrapper = const
    if (
        original is None
        or wrapper is None
        or "pop_shape_memo" not in wrapper.co_names
        or getattr(original, "__code__", None) is None
        or original.__code__.co_argcount != 0
    ):
        return False
    _original_pop = original
    setattr(_decorator, "pop_shape_memo", _popped)  # noqa: B010
    return True


def _unpatch_pop() -> None:
    global _original_pop
    if _original_pop is None:
        return
    from jaxtyping import _decorator

    if getattr(_decorator, "pop_shape_memo", None) is _popped:
        setattr(_decorator, "pop_shape_memo", _original_pop)  # noqa: B010
    _original_pop = None
    _paused.clear()


# The same for the leaf-by-leaf work of a `PyTree[...]` check that no `@jaxtyped`
# function encloses (a function checked by beartype or typeguard alone, a bare
# `isinstance`): jaxtyping's `_MetaPyTree._check` runs with the profile function
# off. We still see the check start and end (its `__instancecheck__` and the
# checker's wrapper are outside `_check`); we only miss the checkers entered inside,
# which are part of it anyway.
_original_check: Any = None


def _quiet_check(cls: Any, obj: Any, pytree_memo: Any) -> Any:
    profile = sys.getprofile()
    if not isinstance(getattr(profile, "__self__", None), _Thread):
        return _original_check(cls, obj, pytree_memo)
    sys.setprofile(None)
    try:
        return _original_check(cls, obj, pytree_memo)
    finally:
        sys.setprofile(profile)


def _patch_check() -> None:
    global _original_check
    owner = _detect._instancecheck_owners[0] if _detect._instancecheck_owners else None
    original = vars(owner).get("_check") if owner is not None else None
    code = getattr(original, "__code__", None)
    if code is None or code.co_varnames[:3] != ("cls", "obj", "pytree_memo"):
        return
    _original_check = original
    owner._check = _quiet_check  # pyright: ignore[reportOptionalMemberAccess]


def _unpatch_check() -> None:
    global _original_check
    if _original_check is None:
        return
    owner = _detect._instancecheck_owners[0]
    if vars(owner).get("_check") is _quiet_check:
        owner._check = _original_check  # pyright: ignore[reportAttributeAccessIssue]
    _original_check = None


# --- per-thread watching -----------------------------------------------------------


class _Thread:
    """One thread's state: the check in progress, if any."""

    __slots__ = (
        "active",
        "start",
        "checked",
        "checkers",
        "kind",
        "when",
        "jitted",
        "cls",
        "pytree",
        "callback",
        "static",
        "caller",
    )

    def __init__(self) -> None:
        self.active: FrameType | None = None
        self.static = False

    # The `sys.setprofile` backend's profile function.
    def event(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            if not _on:  # the engine stopped: leave this thread alone
                sys.setprofile(None)
                return
            code = frame.f_code
            kind = _kinds.get(code)
            if kind is None:
                kind = _classify(code)
            if kind:
                self.enter(frame, code, kind)
        elif event == "return" and frame is self.active:
            self.leave()

    # The runtime guard composes its window with us rather than stepping aside
    # (`_watch.watch`).
    event.__typecheck_guard_composes__ = True  # type: ignore[attr-defined]

    def enter(self, frame: FrameType, code: CodeType, kind: int) -> None:
        if self.active is not None:
            name = _detect._CHECKER_NAMES[kind]
            if not self.static and name not in self.checkers:
                self.checkers.append(name)
            if kind == _detect._ISINSTANCE and not self.pytree:
                self.pytree = _is_pytree_check(code)
            return
        suppression = _detect._typeguard_suppression
        if (
            kind == _detect._TYPEGUARD
            and suppression is not None
            and suppression.type_checks_suppressed
        ):
            return
        caller = frame.f_back
        if (
            kind == _detect._ISINSTANCE
            and caller is not None
            and caller.f_code.co_filename.startswith(_checker_dirs)
        ):
            # A checker probing a hint while it decorates (beartype asks
            # `isinstance(None, hint)` to see whether the hint is isinstanceable).
            self.checked, self.checkers, self.kind = "<setup>", ["?"], "isinstance"
            self.when, self.jitted, self.cls, self.callback = "setup", None, None, False
            self.pytree = self.static = False
            self.active = frame
            self.start = time.perf_counter()
            return
        static = pytree = False
        try:
            checked, checker = _detect._describe(frame, kind)
            if kind == _detect._JAXTYPING:
                checker, pytree = _jaxtyping_info(frame)
                static = True
            what = _detect._kind_of(checked, kind)
            when, jitted, callback = _situation(frame)
            if not when:
                when = "construction" if what == "constructor" else "eager"
            cls = _self_class(frame) if what == "constructor" else None
        except Exception:  # never let the profiler break the program
            checked, checker, what = "<unknown>", "?", "function"
            when, jitted, callback, cls = "eager", None, False, None
        self.checked = checked
        self.checkers = [checker]
        self.kind = what
        self.when = when
        self.jitted = jitted
        self.cls = cls
        self.callback = callback
        self.pytree = pytree or (kind == _detect._ISINSTANCE and _is_pytree_check(code))
        self.static = static
        self.active = frame
        if static and _original_pop is not None and sys.getprofile() == self.event:
            # The fast path (see `_popped`). Not when the runtime guard's window
            # shares the profile function: it must see the check's end itself.
            self.caller = frame.f_back
            _paused[threading.get_ident()] = self
            sys.setprofile(None)
        self.start = time.perf_counter()

    def leave(self) -> None:
        seconds = time.perf_counter() - self.start
        self.active = None
        record = Record(
            self.checked,
            " with ".join(self.checkers),
            self.kind,
            self.when,
            self.jitted,
            self.cls,
            self.pytree,
            self.callback,
            threading.current_thread().name,
            seconds,
        )
        for recorder in _recorders:
            recorder._add(record)


def _bootstrap(frame: FrameType, event: str, arg: Any) -> None:
    """`threading.setprofile`'s hook: each new thread gets its own state."""
    state = _Thread()
    sys.setprofile(state.event)
    state.event(frame, event, arg)


# --- the sys.monitoring backend (3.12+) ----------------------------------------------

_states: dict[int, _Thread] = {}
_monitor = Monitor("typecheck_guard.profile")


def _state() -> _Thread:
    ident = threading.get_ident()
    state = _states.get(ident)
    if state is None:
        state = _states[ident] = _Thread()
    return state


def _on_start(code: CodeType, offset: int) -> Any:
    kind = _kinds.get(code)
    if kind is None:
        kind = _detect._kind_of_code(code)
        if not kind:
            return sys.monitoring.DISABLE  # pyright: ignore[reportAttributeAccessIssue]
        _kinds[code] = kind
    # Every time, not once per kind: an equal code object found in `_kinds` is
    # another function's wrapper, with events of its own (`_monitoring.py`).
    _monitor.instrument(code)
    if _monitor.tool is None:  # stopped meanwhile
        return None
    _state().enter(sys._getframe(1), code, kind)
    return None


def _on_exit(code: CodeType, offset: int, value: Any) -> None:
    state = _states.get(threading.get_ident())
    if state is not None and state.active is not None:
        if sys._getframe(1) is state.active:
            state.leave()


def _start_monitoring() -> bool:
    # The profiler's id first; the runtime guard asks for 4, then 3.
    _kinds.clear()
    mon: Any = getattr(sys, "monitoring", None)
    if mon is None:
        return False
    return _monitor.start((mon.PROFILER_ID, 3, 4), _on_start, _on_exit)


def _stop_monitoring() -> None:
    _monitor.stop()
    _kinds.clear()
    _states.clear()


# --- the engine ----------------------------------------------------------------------

_lock = threading.RLock()
_recorders: tuple[Totals, ...] = ()
_on = False
_profiling_thread: _Thread | None = None


def attach(recorder: Totals) -> None:
    global _recorders, _on, _profiling_thread
    from .._guard import _jitwrap

    with _lock:
        if recorder in _recorders:
            return
        if not _recorders:
            _jitwrap.acquire()
            try:
                _prepare()
                if not _start_monitoring():
                    _patch_pop()
                    _patch_check()
                    _profiling_thread = _Thread()
                    _on = True
                    threading.setprofile(_bootstrap)
                    sys.setprofile(_profiling_thread.event)
            except BaseException:
                _jitwrap.release()
                raise
        _recorders = (*_recorders, recorder)


def detach(recorder: Totals) -> None:
    global _recorders, _on, _profiling_thread
    from .._guard import _jitwrap

    with _lock:
        if recorder not in _recorders:
            return
        _recorders = tuple(r for r in _recorders if r is not recorder)
        if _recorders:
            return
        if _monitor.tool is not None:
            _stop_monitoring()
        else:
            _on = False
            _unpatch_pop()
            _unpatch_check()
            threading.setprofile(None)  # pyright: ignore[reportArgumentType]
            if isinstance(getattr(sys.getprofile(), "__self__", None), _Thread):
                sys.setprofile(None)
            _profiling_thread = None
        _jitwrap.release()
