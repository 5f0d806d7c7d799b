"""How a check was reached: the one classification the runtime guard and the profiler
share, so that the two count the same test the same way.

Every check is filed in one *window*, the stretch of the program it runs in, which
says how often it runs and what removes it:

| window | what ran the check | how often | what removes it |
| --- | --- | --- | --- |
| `dispatch` | a call of a jitted function, outside tracing: JAX rebuilding its output (or a library's dispatch code) | every call | `install()` / `unflatten_safe` for a rebuild |
| `compile` | JAX's tree code while it traces or compiles a jitted call: rebuilding the inputs from tracers, the outputs with placeholder leaves for their key paths, re-flattening them for its fast path | once per compilation | `install()` / `unflatten_safe` for a rebuild |
| `tree` | JAX rebuilding a tree in a tree operation (`jax.tree.map`, ...) | every operation | `install()` / `unflatten_safe` |
| `callback` | the function of a host callback | every run of the callback | moving the check |
| `trace` | your code, while JAX traces it | once per compilation | nothing: the check you asked for |
| `construction` | your code building a checked object | every construction | nothing |
| `eager` | your code calling a checked function | every call | the PyTree cache, for `PyTree[...]` |

A rebuild is a rebuild whether or not JAX is tracing: what tells the windows apart
is when it runs, and what removes it is the same. We decide the window once, when a
check starts, from the Python stack below it (`situation`): JAX's tracing state, our
jitted-call wrappers (`_jitwrap.Jitted`, `unflatten_safe(jitted)`), the host-callback
trampolines we wrap (`_callbacks`), the two functions of a jitted call's first run
that unflatten once per compilation, and the caller of the checked function
(`is_rebuild`). The runtime guard flags `dispatch` (and `callback` when asked); the
profiler reports every window.
"""

from __future__ import annotations

import functools
import os
import sys
import weakref
from types import CodeType, FrameType
from typing import Any, Final, NamedTuple

from .._compat._checkers import BEARTYPE_PREFIX
from .._unflatten import _frames
from .._unflatten._guards import unflattening
from .._unflatten._own import own_codes
from .._unflatten._records import CONSTRUCTOR_NAMES
from . import _callee, _detect

__all__ = [
    "WHENS",
    "Situation",
    "Walk",
    "built_class",
    "caller_of",
    "is_rebuild",
    "register_callback",
    "register_jitted",
    "situation",
    "walk",
]

WHENS: Final = (
    "dispatch",
    "compile",
    "tree",
    "callback",
    "trace",
    "construction",
    "eager",
)

# The functions of a jitted call's first (cache-miss) call that unflatten its inputs
# or outputs once per compilation, outside tracing proper: `jax.jit` computes the key
# paths of its inputs and outputs (`_infer_params`; the outputs are rebuilt with
# placeholder leaves, which a typechecked class fails on, and JAX swallows the
# error) and re-flattens the outputs for its C++ fast path (`_get_fastpath_data`).
# (The output unflatten of that first call, `_run_python_pjit`, is the one every
# call repeats: `dispatch`.)
_ONCE_PER_COMPILATION: Final = frozenset({"_infer_params", "_get_fastpath_data"})


class Situation(NamedTuple):
    """How one check was reached."""

    when: str
    """The window (`WHENS`)."""
    jitted: str | None
    """The jitted function (`jax.jit(module.step)`) in `dispatch`, `compile` and
    `trace`, when one of our wrappers made it; the callback
    (`jax.pure_callback(module.f)`) in `callback`."""
    rebuild: bool
    """Whether JAX rebuilding a tree ran the check (`is_rebuild`)."""
    made_at: str | None = None
    """`path:line` where the user's code made the jitted callable, if we saw it."""


# Code objects that mark a frame: our jitted-call wrappers' `__call__` (-> "jitted"
# or "unflatten_safe") and the host-callback trampoline (`_watch.watch_callback`),
# by id: `situation` looks up every frame of the stack, and a code object hashes its
# whole contents on every lookup (microseconds for one with nested code). The values
# hold the codes, so that their ids stay theirs.
_jitted_codes: dict[int, tuple[CodeType, str]] = {}
_callback_codes: dict[int, CodeType] = {}


