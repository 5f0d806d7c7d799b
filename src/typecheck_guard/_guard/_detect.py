"""Recognising checker code, and naming what a check checked.

A cached call of a jitted function runs almost no Python: JAX's C++ dispatch
flattens the inputs, runs the executable and unflattens the outputs, calling back
into Python only for the flatten/unflatten functions of custom pytree nodes (and
through them `__init__`, `__post_init__`, ...). So while a call is in flight (a
*window*, opened by the wrappers of `_jitwrap.py`, for the calling thread or task
only) we look at each Python function entered and recognise checker code by its
code object:

- jaxtyping: the `wrapped_fn` closure of `jaxtyping.jaxtyped` (a check when
  `jaxtyping_disable` is off: it binds the arguments and pushes its shape memo) and
  the `wrapped_fn_impl` it calls (the argument and return checks);
- beartype: its generated wrappers, whose filename is `<@beartype(module.qualname) at
  0x...>`;
- typeguard: 2.x's `typechecked` wrappers and `check_argument_types` /
  `check_return_type` / `check_type`, 4.x's `typeguard._functions` checks;
- jaxtyping's `isinstance(x, PyTree[...])` / `isinstance(x, Float[Array, ...])`
  (`__instancecheck__` of their metaclasses, looked up live so that a later patch of
  them is seen too).

How checks nest and are timed is `_track.py`; how each was reached, `_situation.py`.
Checks inside host callbacks are seen through the windows `_callbacks` opens
around each run of a callback, on whatever thread JAX runs it.

Two backends:

- Python 3.11 and older, or when no `sys.monitoring` tool id is free: a profile
  function (`sys.setprofile`, per thread) installed for the duration of the call. A
  cached `jax.jit` call runs no Python, so it pays for the wrapper and two
  `sys.setprofile` calls; wrappers that run Python on every call
  (`equinox.filter_jit`, `flax.nnx.jit`, `jax.pmap`) run it under the profiler,
  about 2-3x slower. JAX's tracing, lowering and compiling of a first call, where
  nothing is flagged, run with the profiler paused (`_tracing`).
- Python 3.12+: `sys.monitoring`, where toggling `sys.setprofile` per call would
  re-instrument the code that runs next (see `start_monitoring`).

We never walk the stack while watching; we walk it only when a check starts.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import importlib
import importlib.util
import inspect
import os
import sys
import time
import weakref
from types import CodeType, FrameType, FunctionType
from typing import Any, Final, NamedTuple

from .._compat._checkers import (
    BEARTYPE_PREFIX,
    nested_code,
    peel,
    typeguard2_wrappers,
)
from .._errors import PRIVATE_API_CHANGED
from ._monitoring import Monitor

__all__ = ["Check", "Described", "describe", "prepare", "qualified"]

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

# id(code) -> kind, filled lazily. Keyed by the object's id: a code object hashes
# its whole contents on every lookup (2 us on 3.11 and 7.6 us on 3.12 for
# jaxtyping's `jaxtyped`, whose constants hold nested code), and we look one up for
# every call on 3.11 and for every checker event on 3.12. `_codes` holds each one,
# so that its id stays its own. Code objects seen inside windows are few (a
# cache-hit call runs little Python); we still bound the table.
_kinds: dict[int, int] = {}
_codes: dict[int, CodeType] = {}
_MAX_KINDS: Final = 50_000
# Checker code objects found by `prepare()`, by id as above (each new code object's
# first start is looked up here, and hashing a module's code takes microseconds),
# held in `_known_codes`.
_known: dict[int, int] = {}
_known_codes: list[CodeType] = []


def _know(codes: dict[CodeType, int]) -> None:
    for code, kind in codes.items():
        _known[id(code)] = kind
        _known_codes.append(code)


_instancecheck_owners: list[type] = []
# jaxtyping's `_MetaPyTree`, once `jaxtyping._pytree_type` is imported.
_pytree_meta: type | None = None
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
# What the guard has seen checked: the first check of each function by each checker
# carries that checker's one-time setup (a function decorated twice, with beartype
# and with typeguard, has a first check with each). Functions are held weakly, with
# the checkers seen; checks that wrap no function (`isinstance`, `check_type`) are
# keyed by what they checked and the checker.
_seen_functions: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
_seen: set[tuple[str, str]] = set()
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
    failed: bool = False
    """The check raised (JAX may have swallowed the error)."""
    rebuild: bool = False
    """JAX rebuilding a tree ran it (`_situation.is_rebuild`)."""
    hook: str | None = None
    """The packages of the jaxtyping import hook that instrumented the checked
    function's module (`--jaxtyping-packages=...`), if one did."""
    cls: type | None = None
    """The class a constructor check built."""


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


