"""Seeing the typechecks that run while a jitted function is called, outside tracing.

A cached call of a jitted function runs almost no Python: JAX's C++ dispatch
flattens the inputs, runs the executable and unflattens the outputs, calling back
into Python only for the flatten/unflatten functions of custom pytree nodes (and
through them `__init__`, `__post_init__`, ...). So while a call is in flight (a
*window*, opened by the wrappers of `_jitwrap.py`, for the calling thread or task
only) we look at each Python function entered and recognise checker code by its
code object:

- jaxtyping: the `wrapped_fn_impl` closure of `jaxtyping.jaxtyped` (it runs only when
  a check runs: with `jaxtyping_disable` jaxtyping calls the function directly);
- beartype: its generated wrappers, whose filename is `<@beartype(module.qualname) at
  0x...>`;
- typeguard: 2.x's `typechecked` wrappers and `check_argument_types` /
  `check_return_type` / `check_type`, 4.x's `typeguard._functions` checks;
- jaxtyping's `isinstance(x, PyTree[...])` / `isinstance(x, Float[Array, ...])`
  (`__instancecheck__` of their metaclasses, looked up live so that a later patch of
  them is seen too).

The first checker entered is one *check*; checkers it calls (beartype under
jaxtyping, the `PyTree` check under beartype) are part of it. We time it from its
start to its return (or unwind), less the run of the function it checks (its
*body*, which we then watch start and return too): the time is the checker's own.

Checks inside host callbacks are seen through the windows `_callbacks` opens
around each run of a callback, on whatever thread JAX runs it.

A check that starts while JAX traces (`is_tracing()`) is never flagged. Every other
check in a window is, the first call's included: what runs outside tracing on the
first call (the unflatten of its outputs) runs again on every call.

Checks that `unflatten_safe` runs on purpose (the first time its verdict cache sees
a signature, recognised by its guard's frame having computed a verdict `key`) are
not counted; a guarded class checked outside `unflatten_safe` still is.

Two backends, one `Window`:

- Python 3.11 and older, or when no `sys.monitoring` tool id is free: a profile
  function (`sys.setprofile`, per thread) installed for the duration of the call. A
  cached `jax.jit` call runs no Python, so it pays for the wrapper and two
  `sys.setprofile` calls; wrappers that run Python on every call
  (`equinox.filter_jit`, `flax.nnx.jit`, `jax.pmap`) run it under the profiler,
  about 2-3x slower. JAX's tracing, lowering and compiling of a first call, where
  nothing is flagged, run with the profiler paused (`_tracing`).
- Python 3.12+: `sys.monitoring`, where toggling `sys.setprofile` per call would
  re-instrument the code that runs next (see `start_monitoring`).

We never walk the stack while watching; we walk it only to report a check.
"""

from __future__ import annotations

import contextvars
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import time
import weakref
from types import CodeType, FrameType
from typing import Any, Final, NamedTuple

from .._compat._checkers import BEARTYPE_PREFIX, nested_code, typeguard2_wrappers
from .._errors import PRIVATE_API_CHANGED
from ._monitoring import Monitor

__all__ = ["Check", "Window", "prepare"]

# What a code object is. `_PLAIN` is falsy: the profile function tests `if kind:`.
_PLAIN: Final = 0
_JAXTYPING: Final = 1
_BEARTYPE: Final = 2
_TYPEGUARD: Final = 3
_ISINSTANCE: Final = 4
# The body of a checked function (what the checker's wrapper calls once the
# arguments passed): its time is the function's, not the check's. Marked when a
# check of it is first seen.
_BODY: Final = 5

_CHECKER_NAMES: Final = {
    _JAXTYPING: "jaxtyping",
    _BEARTYPE: "beartype",
    _TYPEGUARD: "typeguard",
    _ISINSTANCE: "jaxtyping",
}