def register_jitted(code: CodeType, what: str) -> None:
    """`code` is the `__call__` of a wrapper around a jitted callable, whose `self`
    names it (`_jitwrap.Jitted`: "jitted")."""
    _jitted_codes[id(code)] = (code, what)
    _marks.pop(id(code), None)


def register_callback(code: CodeType) -> None:
    """`code` runs a host callback, with `primitive` and `callback` in its locals
    (`_watch.watch_callback`)."""
    _callback_codes[id(code)] = code
    _marks.pop(id(code), None)


# What a frame of each code object tells `situation`, by the code's id: nothing (0,
# nearly every frame of a stack), one of our jitted-call wrappers, the host-callback
# trampoline, a module where JAX runs host callbacks, or one of the functions of a
# jitted call's first run (`_ONCE_PER_COMPILATION`). Read once per code object, so
# that walking a stack costs one lookup a frame: under jaxtyping's import hook in a
# test suite every call is a check, 60 frames or more above the test runner's. The
# values' codes are kept in `_marked`, so that their ids stay theirs.
_JITTED, _CALLBACK, _IN_CALLBACK_FILE, _COMPILING = 1, 2, 3, 4
_marks: dict[int, int] = {}
_marked: dict[int, CodeType] = {}
_MAX_MARKS: Final = 100_000


def _mark(code: CodeType, dirs: _Dirs) -> int:
    if id(code) in _jitted_codes:
        mark = _JITTED
    elif id(code) in _callback_codes:
        mark = _CALLBACK
    elif code.co_filename in dirs.callback_files:
        mark = _IN_CALLBACK_FILE
    elif code.co_name in _ONCE_PER_COMPILATION and code.co_filename.startswith(
        dirs.jax
    ):
        mark = _COMPILING
    else:
        mark = 0
    if len(_marks) >= _MAX_MARKS:  # a program that makes code without end
        _marks.clear()
        _marked.clear()
    _marks[id(code)] = mark
    _marked[id(code)] = code
    return mark


class _Dirs(NamedTuple):
    skip: tuple[str, ...]  # checker libraries and us: not "the caller"
    jax: tuple[str, ...]
    callback_files: frozenset[str]


@functools.cache
def _dirs() -> _Dirs:
    import importlib.util

    from .._unflatten import _safe

    register_jitted(_safe._GuardedCall.__call__.__code__, "unflatten_safe")
    ours = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
    # Where JAX runs host callbacks without our trampoline in between (a callback
    # compiled before the guard's patches): private modules, so a move only costs
    # us the label. By path: a check may start before JAX is imported, and we
    # import nothing of a program's libraries ourselves.
    spec = importlib.util.find_spec("jax")
    roots = (spec.submodule_search_locations or []) if spec is not None else []
    files = [
        os.path.join(root, "_src", name)
        for root in roots
        for name in ("callback.py", "debugging.py")
    ]
    return _Dirs(
        skip=(*_detect.package_dirs(_detect.CHECKERS), ours),
        jax=_detect.package_dirs(("jax", "jaxlib")),
        callback_files=frozenset(files),
    )


def _instance(frame: FrameType) -> Any:
    """The first argument of the checked call at `frame` (`self`, for a
    constructor)."""
    local = frame.f_locals
    args = local.get("args")
    if isinstance(args, tuple) and args:
        return args[0]
    code = frame.f_code
    if code.co_argcount:
        return local.get(code.co_varnames[0])
    return None


def built_class(frame: FrameType, what: str) -> type | None:
    """The class of the instance a constructor check at `frame` builds (`None`
    for other checks)."""
    if what != "constructor":
        return None
    instance = _instance(frame)
    return type(instance) if instance is not None else None


_CONSTRUCTION: Final = frozenset({"__init__", "__post_init__"})


def caller_of(frame: FrameType, what: str) -> FrameType | None:
    """The frame that made the checked call at `frame`: the first frame below it that
    is neither checker code nor ours (a dispatch frame of ours counts: it is where
    JAX's C++ dispatch was called from) and, for a constructor, not the object's own
    `__init__` / `__post_init__` (a dataclass `__init__` calls its checked
    `__post_init__`)."""
    skip = _dirs().skip
    instance = _instance(frame) if what == "constructor" else None
    f = frame.f_back
    while f is not None:
        code = f.f_code
        if _frames.kind(code) != _frames.NONE:
            return f
        filename = code.co_filename
        if filename.startswith(skip) or filename.startswith(BEARTYPE_PREFIX):
            f = f.f_back
            continue
        if (
            instance is not None
            and code.co_name in _CONSTRUCTION
            and code.co_argcount
            and f.f_locals.get(code.co_varnames[0]) is instance
        ):
            f = f.f_back
            continue
        return f
    return None