def _jaxtyping_codes() -> None:
    """jaxtyping's checker code: its `jaxtyped` wrappers and the `__instancecheck__`
    of `PyTree[...]` and the array types."""
    from jaxtyping import _decorator

    from .._compat._versions import installed

    impl = nested_code(_decorator.jaxtyped.__code__, "wrapped_fn_impl")
    if impl is None:
        raise _changed(
            "jaxtyping._decorator.jaxtyped (its nested `wrapped_fn_impl`, which runs "
            "each check)",
            "jaxtyping",
            installed("jaxtyping"),
        )
    codes = {impl: _JAXTYPING}
    # The new-style `wrapped_fn` around it binds the arguments and pushes the shape
    # memo before calling it: that is the check's own time too (we start the check
    # there). Without it (another jaxtyping), checks start at `wrapped_fn_impl`.
    wrapper = _new_style_wrapper(_decorator.jaxtyped.__code__)
    if wrapper is not None:
        codes[wrapper] = _JAXTYPING
    _know(codes)
    _instancecheck(
        importlib.import_module("jaxtyping._array_types"), "_MetaAbstractArray"
    )


def _pytree_codes() -> None:
    """`isinstance(x, PyTree[...])`'s code (jaxtyping imports it, and JAX with it,
    only when a program first uses `PyTree`)."""
    global _pytree_meta
    _pytree_meta = _instancecheck(
        importlib.import_module("jaxtyping._pytree_type"), "_MetaPyTree"
    )


def _instancecheck(module: Any, name: str) -> type:
    """Make `module.name.__instancecheck__` checker code: `_ISINSTANCE`."""
    from .._compat._versions import installed

    owner = getattr(module, name, None)
    if not isinstance(owner, type) or "__instancecheck__" not in vars(owner):
        raise _changed(
            f"{module.__name__}.{name}.__instancecheck__",
            "jaxtyping",
            installed("jaxtyping"),
        )
    if owner not in _instancecheck_owners:
        _instancecheck_owners.append(owner)
    _instancecheck_files.add(getattr(module, "__file__", None) or "")
    return owner


def _typeguard_codes() -> None:
    """typeguard's checker code: 2.x's wrappers and the functions users call
    directly, 4.x's `typeguard._functions` checks."""
    global _typeguard_suppression
    import typeguard

    from .._compat._versions import installed

    if hasattr(typeguard, "TypeCheckMemo"):  # 4.x: instrumented code calls these
        from typeguard import (
            _functions,  # pyright: ignore[reportAttributeAccessIssue]
            _suppression,  # pyright: ignore[reportAttributeAccessIssue]
        )

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
            getattr(fn, "__name__", "").startswith("check_argument") for fn in sources
        ):
            raise _changed(
                "typeguard._functions.check_argument_types*",
                "typeguard",
                installed("typeguard"),
            )
        _typeguard_suppression = _suppression
    else:  # 2.x: wrappers, and the functions users call directly
        sources = [getattr(typeguard, n, None) for n in _TYPEGUARD_FUNCTIONS]
        wrappers = typeguard2_wrappers()
        if not wrappers:
            raise _changed(
                "typeguard.typechecked (its nested `wrapper`)",
                "typeguard",
                installed("typeguard"),
            )
        _know(dict.fromkeys(wrappers, _TYPEGUARD))
    for fn in sources:
        code = getattr(fn, "__code__", None)
        if code is not None:
            _know({code: _TYPEGUARD})


def _beartype_codes() -> None:
    """beartype's: its generated wrappers are named `<@beartype(...) at 0x...>` (we
    check that this still holds), and the `__setattr__` it puts on a dataclass."""
    from beartype import beartype

    from .._compat._versions import installed

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
        return
    setattr_code = nested_code(
        decortypepep557.beartype_pep557_dataclass.__code__,
        "check_pep557_dataclass_field",
    )
    if setattr_code is not None:
        _know({setattr_code: _BEARTYPE})


# What to read of each library, once it is imported (`_jitwrap` asks, at start for
# those already imported and then right after each import): importing a checker or
# JAX ourselves would run its import before the program's own configuration
# (`JAX_ENABLE_X64`, `JAXTYPING_DISABLE`, set after `runtime_checks(...)`).
def _jax_state() -> None:
    global _is_tracing
    from .._compat._jax import make_is_tracing

    _is_tracing = make_is_tracing()


PREPARE: Final = {
    "jax": _jax_state,
    "jaxtyping": _jaxtyping_codes,
    "jaxtyping._pytree_type": _pytree_codes,
    "typeguard": _typeguard_codes,
    "beartype": _beartype_codes,
}


def _new_style_wrapper(code: CodeType) -> CodeType | None:
    """The code of jaxtyping's new-style `wrapped_fn` (the one that calls
    `wrapped_fn_impl`), defined inside `code`."""
    for const in code.co_consts:
        if isinstance(const, CodeType):
            if const.co_name == "wrapped_fn" and "wrapped_fn_impl" in const.co_freevars:
                return const
            found = _new_style_wrapper(const)
            if found is not None:
                return found
    return None


def package_dirs(names: tuple[str, ...]) -> tuple[str, ...]:
    """The directories of the packages `names` (found without importing them)."""
    dirs: list[str] = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(os.path.join(p, "") for p in spec.submodule_search_locations)
    return tuple(dirs)