# code -> kind, filled lazily. Code objects seen inside windows are few (a cache-hit
# call runs little Python); we still bound the table.
_kinds: dict[CodeType, int] = {}
_MAX_KINDS: Final = 50_000
# Checker code objects found by `prepare()`.
_known: dict[CodeType, int] = {}
_instancecheck_owners: list[type] = []
# The files of jaxtyping's `_MetaPyTree` / `_MetaAbstractArray`: their
# `__instancecheck__` is a check wherever the class attribute points to now (the
# PyTree cache swaps it while on; a stale verdict must not hide the original).
_instancecheck_files: set[str] = set()
# The code of our per-class guard (`_unflatten._guards._make_guard.guard`).
_guard_code: CodeType | None = None
_is_tracing: Any = None
_library_dirs: tuple[str, ...] = ()
# typeguard 4's `_suppression` module: its instrumented code calls into
# `typeguard._functions` even under `suppress_type_checks()` (which
# `unflatten_safe` uses to skip it), and returns at once; that is no check.
_typeguard_suppression: Any = None

# What we time checks with; a test swaps it for a fake clock.
_clock = time.perf_counter
# What the guard has seen checked: the first check of each function carries the
# checker's one-time setup. Functions are held weakly; checks that wrap no function
# (`isinstance`, `check_type`) are keyed by what they checked.
_seen_functions: weakref.WeakSet[Any] = weakref.WeakSet()
_seen: set[str] = set()
_MAX_SEEN: Final = 50_000

_TYPEGUARD_FUNCTIONS: Final = frozenset(
    {
        "wrapper",
        "async_wrapper",
        "check_argument_types",
        "check_return_type",
        "check_type",
        "check_yield_type",
        "check_send_type",
        "check_variable_assignment",
    }
)


class Check(NamedTuple):
    """One runtime check seen in a window.

    `seconds` is the checker's own time: the checked function's body, which the
    checker's wrapper calls, is not in it.
    """

    checked: str
    """What was checked: `module.Class.__init__`, `module.function`, or
    `isinstance(..., PyTree[...]) in module.function`."""
    checker: str
    """`"jaxtyping with beartype"`, `"typeguard"`, ..."""
    kind: str
    """`"constructor"` (an `__init__` / `__post_init__`), `"function"` or
    `"isinstance"`; `"callback"` for a check inside a host callback."""
    seconds: float
    first: bool = False
    """Whether this is the first check of `checked` the guard has seen in this
    process: its time includes the checker's one-time setup (beartype resolving
    forward references, jaxtyping building its checks, caches filling)."""


def _changed(what: str, package: str, found: str | None) -> RuntimeError:
    from .._compat._versions import spec

    return RuntimeError(
        PRIVATE_API_CHANGED.format(
            what=what,
            package=package,
            found=found or "unknown",
            supported=spec(package),
        )
    )


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _find_codes() -> tuple[dict[CodeType, int], list[type], set[str], CodeType | None]:
    from .._compat._versions import installed

    codes: dict[CodeType, int] = {}
    owners: list[type] = []
    files: set[str] = set()

    from jaxtyping import _decorator

    impl = nested_code(_decorator.jaxtyped.__code__, "wrapped_fn_impl")
    if impl is None:
        raise _changed(
            "jaxtyping._decorator.jaxtyped (its nested `wrapped_fn_impl`, which runs "
            "each check)",
            "jaxtyping",
            installed("jaxtyping"),
        )
    codes[impl] = _JAXTYPING
    for module, name in (
        ("jaxtyping._pytree_type", "_MetaPyTree"),
        ("jaxtyping._array_types", "_MetaAbstractArray"),
    ):
        imported = importlib.import_module(module)
        owner = getattr(imported, name, None)
        files.add(getattr(imported, "__file__", None) or "")
        if not isinstance(owner, type) or "__instancecheck__" not in vars(owner):
            raise _changed(
                f"{module}.{name}.__instancecheck__",
                "jaxtyping",
                installed("jaxtyping"),
            )
        owners.append(owner)

    if _installed("typeguard"):
        import typeguard

        if hasattr(typeguard, "TypeCheckMemo"):  # 4.x: instrumented code calls these
            from typeguard import _functions  # pyright: ignore[reportAttributeAccessIssue]

            # `check_argument_types_internal`, `check_return_type_internal`,
            # `check_yield_type`, ... (their names change across 4.x releases).
            sources: list[Any] = [
                fn
                for name, fn in vars(_functions).items()
                if name.startswith("check_")
                and getattr(fn, "__module__", None) == _functions.__name__
            ]
            sources.append(getattr(typeguard, "check_type", None))
            if not any(
                getattr(fn, "__name__", "").startswith("check_argument")
                for fn in sources
            ):
                raise _changed(
                    "typeguard._functions.check_argument_types*",
                    "typeguard",
                    installed("typeguard"),
                )
        else:  # 2.x: wrappers, and the functions users call directly
            sources = [getattr(typeguard, n, None) for n in _TYPEGUARD_FUNCTIONS]
            wrappers = typeguard2_wrappers()
            if not wrappers:
                raise _changed(
                    "typeguard.typechecked (its nested `wrapper`)",
                    "typeguard",
                    installed("typeguard"),
                )
            codes.update(dict.fromkeys(wrappers, _TYPEGUARD))
        for fn in sources:
            code = getattr(fn, "__code__", None)
            if code is not None:
                codes[code] = _TYPEGUARD

    if _installed("beartype"):
        from beartype import beartype

        def probe(x: int) -> int:
            return x

        filename = beartype(probe).__code__.co_filename
        if not filename.startswith(BEARTYPE_PREFIX):
            raise _changed(
                f"beartype's generated wrappers being named '{BEARTYPE_PREFIX}...' "
                f"(found {filename!r})",
                "beartype",
                installed("beartype"),
            )
        # `BeartypeConf(is_pep557_fields=True)`: the `__setattr__` it puts on a
        # dataclass checks each field it sets (beartype 0.20+).
        try:
            from beartype._decor._type._pep import decortypepep557
        except ImportError:
            pass
        else:
            setattr_code = nested_code(
                decortypepep557.beartype_pep557_dataclass.__code__,
                "check_pep557_dataclass_field",
            )
            if setattr_code is not None:
                codes[setattr_code] = _BEARTYPE

    from .._unflatten import _guards

    return codes, owners, files, nested_code(_guards._make_guard.__code__, "guard")