def jitted_call_below(
    frame: FrameType | None,
) -> tuple[FrameType | None, Any, tuple[FrameType, str, Any] | None]:
    """Where JAX was entered from, for a check whose caller is `frame` (a jitted
    callable made before `with profile():`, which JAX's C++ calls, leaves no frame
    of ours to see): from `frame` down through the frames of JAX, Equinox and Flax
    (and checkers', and ours) to the first frame of the program's, what each is
    calling (`_callee`). Returns that first program frame (`None` if there is
    none), what it calls, and the jitted call made from these frames (`(frame,
    factory, the user's function)`, `_callee.jitted_call`): the outermost one, the
    program's own if it calls one (`jax.tree.map(step, xs)` calls `step` from
    JAX's own code; `equinox.filter_jit` calls a `jax.jit` of its own), else
    `None`."""
    libraries = _library_dirs()
    found: tuple[FrameType, str, Any] | None = None
    while frame is not None:
        called = _callee.callee(frame)
        jitted = _callee.jitted_call(called) if called is not None else None
        if jitted is not None:
            found = (frame, *jitted)
        if not frame.f_code.co_filename.startswith(libraries):
            return frame, called, found
        frame = frame.f_back
    return None, None, found


@functools.cache
def _library_dirs() -> tuple[str, ...]:
    """The code a jitted call runs of its own (JAX's, Equinox's and Flax's jitted
    callables, their dispatch and rebuilds), and checkers' and ours."""
    return (
        *_dirs().skip,
        *_detect.package_dirs(("jax", "jaxlib", "equinox", "flax")),
        BEARTYPE_PREFIX,
        "<generated_",
    )


# The innermost code of every registered Python unflatten function, refreshed when
# the registry grows.
_unflatten_codes: dict[int, CodeType] = {}  # by id, as above
# By the id of a registered unflatten's code: the unflatten functions registered
# with it and their classes (one code, many closures: a lambda made per class), and
# once asked for, the codes of their own functions (`_unflatten._own.own_codes`):
# a frame of that code may run any of them.
_unflatten_sources: dict[int, list[tuple[Any, Any]]] = {}
_unflatten_own: dict[int, dict[int, Any]] = {}
_registry_seen = -1
# JAX's registry of custom nodes (the dict itself), once JAX is imported: read on
# every check the profiler files, so not imported again each time.
_registry: dict[type, Any] | None = None