CHECKERS: Final = ("jaxtyping", "beartype", "typeguard")
# (By path: the cache's module imports jax, and this one must not.)
_OURS: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PYTREE_CACHE_FILE: Final = os.path.join(_OURS, "_cache", "_pytree.py")
_JAXTYPING_COMPAT_FILE: Final = os.path.join(_OURS, "_compat", "_jaxtyping.py")
_checker_dirs: tuple[str, ...] = ()


def _package_dirs() -> tuple[str, ...]:
    # typecheck_guard itself, and the checkers too: a jitted function called from a
    # checked function's body is called from jaxtyping's wrapper (`out = fn(*args,
    # **kwargs)`), whose line is no call site of the user's.
    return (
        os.path.join(_OURS, ""),
        *package_dirs(("jax", "jaxlib", "equinox", "flax", *CHECKERS)),
    )


def no_check_of_the_programs(frame: FrameType) -> bool:
    """Whether the `isinstance(x, PyTree[...])` starting at `frame` (outside any
    check) is not one of the program's checks: a checker probing a hint while it
    decorates (beartype asks `isinstance(None, hint)` to see whether the hint is
    isinstanceable), or the one-time canary check through which `typecheck_guard`
    verifies the jaxtyping internals its PyTree cache models. The profiler counts
    the first kind apart (`setup`); neither is a check the program runs."""
    return in_canary(frame) or probed_by_checker(frame)


def probed_by_checker(frame: FrameType) -> bool:
    """Whether the `isinstance(x, PyTree[...])` starting at `frame` (outside any
    check) is called by a checker's own code: a probe while it decorates. The PyTree
    cache (`_cache/_pytree.py`) stands between a checker and jaxtyping's
    `__instancecheck__`: the checker is its caller."""
    caller = frame.f_back
    while caller is not None and caller.f_code.co_filename == _PYTREE_CACHE_FILE:
        caller = caller.f_back
    return caller is not None and caller.f_code.co_filename.startswith(_checker_dirs)


def in_canary(frame: FrameType) -> bool:
    """Whether the check starting at `frame` is part of `typecheck_guard`'s canary
    (`_compat/_jaxtyping._canary`, run once per process): its own frame is a few
    frames up, with jaxtyping's between."""
    caller = frame.f_back
    for _ in range(6):
        if caller is None:
            return False
        if caller.f_code.co_filename == _JAXTYPING_COMPAT_FILE:
            return True
        caller = caller.f_back
    return False


def prepare() -> None:
    """Start afresh: no library's checker code known yet (`PREPARE` reads each, as
    it is imported). Called when the guard is switched on; imports nothing."""
    global _is_tracing, _library_dirs, _guard_code, _typeguard_suppression
    global _checker_dirs
    global _pytree_meta
    from .._unflatten import _guards

    _guard_code = _guards._decide.__code__
    _typeguard_suppression = None
    _is_tracing = None
    _library_dirs = _package_dirs()
    _checker_dirs = package_dirs(CHECKERS)
    _known.clear()
    _known_codes.clear()
    _instancecheck_owners.clear()
    _instancecheck_files.clear()
    _pytree_meta = None
    _clear_kinds()


def _kind_of_code(code: CodeType) -> int:
    kind = _known.get(id(code))
    if kind is not None:
        return kind
    if code.co_filename.startswith(BEARTYPE_PREFIX) and code.co_name != "<module>":
        # `<module>` is beartype executing the source of a wrapper it is generating
        # (decoration, not a check): jaxtyping < 0.3 decorates a fresh function on
        # every construction of a dataclass it checks.
        return _BEARTYPE
    if code.co_name == "__instancecheck__" and code.co_filename in _instancecheck_files:
        return _ISINSTANCE
    # (A loop, not `any(...)`: every code object's first start comes here.)
    for owner in _instancecheck_owners:
        if getattr(vars(owner).get("__instancecheck__"), "__code__", None) is code:
            return _ISINSTANCE
    return _PLAIN


def _remember(code: CodeType, kind: int) -> None:
    """Memoise `kind` for `code` (bounded: a program that makes code objects without
    end must not grow the table without end). The profiler keeps its own."""
    if len(_kinds) >= _MAX_KINDS:
        _clear_kinds()
    _kinds[id(code)] = kind
    _codes[id(code)] = code


def _clear_kinds() -> None:
    _kinds.clear()
    _codes.clear()


def kind_of(code: CodeType) -> int | None:
    """What `code` was found to be, if it was looked at."""
    return _kinds.get(id(code))


# Checker code every function a checker checks runs (typeguard's `wrapper`,
# jaxtyping's `wrapped_fn`): never one check's body, even where a check's body is
# a function that checker checks again (`@jaxtyped(typechecker=typechecked)` over
# `@typechecked`). Watched as a body, each of its runs would start a body, the
# stubs jaxtyping checks arguments with included. (beartype makes a wrapper of its
# own for each function.)
SHARED_CHECKER_CODE: Final = frozenset({_JAXTYPING, _TYPEGUARD})