def _package_dirs() -> tuple[str, ...]:
    # typecheck_guard itself: the package directory, one above this sub-package.
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    dirs = [os.path.join(package, "")]
    for name in ("jax", "jaxlib", "equinox", "flax"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(os.path.join(p, "") for p in spec.submodule_search_locations)
    return tuple(dirs)


def prepare() -> None:
    """Find the checkers' code objects (checking that they still look the way we
    expect) and JAX's tracing state. Called when the guard is switched on."""
    global _is_tracing, _library_dirs, _guard_code, _typeguard_suppression
    from .._compat._jax import make_is_tracing

    codes, owners, files, _guard_code = _find_codes()
    _typeguard_suppression = None
    if _installed("typeguard"):
        try:
            from typeguard import _suppression  # pyright: ignore (typeguard 4)
        except ImportError:  # 2.x
            pass
        else:
            _typeguard_suppression = _suppression
    _is_tracing = make_is_tracing()
    _library_dirs = _package_dirs()
    _known.clear()
    _known.update(codes)
    _instancecheck_owners[:] = owners
    _instancecheck_files.clear()
    _instancecheck_files.update(files)
    _kinds.clear()


def _kind_of_code(code: CodeType) -> int:
    kind = _known.get(code)
    if kind is not None:
        return kind
    if code.co_filename.startswith(BEARTYPE_PREFIX) and code.co_name != "<module>":
        # `<module>` is beartype executing the source of a wrapper it is generating
        # (decoration, not a check): jaxtyping < 0.3 decorates a fresh function on
        # every construction of a dataclass it checks.
        return _BEARTYPE
    if (
        code.co_name == "__instancecheck__" and code.co_filename in _instancecheck_files
    ) or any(
        getattr(vars(owner).get("__instancecheck__"), "__code__", None) is code
        for owner in _instancecheck_owners
    ):
        return _ISINSTANCE
    return _PLAIN


def remember(kinds: dict[CodeType, int], code: CodeType) -> int:
    """`_kind_of_code(code)`, memoised in `kinds` (bounded: a program that makes code
    objects without end must not grow it without end). The profiler keeps its own."""
    kind = _kind_of_code(code)
    if len(kinds) >= _MAX_KINDS:
        kinds.clear()
    kinds[code] = kind
    return kind


def _classify(code: CodeType) -> int:
    return remember(_kinds, code)


def _qualified(obj: Any) -> str:
    qualname = getattr(obj, "__qualname__", None)
    if qualname is None:
        return repr(obj)
    module = getattr(obj, "__module__", None)
    return f"{module}.{qualname}" if module else qualname


def _function_of(frame: FrameType | None) -> str:
    if frame is None:
        return "<unknown>"
    code = frame.f_code
    module = frame.f_globals.get("__name__")
    qualname = getattr(code, "co_qualname", code.co_name)
    return f"{module}.{qualname}" if module else qualname


def _dataclass_init(frame: FrameType) -> str | None:
    """`Cls.__init__` when this check is jaxtyping < 0.3's check of a dataclass's
    fields: it runs after `__init__`, through a function it generates per
    construction and names after the class (`_check_dataclass_annotations`)."""
    caller = frame.f_back
    for _ in range(4):
        if caller is None:
            return None
        if (
            caller.f_code.co_name == "_check_dataclass_annotations"
            and caller.f_globals.get("__name__") == "jaxtyping._decorator"
        ):
            cls = type(caller.f_locals.get("self"))
            return f"{_qualified(cls)}.__init__"
        caller = caller.f_back
    return None


def _describe(frame: FrameType, kind: int) -> tuple[str, str]:
    """(what was checked, the checker's name). Runs only when a check is seen."""
    code = frame.f_code
    if kind in (_JAXTYPING, _BEARTYPE):
        init = _dataclass_init(frame)
        if init is not None:
            return init, "jaxtyping" if kind == _JAXTYPING else "beartype"
    if kind == _JAXTYPING:
        return _qualified(frame.f_locals.get("fn")), "jaxtyping"
    if kind == _BEARTYPE:
        if not code.co_filename.startswith(BEARTYPE_PREFIX):
            # `is_pep557_fields`: the `__setattr__` beartype put on a dataclass.
            owner = type(frame.f_locals.get("self"))
            return f"{_qualified(owner)}.__setattr__", "beartype"
        name = code.co_filename[len(BEARTYPE_PREFIX) :]
        return name.rsplit(") at ", 1)[0], "beartype"
    if kind == _ISINSTANCE:
        cls = frame.f_locals.get(code.co_varnames[0]) if code.co_varnames else None
        name = getattr(cls, "__name__", None) or repr(cls)
        return f"isinstance(..., {name}) in {_function_of(frame.f_back)}", "jaxtyping"
    # typeguard
    local = frame.f_locals
    if code.co_name in ("wrapper", "async_wrapper"):
        return _qualified(local.get("python_func", local.get("func"))), "typeguard"
    if isinstance(local.get("func_name"), str):  # 4.x
        return local["func_name"], "typeguard"
    if code.co_name == "check_type":
        return (
            f"check_type(..., {local.get('expected_type')!r}) in "
            f"{_function_of(frame.f_back)}",
            "typeguard",
        )
    return _function_of(frame.f_back), "typeguard"


def _deliberate(frame: FrameType) -> bool:
    """Whether `unflatten_safe`'s guard runs this check to fill its verdict cache.

    The guard reaches `checked(...)` with a verdict `key` bound only on that path
    (a key of `None` means "can't cache", and the check then runs on every call).
    Its frame is within a few frames of the checker's: jaxtyping's and the
    checker's wrappers sit in between.
    """
    caller = frame.f_back
    for _ in range(4):
        if caller is None:
            return False
        if caller.f_code is _guard_code:
            return caller.f_locals.get("key") is not None
        caller = caller.f_back
    return False


def _kind_of(checked: str, kind: int) -> str:
    if (
        kind == _ISINSTANCE
        or checked.startswith("isinstance(")
        or checked.startswith("check_type(")
    ):
        return "isinstance"
    if checked.endswith((".__init__", ".__post_init__")):
        return "constructor"
    return "function"


def _body_of(frame: FrameType, kind: int) -> Any:
    """The function the checker at `frame` wraps, whose run is not part of the
    check, or `None`. Runs only when a check starts."""
    local = frame.f_locals
    if kind == _JAXTYPING:
        fn = local.get("fn")
    elif kind == _BEARTYPE:
        fn = local.get("__beartype_func")
    elif kind == _TYPEGUARD and frame.f_code.co_name in ("wrapper", "async_wrapper"):
        fn = local.get("func")
    else:  # `isinstance`, `check_type`, ...: all of it is the check
        return None
    return fn if isinstance(getattr(fn, "__code__", None), CodeType) else None


def _first(checked: str, fn: Any) -> bool:
    """Whether this is the first check of `fn` (or of `checked`, for a check that
    wraps no function) the guard has seen in this process."""
    try:
        if fn in _seen_functions:
            return False
        _seen_functions.add(fn)
        return True
    except TypeError:  # `None`, or no weak reference to it
        pass
    if checked in _seen:
        return False
    if len(_seen) >= _MAX_SEEN:
        _seen.clear()
    _seen.add(checked)
    return True


class Window:
    """Watches one call of a jitted function (or one host callback), on the calling
    thread or task.

    `event` is the profile function of the `sys.setprofile` backend; the
    `sys.monitoring` backend calls `_enter` and `returned` itself. Everything but
    `event` runs only when checker code runs.
    """

    # Class-level defaults: a window that sees no check (the common case) is
    # created without setting any attribute.
    checks: tuple[Check, ...] | list[Check] = ()
    _active: FrameType | None = None
    # The innermost of `_in_body`, `_active` and `_exempt`: the frame whose return
    # the profile function waits for.
    _waiting: FrameType | None = None
    _exempt: FrameType | None = None
    _body: CodeType | None = None
    _in_body: FrameType | None = None
    _paused = 0.0
    _first = False
    _checked = ""
    _checkers: list[str] = []
    _kind = _PLAIN
    _start = 0.0
    # Set on the window of a host callback: every check it sees is a "callback".
    callback = False
    # Callback sites to raise for after the call (`_watch`): `{site: [...]}`.
    callback_tally: dict[Any, list[Any]] | None = None

    def event(
        self, frame: FrameType, event: str, arg: Any, _get: Any = _kinds.get
    ) -> None:
        # Called for every Python and C call and return during the window, so it
        # does as little as it can: one dict lookup per call, one identity test
        # per return (`benchmarks/runtime_guard_overhead.py`).
        if event == "call":
            kind = _get(frame.f_code)
            if kind is None:
                kind = _classify(frame.f_code)
            if kind:
                self._enter(frame, kind)
        elif frame is self._waiting and event == "return":
            self.returned(frame)

    def returned(self, frame: FrameType) -> None:
        if frame is self._in_body:
            # The checked function's body ran from `_paused` to now: not the check's
            # time.
            self._start += _clock() - self._paused
            self._in_body = None
            self._waiting = self._active
        elif frame is self._active:
            self._leave()
        elif frame is self._exempt:
            self._exempt = None
            self._waiting = None

    def _enter(self, frame: FrameType, kind: int) -> None:
        if kind == _BODY:
            if (
                self._active is not None
                and self._in_body is None
                and frame.f_code is self._body
            ):
                self._paused = _clock()
                self._in_body = self._waiting = frame
            return
        if self._exempt is not None:
            return
        if (
            kind == _TYPEGUARD
            and _typeguard_suppression is not None
            and _typeguard_suppression.type_checks_suppressed
        ):
            return
        try:
            if self._active is not None:
                name = _CHECKER_NAMES[kind]
                if name not in self._checkers:
                    self._checkers.append(name)
                return
            if _is_tracing is not None and _is_tracing():
                return
            if _deliberate(frame):
                self._exempt = self._waiting = frame
                return
            self._checked, checker = _describe(frame, kind)
            self._checkers = [checker]
            self._kind = kind
            self._active = self._waiting = frame
            fn = _body_of(frame, kind)
            self._first = _first(self._checked, fn)
            self._body = fn.__code__ if fn is not None else None
            if self._body is not None and _kinds.get(self._body) != _BODY:
                _watch_body(self._body)
        except Exception:  # never let the guard break the user's call
            self._checked, self._checkers, self._kind = "<unknown>", ["?"], kind
            self._active = self._waiting = frame
            self._body = None
        self._start = _clock()

    def _leave(self) -> None:
        seconds = _clock() - self._start
        checked = self._checked
        check = Check(
            checked,
            " with ".join(self._checkers),
            "callback" if self.callback else _kind_of(checked, self._kind),
            seconds,
            self._first,
        )
        if not self.checks:
            self.checks = []
        self.checks.append(check)  # type: ignore[union-attr]
        self._active = self._waiting = None
        self._body = None
        self._in_body = None


def _watch_body(code: CodeType) -> None:
    """From now on, see `code` start and return: it is a checked function's body."""
    _kinds[code] = _BODY
    if monitoring and _monitor.tool is not None and not _monitor.instrument(code):
        # `code` may have answered `DISABLE` to `PY_START` already (plain code, as
        # far as we knew): switch its events back on. Once per checked function.
        sys.monitoring.restart_events()  # pyright: ignore[reportAttributeAccessIssue]


# The `sys.monitoring` backend (Python 3.12+). Toggling `sys.setprofile` around
# every call is cheap on 3.11 but not on 3.12+, where it re-instruments the code
# that runs next (a cache-hit `jax.jit` call became ~7x slower). There, while the
# guard is on, we keep a `PY_START` callback on all code, which answers `DISABLE`
# for code that is no checker (so that code never calls it again) and, for checker
# code, asks the window of the current thread/task, if any. `PY_RETURN` is enabled
# only on checker code; `PY_UNWIND` (global-only) ends a check that raised.
monitoring = False
_window: contextvars.ContextVar[Window | None] = contextvars.ContextVar(
    "typecheck_guard_window", default=None
)
_monitor = Monitor("typecheck_guard")
_TOOL_IDS: Final = (4, 3)  # the ids CPython leaves free (0-2 and 5 are named)


def _on_start(code: CodeType, offset: int) -> Any:
    kind = _kinds.get(code)
    if kind is None:
        kind = _kind_of_code(code)
        if kind == _PLAIN:
            return sys.monitoring.DISABLE  # pyright: ignore[reportAttributeAccessIssue]
        _kinds[code] = kind
    _monitor.instrument(code)
    window = _window.get()
    if window is not None:
        window._enter(sys._getframe(1), kind)
    return None


def _on_exit(code: CodeType, offset: int, value: Any) -> None:
    window = _window.get()
    if window is not None and (
        window._active is not None or window._exempt is not None
    ):
        window.returned(sys._getframe(1))


def start_monitoring() -> bool:
    """Switch to the `sys.monitoring` backend, where there is one (3.12+) and a tool
    id is free; `False` means "use `sys.setprofile`"."""
    global monitoring
    if monitoring:
        return True
    # Only checker code stays in `_kinds` on this backend.
    _kinds.clear()
    monitoring = _monitor.start(_TOOL_IDS, _on_start, _on_exit)
    return monitoring


def stop_monitoring() -> None:
    global monitoring
    if _monitor.tool is None:
        return
    monitoring = False
    _monitor.stop()
    _kinds.clear()


def is_library(filename: str) -> bool:
    return filename.startswith(_library_dirs)


def _relative(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive, on Windows
        return filename
    return filename if relative.startswith("..") else relative


def call_site(frame: FrameType | None) -> str:
    """`path:line` of the first frame outside JAX, Equinox, Flax and us."""
    while frame is not None and is_library(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{_relative(frame.f_code.co_filename)}:{frame.f_lineno}"


def callback_function(callback: Any) -> Any:
    """The user's function in what JAX hands its callback trampolines: a
    `_FlatCallback` (`pure_callback`, `io_callback`) or the closure
    `jax.debug.callback` makes around it."""
    fn = getattr(callback, "callback_func", callback)
    code = getattr(fn, "__code__", None)
    if code is not None and "callback" in code.co_freevars and fn.__closure__:
        fn = fn.__closure__[code.co_freevars.index("callback")].cell_contents
    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def defined_at(fn: Any) -> str:
    """`path:line` where `fn` was defined, or `<unknown>`."""
    try:
        code = inspect.unwrap(fn).__code__
    except (AttributeError, ValueError):
        return "<unknown>"
    return f"{_relative(code.co_filename)}:{code.co_firstlineno}"


def describe_jitted(transform: str, fun: Any) -> str:
    if inspect.ismethod(fun):
        fun = fun.__func__
    return f"{transform}({_qualified(fun)})"