def _innermost_code(fn: Any) -> CodeType | None:
    while isinstance(fn, functools.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    for _ in range(16):  # peel checker layers (`__wrapped__`) down to the function
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            break
        fn = getattr(inner, "__func__", inner)
    code = getattr(fn, "__code__", None)
    return code if isinstance(code, CodeType) else None


def registered_unflatten(code: CodeType) -> bool:
    """Whether `code` is a registered class's Python unflatten function (under its
    checker layers)."""
    global _registry_seen, _registry
    if _registry is None:
        if "jax" not in sys.modules:  # nothing is registered, and we import nothing
            return False
        from .._compat._jax import registry

        _registry = registry()
    if len(_registry) != _registry_seen:
        from .._compat._jax import registry_items

        items = registry_items()
        for cls, entry in items:
            from_iter = getattr(entry, "from_iter", None)
            found = _innermost_code(from_iter)
            if found is not None:
                _unflatten_codes[id(found)] = found
                sources = _unflatten_sources.setdefault(id(found), [])
                if not any(fn is from_iter for fn, _ in sources):
                    sources.append((from_iter, cls))
                    _unflatten_own.pop(id(found), None)
        _registry_seen = len(items)
    return id(code) in _unflatten_codes


def is_rebuild(
    cls: type | None, what: str, caller: FrameType | None, body: Any = None
) -> bool:
    """Is this check JAX rebuilding a tree (unflattening a registered class)?

    The one question whose answer decides a check's fix: `install()` and
    `unflatten_safe` remove exactly these. The rules, first decisive:

    1. `install()`'s own evidence, "JAX is unflattening `cls`": the frame of the
       wrapper it registers in place of the class's unflatten function, above the
       constructor's caller with no other constructor in between
       (`_unflatten._guards.unflattening`): only JAX calls what its registry holds,
       so such a check of `cls`'s constructor is a rebuild. (One that still runs
       there is a check `install()` could not skip: a checker under a decorator that
       is not one.)
    2. A constructor (`__init__` / `__post_init__`) whose caller is JAX's tree code
       or the frame that called a jitted function's C++ dispatch
       (`_unflatten._frames`, the facts `unflatten_safe` decides by): the C++
       unflatten leaves no frame of its own, so the constructor's caller is the last
       Python frame before it.
    3. A check whose caller is a registered Python unflatten function (a
       `tree_unflatten` that calls `cls(...)`, or checks a `PyTree[...]` itself), or
       a constructor called by a helper of one (`registered_unflatten_frame`).
    4. A checked function that *is* a registered unflatten function, called by JAX's
       tree code or from a jitted call's dispatch.

    Anything else is not: `jax.tree.map(MyClass, xs)` is JAX calling your class as a
    function, a construction. A C++ unflatten of a jitted call that none of our
    wrappers saw looks like your code calling the class: rule 2 cannot see it, and
    the profiler says so rather than guess (`_profile/_engine.py`).
    """
    if caller is None:
        return False
    if what == "constructor" and cls is not None and unflattening(caller) is cls:
        return True
    code = caller.f_code
    kind = _frames.kind(code)
    if what == "constructor" and kind != _frames.NONE:
        return True
    if registered_unflatten(code):
        return True
    if what == "constructor" and registered_unflatten_frame(caller) is not None:
        return True
    if kind != _frames.NONE and body is not None:
        body_code = _innermost_code(body)
        return body_code is not None and registered_unflatten(body_code)
    return False


def registered_unflatten_frame(frame: FrameType | None) -> FrameType | None:
    """The frame of the registered Python unflatten function that `frame` runs, or
    runs a helper of (a factory its `tree_unflatten` calls to build the instance),
    or `None`: that unflatten's frame is `frame` or at most `_HELPER_DEPTH` frames
    above, and every frame in between runs its own code
    (`_unflatten._own.own_codes`, the rule `install()`'s evidence uses), none a
    constructor of its own."""

    between: list[CodeType] = []
    for _ in range(_HELPER_DEPTH):
        if frame is None:
            return None
        code = frame.f_code
        if registered_unflatten(code):
            if not between:
                return frame
            own = _unflatten_own.get(id(code))
            if own is None:
                own = {}
                for fn, cls in _unflatten_sources.get(id(code), ()):
                    own.update(own_codes(fn, cls))
                _unflatten_own[id(code)] = own
            return frame if all(own.get(id(c)) is c for c in between) else None
        if code.co_name in CONSTRUCTOR_NAMES or _frames.kind(code) != _frames.NONE:
            return None
        between.append(code)
        frame = frame.f_back
    return None


# As `install()`'s evidence looks up (`_unflatten._guards._DEPTH`).
_HELPER_DEPTH: Final = 8


def _jit_disabled() -> bool:
    jax = sys.modules.get("jax")
    return bool(jax is not None and jax.config.jax_disable_jit)  # pyright: ignore[reportAttributeAccessIssue]


def jitted_name(frame: FrameType, what: str) -> str:
    """The name of the jitted callable whose wrapper's `__call__` runs at `frame`.
    Every check while JAX traces the call asks it (thousands, under jaxtyping's
    import hook): the names of the calls in flight are kept, by the frame itself
    (whose `self` and caller don't change while it runs), until a wrapped call
    ends (`_jitwrap.Jitted.__call__` clears them: no frame is kept past its call)."""
    if what != "jitted":  # `unflatten_safe(jitted)`'s proxy: no end of ours to see
        return _jitted_name(frame, what)
    known = jitted_names.get(id(frame))
    if known is not None and known[0] is frame:
        return known[1]
    name = _jitted_name(frame, what)
    if len(jitted_names) >= _MAX_JITTED_NAMES:
        jitted_names.clear()
    jitted_names[id(frame)] = (frame, name)
    return name


# `jitted_name`'s: `id(frame) -> (frame, name)`.
jitted_names: dict[int, tuple[FrameType, str]] = {}
_MAX_JITTED_NAMES: Final = 16


def _jitted_name(frame: FrameType, what: str) -> str:
    obj = frame.f_locals.get("self")
    if what == "unflatten_safe":
        obj = getattr(obj, "_typecheck_guard_jitted", None)
    user = _detect.filter_jit_function(obj)
    if user is not None:  # (read without running Equinox's code)
        return f"equinox.filter_jit({_detect.qualified(user)})"
    transform = getattr(obj, "_typecheck_guard_transform", None)
    if transform is not None:
        return _detect.describe_jitted(
            transform,
            obj._typecheck_guard_fun,  # pyright: ignore[reportOptionalMemberAccess]
            frame.f_back,
        )
    fun = getattr(obj, "__wrapped__", obj)
    return f"jax.jit({_detect.qualified(fun)})"


def callback_name(frame: FrameType) -> str:
    """`jax.pure_callback(module.f)`, from the locals of `_watch.watch_callback`.
    Worked out again for each check: a callback may change its name while it lives
    (`__qualname__` is writable), and the row is named as the callback is now."""
    local = frame.f_locals
    fn = function_of_callback(local.get("callback"))
    return callback_label(local.get("primitive", "host callback"), fn)


def function_of_callback(callback: Any) -> Any:
    """`_detect.callback_function(callback)`, found once per callback: what JAX
    hands its trampolines holds the user's function for good (a frozen
    `_FlatCallback`, `jax.debug.callback`'s closure). Its name is the caller's to
    read each time (a callback may rename itself while it lives)."""
    known = _callback_functions.get(id(callback))
    fn = known[1]() if known is not None and known[0]() is callback else None
    if fn is None:
        fn = _detect.callback_function(callback)
        try:
            refs = (weakref.ref(callback), weakref.ref(fn))
        except TypeError:
            return fn
        if len(_callback_functions) >= 1_000:
            _callback_functions.clear()
        _callback_functions[id(callback)] = refs
    return fn


# `function_of_callback`'s: `id(callback) -> (weak reference to it, to its function)`.
_callback_functions: dict[int, tuple[Any, Any]] = {}


def callback_label(primitive: str, fn: Any) -> str:
    """`jax.pure_callback(module.f)`: how the profile and the runtime guard name the
    callback `fn` (`_detect.callback_function`'s) of `primitive`."""
    return f"{primitive}({_detect.qualified(fn)})"


def _tree_operation_of(caller: FrameType | None, dirs: _Dirs) -> bool:
    """Whether the JAX tree code at `caller` was called by code outside JAX (yours, a
    library's): a tree operation, not JAX's tracing machinery rebuilding a tree.
    Where `caller` is a registered Python unflatten function (or a helper of one),
    the program's own code that JAX's tree code called, what called that."""
    unflatten = registered_unflatten_frame(caller)
    f = unflatten.f_back if unflatten is not None else caller
    while f is not None and (
        _frames.kind(f.f_code) == _frames.TREE
        or f.f_code.co_filename.endswith(_TREE_API)
    ):
        f = f.f_back
    if f is None:
        return False
    filename = f.f_code.co_filename
    return not (filename.startswith(dirs.jax) or filename.startswith(dirs.skip))


# The public tree API's own module (`jax.tree.map` calls `tree_util.tree_map`).
_TREE_API: Final = (os.path.join("jax", "_src", "tree.py"),)


class Walk(NamedTuple):
    """What the stack holds from a frame down to its bottom, as far as `situation`
    asks: the outermost jitted-call wrapper (its frame and what it wraps), the
    innermost host-callback trampoline, whether any frame runs a host callback, and
    whether a jitted call's first-run unflatten (`_ONCE_PER_COMPILATION`) is inside
    every jitted-call wrapper found. A host callback is a boundary: the jitted call
    that ran it is not the one a check inside it belongs to (a function jitted and
    traced inside the callback is), so jitted-call wrappers and first-run
    unflattens below the innermost callback are not read."""

    jitted: tuple[FrameType, str] | None
    callback: FrameType | None
    in_callback: bool
    compiling: bool


def walk(frame: FrameType, below: tuple[FrameType, Walk] | None = None) -> Walk:
    """The `Walk` of the stack below `frame` (from its caller down). `below`: a
    frame further down that stack and its own `Walk` (an open check's, whose body
    the check at `frame` runs in), from which the rest is read: the same answer
    from a few frames, where each check under jaxtyping's import hook sits 60 or
    more frames above the test runner's. Where that frame is not on the way down
    (a generator's body resumed elsewhere), the whole stack is walked."""
    dirs = _dirs()
    jitted: tuple[FrameType, str] | None = None
    in_callback = False
    compiling = False
    stop = below[0] if below is not None else None
    f = frame.f_back
    marks = _marks
    while f is not None:
        code = f.f_code
        mark = marks.get(id(code))
        if mark is None:
            mark = _mark(code, dirs)
        if mark:
            if mark == _JITTED:
                if not in_callback:
                    # Keep walking: the outermost one is the user's.
                    jitted = (f, _jitted_codes[id(code)][1])
            elif mark == _CALLBACK:
                # The innermost callback: nothing below it is read.
                return Walk(jitted, f, True, compiling)
            elif mark == _IN_CALLBACK_FILE:
                in_callback = True
            elif jitted is None and not in_callback:
                compiling = True
        if f is stop:
            rest = below[1]  # type: ignore[index]
            if in_callback:  # the jitted calls below the callback are not read
                return Walk(jitted, rest.callback, True, compiling)
            return Walk(
                rest.jitted if rest.jitted is not None else jitted,
                rest.callback,
                rest.in_callback,
                compiling or (jitted is None and rest.compiling),
            )
        f = f.f_back
    return Walk(jitted, None, in_callback, compiling)


def compiled_in_callback(frame: FrameType) -> bool:
    """Whether the check at `frame`, inside a host callback, runs in the first run
    of a function jitted inside that callback (its once-per-compilation rebuilds):
    the `compiling` of `walk`, read only down to the innermost callback."""
    dirs = _dirs()
    marks = _marks
    f = frame.f_back
    while f is not None:
        code = f.f_code
        mark = marks.get(id(code))
        if mark is None:
            mark = _mark(code, dirs)
        if mark in (_JITTED, _CALLBACK, _IN_CALLBACK_FILE):
            return False
        if mark:
            return True
        f = f.f_back
    return False


def situation(
    frame: FrameType,
    what: str,
    cls: type | None = None,
    body: Any = None,
    walked: Walk | None = None,
) -> tuple[Situation, FrameType | None]:
    """How the check starting at `frame` was reached, and its caller (`caller_of`).
    Runs once per check, when it starts; `what` is `"constructor"`, `"function"` or
    `"isinstance"` (`_detect._kind_of`), `cls` the class a constructor builds and
    `body` the checked function; `walked`, the stack's `Walk` below `frame`, if the
    caller has it."""
    dirs = _dirs()
    is_tracing = _detect._is_tracing
    traced = is_tracing is not None and is_tracing()
    jitted, callback, in_callback, compiling = (
        walked if walked is not None else walk(frame)
    )
    caller = caller_of(frame, what)
    rebuild = is_rebuild(cls, what, caller, body)
    name = jitted_name(*jitted) if jitted is not None else None
    made_at = (
        getattr(jitted[0].f_locals.get("self"), "_typecheck_guard_made_at", None)
        if jitted is not None and jitted[1] == "jitted"
        else None
    )
    if in_callback and not traced and not compiling:
        # (`compiling` inside a callback: the first run of a function jitted
        # there, whose rebuilds are that function's compile, below.)
        when = "callback"
        name = callback_name(callback) if callback is not None else None
    elif traced or compiling:
        # JAX's own tree code (rebuilding, or flattening: a pytree node's checked
        # flatten function, a library's internals under jaxtyping's import hook) is
        # not the user's traced code.
        by_jax = rebuild or (
            caller is not None and _frames.kind(caller.f_code) == _frames.TREE
        )
        if by_jax and traced and _tree_operation_of(caller, dirs):
            # `jax.tree.map(f, obj)` in your traced code (or a library's): a tree
            # operation that runs while JAX traces, not JAX compiling.
            when = "tree"
        else:
            when = "compile" if by_jax else "trace"
    elif jitted is not None and not _jit_disabled():
        when = "dispatch"
    elif rebuild:
        dispatched = caller is not None and (
            _frames.kind(caller.f_code) == _frames.DISPATCH
        )
        when = "dispatch" if dispatched else "tree"
    else:
        when = "construction" if what == "constructor" else "eager"
    return Situation(when, name, rebuild, made_at), caller