def body_code(code: CodeType) -> bool:
    """Whether `code`, the code of a check's checked function, can be watched as
    that check's body (see `SHARED_CHECKER_CODE`)."""
    kind = _kinds.get(id(code))
    if kind is None:
        kind = _kind_of_code(code)
    return kind not in SHARED_CHECKER_CODE


def _classify(code: CodeType) -> int:
    kind = _kind_of_code(code)
    _remember(code, kind)
    return kind


def qualified(obj: Any) -> str:
    """`module.qualname` of a function or class; `functools.partial(module.f)` for
    a partial and `module.Class(...)` for an instance (their reprs carry memory
    addresses, which would make every run's names differ)."""
    if isinstance(obj, functools.partial):
        return f"functools.partial({qualified(obj.func)})"
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(qualname, str):
        # An instance (an `equinox.Module` jitted as a function): its class, not its
        # repr, which can run to pages and carries memory addresses.
        return f"{qualified(type(obj))}(...)" if obj is not None else "None"
    module = getattr(obj, "__module__", None)
    return f"{module}.{qualname}" if module else qualname


def _function_of(frame: FrameType | None) -> str:
    if frame is None:
        return "<unknown>"
    code = frame.f_code
    module = frame.f_globals.get("__name__")
    qualname = getattr(code, "co_qualname", code.co_name)
    return f"{module}.{qualname}" if module else qualname


# Whether jaxtyping checks dataclasses through `_check_dataclass_annotations` (< 0.3),
# once `jaxtyping._decorator` is imported.
_dataclass_checks: bool | None = None


def _dataclass_init(frame: FrameType) -> str | None:
    """`Cls.__init__` when this check is jaxtyping < 0.3's check of a dataclass's
    fields: it runs after `__init__`, through a function it generates per
    construction and names after the class (`_check_dataclass_annotations`).
    jaxtyping 0.3 has no such function: then no stack to walk, on every check."""
    global _dataclass_checks
    if not _dataclass_checks:
        if _dataclass_checks is False:  # read once (a miss raises inside `hasattr`)
            return None
        decorator = sys.modules.get("jaxtyping._decorator")
        if decorator is None:
            return None
        _dataclass_checks = hasattr(decorator, "_check_dataclass_annotations")
        if not _dataclass_checks:
            return None
    caller = frame.f_back
    for _ in range(4):
        if caller is None:
            return None
        if (
            caller.f_code.co_name == "_check_dataclass_annotations"
            and caller.f_globals.get("__name__") == "jaxtyping._decorator"
        ):
            cls = type(caller.f_locals.get("self"))
            return f"{qualified(cls)}.__init__"
        caller = caller.f_back
    return None


def is_pytree_check(code: CodeType) -> bool:
    """Whether `code` is jaxtyping's `isinstance(x, PyTree[...])`."""
    owner = _pytree_meta
    if owner is None:
        return False
    if code.co_filename == getattr(sys.modules.get(owner.__module__), "__file__", None):
        return True
    method = vars(owner).get("__instancecheck__")
    return getattr(method, "__code__", None) is code


def _has_pytree(annotation: Any, depth: int = 0) -> bool:
    import typing

    owner = _pytree_meta
    if owner is not None and isinstance(annotation, owner):
        return True
    if depth > 8:
        return False
    return any(_has_pytree(a, depth + 1) for a in typing.get_args(annotation))


def _cells(fn: Any) -> dict[str, Any]:
    """A closure's cells by free-variable name."""
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None) or ()
    if code is None:
        return {}
    return dict(zip(code.co_freevars, closure, strict=False))


def unhooked(value: Any) -> Any:
    """`value`, or what it stands for when it is a stand-in of ours (the guard's
    `_entries._Stub` in a jaxtyping closure: jaxtyping's stub)."""
    return getattr(value, "__typecheck_guard_original__", value)


def _cell_value(cells: dict[str, Any], name: str) -> Any:
    try:
        return cells[name].cell_contents
    except (KeyError, ValueError):
        return None


_jaxtyping_infos: weakref.WeakKeyDictionary[Any, tuple[str, bool]] = (
    weakref.WeakKeyDictionary()
)


def _jaxtyping_info(param_fn: Any, full_fn: Any, signature: Any) -> tuple[str, bool]:
    """For a check by jaxtyping: the checkers (jaxtyping and the typechecker it was
    given) and whether a `PyTree[...]` annotation is checked, read once per checked
    function from what jaxtyping built when it decorated it (`param_fn` and
    `full_fn`, the typechecked stubs it checks the arguments and the return value
    with, and the full signature). We name
    them from there rather than from the checkers entered inside, which the
    profiler doesn't watch on its fast path: the same check has one name in every
    report."""
    try:
        return _jaxtyping_infos[param_fn]
    except (KeyError, TypeError):
        pass
    checkers = ["jaxtyping"]
    # Both stubs: a checker may return a stub with nothing to check undecorated
    # (beartype does, for arguments without annotations).
    for stub in (param_fn, full_fn):
        layer, depth = stub, 0
        while layer is not None and depth < 16:
            # A checker's layer by its code (typeguard 2's `wrapper` is renamed by
            # `functools.wraps`), else as `peel` knows it.
            code = getattr(layer, "__code__", None)
            kind = _kind_of_code(code) if code is not None else _PLAIN
            name = _CHECKER_NAMES[kind] if kind in _CHECKER_NAMES else None
            for found in (name, *peel(layer).checkers[:1]):
                if found is not None and found not in checkers:
                    checkers.append(found)
            layer, depth = getattr(layer, "__wrapped__", None), depth + 1
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


# What `describe` makes of a check by jaxtyping's new-style wrapper (all but the
# frame's locals), by the id of its `wrapped_fn_impl`, whose cells jaxtyping set
# when it decorated the function: `(weak reference to wrapped_fn_impl, weak
# reference to the checked function, checked, checker, what, whether the function
# is the body, pytree)`: nothing that keeps either alive. Under jaxtyping's import hook every call is a check, and working it out
# again cost most of `describe`. An entry counts only while both references still
# point to the objects the check has (an id is reused once its object is gone).
_impl_described: dict[int, tuple[Any, ...]] = {}
_MAX_IMPLS: Final = 20_000


def _describe_impl(impl: Any, fn: Any) -> tuple[Any, ...]:
    cells = _cells(impl)
    checker, pytree = _jaxtyping_info(
        unhooked(_cell_value(cells, "param_fn")),
        unhooked(_cell_value(cells, "full_fn")),
        _cell_value(cells, "full_signature"),
    )
    checked = qualified(fn)
    known = (
        _dead,
        _dead,
        checked,
        checker,
        _kind_of(checked, _JAXTYPING),
        isinstance(getattr(fn, "__code__", None), CodeType),
        pytree,
    )
    try:
        known = (weakref.ref(impl), weakref.ref(fn), *known[2:])
    except TypeError:  # no weak reference to one of them: worked out every time
        return known
    if len(_impl_described) >= _MAX_IMPLS:
        _impl_described.clear()
    _impl_described[id(impl)] = known
    return known


def _dead() -> None:
    return None


class Described(NamedTuple):
    """What a check that starts checks. Read once per check, when it starts."""

    checked: str
    """`module.Class.__init__`, `module.function`, `isinstance(..., PyTree) in
    module.function`."""
    checker: str
    """`"jaxtyping with beartype"`, `"beartype"`, `"typeguard"`, ..."""
    what: str
    """`"constructor"`, `"function"` or `"isinstance"` (`_kind_of`)."""
    body: Any
    """The checked function, which the checker calls once the arguments passed: its
    run is not the check's time. `None` for `isinstance` and `check_type`."""
    static: bool
    """`checker` is final (read from the checked function's layers)."""
    pytree: bool
    """A `PyTree[...]` annotation is checked."""
    frame_locals: dict[str, Any]
    """The checker frame's locals (jaxtyping's: `fn`, `wrapped_fn_impl`, ...)."""
    unsure: bool = False
    """Whether jaxtyping checks could not be told without running the program's
    code (`_jaxtyping_switched_off`): the check is one if jaxtyping began it
    (`never_began`)."""


def _jaxtyping_switched_off(local: dict[str, Any]) -> bool | None:
    """Whether jaxtyping's new-style `wrapped_fn`, just entered, will call the
    function without checking it (its own test, read the same way); `None` when we
    can't tell without running the program's code, which jaxtyping is about to run
    (`_no_type_check`)."""
    jaxtyping = sys.modules.get("jaxtyping")
    if jaxtyping is not None and getattr(jaxtyping.config, "jaxtyping_disable", False):
        return True
    first = _no_type_check(local.get("fn"))
    if first:
        return True
    holder = local.get("wrapped_fn_holder")
    try:
        wrapped = holder[0]() if holder else None
    except Exception:
        return None
    second = _no_type_check(wrapped)
    if second:
        return True
    return None if first is None or second is None else False


# The types whose `bool()` runs no code of the program's.
_PLAIN_VALUES: Final = (bool, int, float, str, bytes, type(None))


def _no_type_check(fn: Any) -> bool | None:
    """`bool(getattr(fn, "__no_type_check__", False))`, as jaxtyping reads it, or
    `None` when reading it would run the program's code: a value whose truth is
    its own `__bool__` (or `__len__`), a callable other than a plain function, whose
    attribute a property or `__getattr__` may answer. Reading it twice would run
    that code twice, and it may answer differently (a program's off-switch that
    counts its reads): the check is then known by what jaxtyping did
    (`Open.unsure`). For a stand-in of ours that forwards what it lacks to the
    function it holds (`forwarders`), its `__dict__` and then that function's (its
    `__getattr__` would raise and catch an error per check, and the profiler's
    body hook is in every profiled check's closure)."""
    kind = type(fn)
    if kind is FunctionType:
        own = fn.__dict__
    else:
        held = forwarders.get(kind)
        if held is None:
            return None if fn is not None else False
        own = fn.__dict__
        if type(own) is dict and "__no_type_check__" not in own:
            try:
                inner = getattr(fn, held)
            except AttributeError:  # not set yet (a copy being made)
                return None
            return _no_type_check(inner)
    if type(own) is not dict:
        return None  # a mapping of the program's
    value = own.get("__no_type_check__", False)
    return bool(value) if type(value) in _PLAIN_VALUES else None


# Stand-ins of ours, by type, whose attributes are their own `__dict__`'s and
# then, through `__getattr__`, those of the function they hold in the attribute
# named here (`_profile/_engine._Body`): nothing on their class answers for the
# function (`test_the_body_hook_answers_no_type_check_as_the_function`).
forwarders: dict[type, str] = {}


def never_began(frame: FrameType) -> bool:
    """Whether the check of jaxtyping's wrapper running at `frame`, which raised,
    never began: the call's arguments did not bind to the function's signature, and
    jaxtyping raised Python's `TypeError` before any typecheck ("a non-typechecking
    failure", in its own words), so no check ran, on any backend (the 3.11 default
    only sees a check once jaxtyping pushed its shape memo). Read only for a check
    that failed."""
    code = frame.f_code
    if code.co_name != "wrapped_fn" or "memos" not in code.co_varnames:
        return False
    try:
        return "memos" not in frame.f_locals  # set once the check began
    except Exception:
        return False


def describe(frame: FrameType, kind: int, checks: bool = False) -> Described | None:
    """What the check starting at `frame` (checker code of `kind`) checks, or
    `None` when it checks nothing (jaxtyping's wrapper with its checks switched
    off). `checks`: the checker said it checks (jaxtyping's wrapper called
    `push_shape_memo`, `_entries`), so its off-switches are not read again."""
    code = frame.f_code
    local = frame.f_locals
    static = pytree = unsure = False
    body = None
    if kind == _JAXTYPING:
        if not checks and code.co_name == "wrapped_fn":
            off = _jaxtyping_switched_off(local)
            if off:
                return None
            unsure = off is None
        init = _dataclass_init(frame)
        fn = local.get("fn")
        impl = local.get("wrapped_fn_impl")
        if impl is not None:  # the new-style wrapper: what it calls is in `impl`
            # Known by the function, not a stand-in of ours that holds it (the
            # profiler's body hook, in the cell from its second check on): its row
            # keeps the name it had at its first check, whatever is written
            # through the cell since.
            held = forwarders.get(type(fn))
            function = getattr(fn, held, fn) if held is not None else fn
            known = _impl_described.get(id(impl))
            if known is None or known[0]() is not impl or known[1]() is not function:
                known = _describe_impl(impl, function)
            if init is None:
                return Described(
                    known[2],
                    known[3],
                    known[4],
                    fn if known[5] else None,
                    True,
                    known[6],
                    local,
                    unsure,
                )
            checker, pytree = known[3], known[6]
        else:
            checker, pytree = _jaxtyping_info(
                local.get("param_fn"), local.get("full_fn"), local.get("full_signature")
            )
        checked = init if init is not None else qualified(fn)
        static = True
        body = fn
    elif kind == _BEARTYPE:
        init = _dataclass_init(frame)
        if init is not None:
            checked = init
        elif not code.co_filename.startswith(BEARTYPE_PREFIX):
            # `is_pep557_fields`: the `__setattr__` beartype put on a dataclass.
            owner = type(local.get("self"))
            checked = f"{qualified(owner)}.__setattr__"
        else:
            checked = code.co_filename[len(BEARTYPE_PREFIX) :].rsplit(") at ", 1)[0]
        checker = "beartype"
        body = local.get("__beartype_func")
    elif kind == _ISINSTANCE:
        cls = local.get(code.co_varnames[0]) if code.co_varnames else None
        name = getattr(cls, "__name__", None) or repr(cls)
        checked = f"isinstance(..., {name}) in {_function_of(frame.f_back)}"
        checker = "jaxtyping"
        pytree = is_pytree_check(code)
    else:  # typeguard
        checker = "typeguard"
        if code.co_name in ("wrapper", "async_wrapper"):
            checked = qualified(local.get("python_func", local.get("func")))
            body = local.get("func")
        elif isinstance(local.get("func_name"), str):  # 4.x
            checked = local["func_name"]
        elif code.co_name == "check_type":
            checked = (
                f"check_type(..., {local.get('expected_type')!r}) in "
                f"{_function_of(frame.f_back)}"
            )
        else:
            checked = _function_of(frame.f_back)
    if not isinstance(getattr(body, "__code__", None), CodeType):
        body = None
    return Described(
        checked, checker, _kind_of(checked, kind), body, static, pytree, local, unsure
    )


def _deliberate(frame: FrameType) -> bool:
    """Whether `unflatten_safe`'s guard runs this check to fill its verdict cache.

    The guard's rows 3 to 7 (`_unflatten/_guards._decide`) reach `checked(...)` with
    a verdict `key` bound only on that path (a key of `None` means "can't cache",
    and the check then runs on every call).
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


def _first(checked: str, fn: Any, checker: str) -> bool:
    """Whether this is the first check of `fn` (or of `checked`, for a check that
    wraps no function) by `checker` the guard has seen in this process."""
    try:
        checkers = _seen_functions.get(fn)
        if checkers is None:
            _seen_functions[fn] = {checker}
            return True
    except TypeError:  # `None`, or no weak reference to it
        pass
    else:
        if checker in checkers:
            return False
        checkers.add(checker)
        return True
    key = (checked, checker)
    if key in _seen:
        return False
    if len(_seen) >= _MAX_SEEN:
        _seen.clear()
    _seen.add(key)
    return True


def _watch_body(code: CodeType) -> None:
    """From now on, see `code` start and return: it is a checked function's body."""
    _remember(code, _BODY)
    if monitoring and _monitor.tool is not None and not _monitor.instrument(code):
        # `code` may have answered `DISABLE` to `PY_START` already (plain code, as
        # far as we knew): then switch its events back on.
        _monitor.restart_for(code)


# The `sys.monitoring` backend (Python 3.12+). Toggling `sys.setprofile` around
# every call is cheap on 3.11 but not on 3.12+, where it re-instruments the code
# that runs next (a cache-hit `jax.jit` call became ~7x slower). There, from the
# guard's first window on (`listen`), we keep a `PY_START` callback on all code,
# which answers `DISABLE` for code that is no checker (so that code never calls it
# again) and, for checker code, asks the window of the current thread/task, if any.
# `PY_RETURN` is enabled only on checker code a check opened at (and on bodies);
# `PY_UNWIND` (global-only) ends a check that raised.
monitoring = False
_window: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "typecheck_guard_window", default=None
)
_monitor = Monitor("typecheck_guard")
_TOOL_IDS: Final = (4, 3)
_exit_hook: list[bool] = []  # the ids CPython leaves free (0-2 and 5 are named)


# jaxtyping's new-style `wrapped_fn`, while `_entries` follows its checks in host
# callbacks (set by `_entries.patch`).
entries_wrapper: CodeType | None = None


def _on_start(code: CodeType, offset: int) -> Any:
    # Called for every start of checker code, in every thread, watched or not: a
    # host callback's check (a progress meter's) runs it several times per run, so
    # the common cases make no frame object.
    kind = _kinds.get(id(code))
    if kind is None:
        kind = _kind_of_code(code)
        if kind == _PLAIN:
            return _monitor.disable(code)
        _remember(code, kind)
        # `PY_RETURN` is switched on for checker code only where a check opens at
        # it (`returning`, from `Tracker.started`), and for a body by `_watch_body`:
        # most checker code only ever runs inside a check (jaxtyping's stubs and
        # `wrapped_fn_impl`, an array type's `isinstance`), and its returns would
        # call us for nothing, watched or not, in every thread.
    window = _window.get()
    if window is None:
        return None
    entered = window.entered
    if entered is not None and (
        code is entries_wrapper
        or (entered and entered[-1] is not None and kind != _BODY)
    ):
        # A host callback, where `_entries` follows jaxtyping's checks: this is
        # one's wrapper, or checker code inside one (not in its body).
        return None
    stack = window._stack
    if kind == _BODY:
        # Only the body of the innermost open check, not yet running, is followed
        # (`Tracker.started`): tested without a frame object first.
        top = stack[-1] if stack else None
        if top is None or top.in_body is not None or top.body is not code:
            return None
    elif stack:
        top = stack[-1]
        if top.in_body is None:  # checker code inside a check: part of it
            if kind not in top.known:
                window.inside(top, code, kind)
            return None
    window.started(sys._getframe(1), kind)
    return None


def returning(code: CodeType) -> None:
    """A check opens at a frame of `code` (`Tracker.started`): see it return. On
    the `sys.monitoring` backend, `PY_RETURN` is switched on for `code` if it isn't
    yet, which the running frame's return already calls (CPython instruments the
    code object in place)."""
    if monitoring:
        _monitor.instrument(code)


def _on_return(code: CodeType, offset: int, value: Any) -> None:
    window = _window.get()
    if window is not None:
        waiting = window._waiting
        # Only the frame a window waits for matters: its code first, which needs no
        # frame object.
        if waiting is not None and waiting.f_code is code:
            frame = sys._getframe(1)
            if frame is waiting:
                window.returned(frame, False)


def _on_unwind(code: CodeType, offset: int, exception: BaseException) -> None:
    window = _window.get()
    if window is not None:
        waiting = window._waiting
        if waiting is not None and waiting.f_code is code:
            frame = sys._getframe(1)
            if frame is waiting:
                window.returned(frame, True)


def start_monitoring() -> bool:
    """Switch to the `sys.monitoring` backend, where there is one (3.12+) and a tool
    id is free; `False` means "use `sys.setprofile`"."""
    global monitoring
    if monitoring:
        return True
    # Only checker code stays in `_kinds` on this backend.
    _clear_kinds()
    monitoring = _monitor.start(
        _TOOL_IDS, _on_start, _on_return, _on_unwind, listen=False
    )
    if monitoring and not _exit_hook:
        # `runtime_checks(level)` keeps the guard on for the rest of the process:
        # its events must stop before the interpreter tears our module down.
        atexit.register(stop_monitoring)
        _exit_hook.append(True)
    return monitoring


def listen() -> None:
    """Switch the guard's events on, when a window is about to watch a call (once).
    Until then no check is the guard's to follow, and each start of every other
    code object would call `_on_start` for nothing: under `typecheck-guard
    profile`, which switches the guard's wrappers on but opens no window, that was
    about 0.3 s of a 9 s test suite under jaxtyping's import hook."""
    if not _monitor.listening:
        _monitor.listen()


def stop_monitoring() -> None:
    global monitoring
    if _monitor.tool is None:
        return
    monitoring = False
    _monitor.stop()
    _clear_kinds()


def is_library(filename: str) -> bool:
    return filename.startswith(_library_dirs)


def relative(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive, on Windows
        return filename
    return filename if relative.startswith("..") else relative


def call_site(frame: FrameType | None) -> str:
    """`path:line` of the first frame outside JAX, Equinox, Flax, the checkers and
    us."""
    while frame is not None and (
        is_library(frame.f_code.co_filename)
        or frame.f_code.co_filename.startswith(BEARTYPE_PREFIX)
    ):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{relative(frame.f_code.co_filename)}:{frame.f_lineno}"


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
    return f"{relative(code.co_filename)}:{code.co_firstlineno}"


# Our own watched-call wrappers (`_jitwrap.Jitted` and its pytree subclass), which
# `_jitwrap` sets when it is imported: none exists before.
jitted_types: tuple[type, ...] = ()


def is_filter_jit_wrapper(obj: Any) -> bool:
    """Whether `obj` is an `equinox.filter_jit` wrapper (`equinox._jit._JitWrapper`),
    by its type alone (`isinstance` would read `__class__`, which a module answers
    through its `__getattribute__`, a check of Equinox's under jaxtyping's import
    hook)."""
    cls = type(obj)
    # (`getattr`: some of jaxlib's types have no `__module__`.)
    return (
        getattr(cls, "__module__", None) == "equinox._jit"
        and cls.__name__ == "_JitWrapper"
    )


def filter_jit_function(wrapper: Any) -> Any:
    """The function an `equinox.filter_jit` wrapper (`equinox._jit._JitWrapper`)
    jits, as its `__wrapped__` property puts it back together (Equinox's
    `hashable_combine`: its static and dynamic leaves, unflattened), without running
    any of Equinox's own code: under jaxtyping's import hook every function of
    Equinox is checked, attribute reads of a module included, and those checks are
    not the program's. (Reading them while the profiler opened a check made them
    checks inside its own bookkeeping.) `None` where `wrapper` is not one, or not
    as we know it."""
    if not is_filter_jit_wrapper(wrapper):
        return None
    try:
        fields = object.__getattribute__(wrapper, "__dict__")
        static_leaves, treedef = fields["_static_fun"]
        dynamic_leaves = fields["_dynamic_fun"]
        leaves = [
            d if s is None else s
            for d, s in zip(dynamic_leaves, static_leaves)  # noqa: B905 (as Equinox)
        ]
        return treedef.unflatten(leaves)
    except Exception:  # a name is no place to fail
        return None


def _wrapped(obj: Any) -> Any:
    """`obj.__wrapped__`, or `None`; for an `equinox.filter_jit` wrapper, bare or
    in the profiler's `Jitted`, what its property gives, read without running it
    (`filter_jit_function`)."""
    if type(obj) in jitted_types:
        try:
            user = filter_jit_function(
                object.__getattribute__(obj, "_typecheck_guard_jitted")
            )
        except AttributeError:
            user = None
    else:
        user = filter_jit_function(obj)
    return user if user is not None else getattr(obj, "__wrapped__", None)


def describe_jitted(transform: str, fun: Any, caller: FrameType | None = None) -> str:
    """`jax.jit(module.step)`: the factory and the user's function. `caller` is the
    frame that called the jitted callable, if known."""
    if inspect.ismethod(fun):
        fun = fun.__func__
    inner = fun
    for _ in range(16):  # under checker layers (jaxtyping's import hook adds them)
        below = _wrapped(inner)
        if not below:
            break
        inner = below
    code = getattr(inner, "__code__", None)
    if (
        code is not None
        and code.co_name == "fun_wrapped"
        and getattr(inner, "__module__", None) == "equinox._jit"
    ):
        # `equinox.filter_jit` jits a function of its own, named after the user's
        # (`__qualname__` only: its `__module__` stays `equinox._jit`). The user's
        # function is under the `_JitWrapper` whose `_call` called us (`jit_wrapper`
        # from Equinox 0.12 on, `self` before).
        local = caller.f_locals if caller is not None else {}
        wrapper = local.get("jit_wrapper", local.get("self"))
        user = filter_jit_function(wrapper) if wrapper is not None else None
        name = qualified(user) if user is not None else fun.__qualname__
        return f"equinox.filter_jit({name})"
    return f"{transform}({qualified(fun)})"
