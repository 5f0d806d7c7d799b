"""The guards we put on a class's checked `__init__` / `__post_init__` / `__setattr__`,
and the one table they decide by: is this call an unflatten by JAX (skip the check)
or anything else (check, exactly as without us)?

Read it top down; the first row that matches decides. Every row is O(1) but the last,
O(leaves).

| # | the call                                                        | verdict     |
|---|-----------------------------------------------------------------|-------------|
| 1 | JAX is unflattening exactly `type(self)` through the function   | unflatten:  |
|   | its registry holds for it: the mark `install()`'s wrapper sets  | unchecked   |
| 2 | a method of the instance whose construction a row here judged   | unchecked   |
|   | an unflatten, while it is being built (its own `__post_init__`, |             |
|   | `__setattr__`, a base class's `__init__`)                       |             |
| 3 | outside `unflatten_safe` (one `ContextVar.get()`)               | checked     |
| 4 | `cls(**fields)` with exactly the registered fields of a         | unflatten:  |
|   | `register_dataclass` class, called by JAX's tree code or a      | unchecked   |
|   | dispatch frame (`_frames.py`; not under `jax.disable_jit()`)    |             |
| 5 | called by the class's registered Python unflatten function,     | unflatten:  |
|   | which JAX's tree code or a dispatch frame called                | unchecked   |
| 6 | JAX is tracing                                                  | checked     |
| 7 | anything else: the verdict cache (`_verdict.py`), for classes   | checked on  |
|   | whose annotations make the verdict a function of the key; a     | a miss, and |
|   | verdict is stored only when the checker was on                  | always else |

Row 1 is evidence that cannot lie: only JAX calls what its registry holds (C++
dispatch, `tree_util`, `eval_shape`, AOT `lower`, ...), so `Point.tree_unflatten(aux,
children)` called by the user, `jax.tree.map(Point, xs)` and `jax.jit(Point)` carry no
mark. A row that judges a call an unflatten consumes the mark for the call's duration
and names the instance in row 2, so every construction nested inside it (another
class, or another instance of the same class, made by its `__init__`, its
`__post_init__` or a `default_factory`) is judged from row 1 again: checked.

Rows 3 to 7 are `unflatten_safe`'s, for classes registered before `install()`, whose
unflatten we could not wrap: see `_safe.py`. A construction written in user code, or
in library code (`TrainState.create`, `dataclasses.replace`, a host callback), is
never row 4 or 5: its caller is not JAX's tree code. Under `jax.disable_jit()` a
jitted callable calls its function directly, so a dispatch frame's call is no
unflatten there. JAX's C++ dispatch of a cached `jax.jit` call has no Python frame of
its own: inside `unflatten_safe(jitted)` its caller is our wrapper (row 4/5); inside a
`with` block it is the user's code (row 7).

We never walk the stack; we read at most the caller and its caller.
"""

from __future__ import annotations

import inspect
import linecache
import sys
import threading
import weakref
from typing import Any, Final, NamedTuple

from .._compat._checkers import checks_switched_off, nested_code, peel
from . import _state
from ._records import HOOKS
from ._verdict import VerdictCache, cacheable, signature

__all__ = [
    "GuardInfo",
    "blocker",
    "checks_any",
    "guard_class",
    "guard_info",
    "original_of",
    "register_dataclass_fields",
    "register_unflatten",
    "unguard_all",
]

# Code object of a registered Python unflatten function -> the classes registered
# with it. A construction counts as an unflatten (row 5) only for those classes: an
# unflatten that builds some other checked object from its children is user code
# making a construction. Weak sets: we must not keep classes alive.
_unflatten_codes: dict[Any, weakref.WeakSet[type]] = {}
# class -> the keyword names JAX's C++ unflatten passes to `cls(**fields)`, for
# classes registered with `jax.tree_util.register_dataclass`. Weak, as below.
_fields: weakref.WeakKeyDictionary[type, frozenset[str]] = weakref.WeakKeyDictionary()
# owner class -> names of the methods we guarded there, to undo our guards. Weak:
# we must not be the reason a class stays alive (JAX's registry may be). The
# original method is kept in the guard's closure (`guard_info`), which lives on the
# class, not here: a method's closure can refer to its class, and a value that
# refers to its key would keep a weak key alive.
_guards: weakref.WeakKeyDictionary[type, set[str]] = weakref.WeakKeyDictionary()
lock = threading.RLock()


def register_unflatten(code: Any, cls: type) -> None:
    """Row 5: `code` is `cls`'s registered Python unflatten."""
    _unflatten_codes.setdefault(code, weakref.WeakSet()).add(cls)


def register_dataclass_fields(cls: type, names: frozenset[str]) -> None:
    """Row 4: JAX's C++ unflatten calls `cls(**fields)` with these names."""
    _fields[cls] = names


def _outer_memo_probe(checked: Any) -> Any:
    """`None` when `checked` brings its own shape memo (jaxtyping outermost), else a
    function telling whether an enclosing `@jaxtyped` memo is active."""
    if peel(checked).checkers[:1] == ("jaxtyping",):
        return None
    try:
        from jaxtyping._storage import _has_shape_memo
    except ImportError:  # not the jaxtyping we know: assume a memo may be active
        return lambda: True
    return _has_shape_memo


def _make_guard(cls: type, name: str, checked: Any, unchecked: Any) -> Any:
    from .._compat._jax import make_is_tracing, make_jit_disabled
    from ._frames import DISPATCH, NONE, kind

    is_tracing = make_is_tracing()
    jit_disabled = make_jit_disabled()
    verdicts = VerdictCache()
    marks = _state.marks
    get_block = _state.block.get
    dispatch = _state.dispatch
    getframe = sys._getframe
    fields = _fields
    # The class that owns the guarded method is almost always the one unflattened:
    # its fields are looked up once, here, not per call.
    own_fields = _fields.get(cls)
    unflatten_codes = _unflatten_codes
    # Row 4 is about `cls(**fields)`, which reaches `__init__` only.
    is_init = name == "__init__"
    # Row 7 keys a constructor's arguments; a `__setattr__` is checked every time.
    keyed = name in ("__init__", "__post_init__")
    # A method whose outermost checker is jaxtyping's pushes a fresh shape memo, so its
    # verdict depends on its arguments only. Any other checker reading jaxtyping
    # annotations resolves dims against whatever memo an enclosing `@jaxtyped`
    # function pushed, which is not in the verdict key: no caching then.
    outer_memo_active = _outer_memo_probe(checked)

    def unflatten(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        # Run the method without its check, as part of an unflatten of `self`: the
        # mark is consumed and `self` is the instance being built, for this call only.
        state = marks.state
        mark, building = state
        state[0] = None
        state[1] = self
        try:
            return unchecked(self, *args, **kwargs)
        finally:
            state[0] = mark
            state[1] = building

    def called_by_jax(frame: Any) -> bool:
        code = kind(frame.f_code)
        return code is not NONE and (code is not DISPATCH or not jit_disabled())

    def guard(self: Any, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        state = marks.state
        mark, building = state
        if mark is type(self):  # row 1, inlined: it runs on every node JAX rebuilds
            state[0] = None
            state[1] = self
            try:
                return unchecked(self, *args, **kwargs)
            finally:
                state[0] = mark
                state[1] = building
        if building is self:
            return unchecked(self, *args, **kwargs)  # row 2
        if get_block() is None and not dispatch.depth:
            return checked(self, *args, **kwargs)  # row 3
        caller = getframe(1)
        code = caller.f_code
        unflattened = unflatten_codes.get(code)
        if unflattened is not None:
            outer = caller.f_back
            if type(self) in unflattened and outer is not None and called_by_jax(outer):
                return unflatten(self, args, kwargs)  # row 5
        elif (
            is_init
            and not args
            and kwargs.keys()
            == (own_fields if type(self) is cls else fields.get(type(self)))
            and called_by_jax(caller)
        ):
            return unflatten(self, args, kwargs)  # row 4
        if is_tracing():
            return checked(self, *args, **kwargs)  # row 6
        # Row 7. `self` is not part of `__init__`'s arguments (it is an empty
        # instance), but its class is: a subclass inheriting this `__init__` may
        # check other annotations. It is all of `__post_init__`'s arguments.
        owner = type(self)
        if (
            not keyed
            or not cacheable(owner)
            or (outer_memo_active is not None and outer_memo_active())
        ):
            return checked(self, *args, **kwargs)
        key = signature(args if is_init else (self, *args), kwargs)
        if key is None:
            return checked(self, *args, **kwargs)
        if is_init:
            key = (owner, key)
        if key in verdicts:
            return unflatten(self, args, kwargs)
        # A check that ran under a checker's off-switch (`jaxtyping_disable`, ...)
        # checked nothing: its pass is no verdict.
        off = checks_switched_off(checked)
        out = checked(self, *args, **kwargs)
        if not off and not checks_switched_off(checked):
            verdicts.add(key)
        return out

    _stand_in(guard, checked)
    return guard


def _stand_in(guard: Any, checked: Any) -> None:
    """Make `guard` look like `checked` where it replaces it: its name, docstring and
    annotations, and the very same attribute dictionary. Whatever you set on
    `Cls.__init__` lands where it did without us: jaxtyping's wrapper reads
    `__no_type_check__` on itself at every call, and with a copy it would check on.
    (So we keep what we know of a guard in its closure, not in attributes.)"""
    for name in (
        "__module__",
        "__name__",
        "__qualname__",
        "__doc__",
        "__annotations__",
    ):
        try:
            setattr(guard, name, getattr(checked, name))
        except (AttributeError, TypeError):
            pass
    try:
        guard.__dict__ = checked.__dict__
    except (AttributeError, TypeError):  # not a function: a copy, as `wraps` does
        guard.__dict__.update(getattr(checked, "__dict__", {}))


class GuardInfo(NamedTuple):
    original: Any
    """The method the guard replaced (checked)."""
    owner: type
    """The class it is guarded on."""
    verdicts: VerdictCache


def guard_info(fn: Any) -> GuardInfo | None:
    """What a guard (general or generated) stands for, read from its closure; `None`
    for anything else."""
    code = getattr(fn, "__code__", None)
    namespace = getattr(fn, "__globals__", None) or {}
    if code is not _GUARD_CODE and "_tg_general" in namespace:
        fn = namespace["_tg_general"]
        code = getattr(fn, "__code__", None)
    if code is not _GUARD_CODE:
        return None
    cells = dict(zip(code.co_freevars, fn.__closure__, strict=True))
    return GuardInfo(
        cells["checked"].cell_contents,
        cells["cls"].cell_contents,
        cells["verdicts"].cell_contents,
    )


def original_of(fn: Any) -> Any:
    """The method a guard replaced, or `fn` itself when it is no guard."""
    info = guard_info(fn)
    return fn if info is None else info.original


# The fast guard's own names; a method whose parameters use one keeps the general
# guard.
_FAST_NAMES: Final = frozenset(
    {"_tg_marks", "_tg_unchecked", "_tg_general", "_tg_state"}
)


def _fast_guard(general: Any, unchecked: Any) -> Any | None:
    """`general` (a guard from `_make_guard`) with rows 1 and 2 in front of it, in a
    function generated with the signature of `unchecked`: what JAX's marked
    unflattens of `install()`'s classes run, on every node. Passing the arguments on
    by name, not through `*args, **kwargs`, halves the guard's cost there.

    Every other call goes on to `general` with its arguments as the signature bound
    them: row 4 (`cls(**fields)` called exactly so by JAX's tree code, for classes
    registered before `install()`) never matches through it, which is why only
    `install()`'s own classes get this guard. `None` when the signature can't be
    written out (a parameter named like ours, or no `self`)."""
    try:
        params = list(inspect.signature(unchecked).parameters.values())
    except (TypeError, ValueError):
        return None
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return None
    if any(p.name in _FAST_NAMES or not p.name.isidentifier() for p in params):
        return None
    namespace: dict[str, Any] = {
        "_tg_marks": _state.marks,
        "_tg_unchecked": unchecked,
        "_tg_general": general,
    }
    declared: list[str] = []
    passed: list[str] = []
    star = False
    for i, p in enumerate(params):
        text = p.name
        if p.default is not inspect.Parameter.empty:
            namespace[f"_tg_default{i}"] = p.default
            text += f"=_tg_default{i}"
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            declared.append(f"*{p.name}")
            passed.append(f"*{p.name}")
            star = True
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            declared.append(f"**{p.name}")
            passed.append(f"**{p.name}")
        elif p.kind is inspect.Parameter.KEYWORD_ONLY:
            if not star:
                declared.append("*")
                star = True
            declared.append(text)
            passed.append(f"{p.name}={p.name}")
        else:
            declared.append(text)
            passed.append(p.name)
        if p.kind is inspect.Parameter.POSITIONAL_ONLY and (
            i + 1 == len(params)
            or params[i + 1].kind is not inspect.Parameter.POSITIONAL_ONLY
        ):
            declared.append("/")
    this, call = params[0].name, ", ".join(passed)
    source = (
        f"def guard({', '.join(declared)}):\n"
        f"    __tracebackhide__ = True\n"
        f"    _tg_state = _tg_marks.state\n"
        f"    mark, building = _tg_state\n"
        f"    if mark is type({this}):\n"
        f"        _tg_state[0] = None\n"
        f"        _tg_state[1] = {this}\n"
        f"        try:\n"
        f"            return _tg_unchecked({call})\n"
        f"        finally:\n"
        f"            _tg_state[0] = mark\n"
        f"            _tg_state[1] = building\n"
        f"    if building is {this}:\n"
        f"        return _tg_unchecked({call})\n"
        f"    return _tg_general({call})\n"
    )
    filename = f"<generated_guard_{getattr(unchecked, '__qualname__', 'method')}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    fast = namespace["guard"]
    namespace["__source__"] = source  # the function's own dictionary is shared
    _stand_in(fast, original_of(general))
    return fast


def _shared_with_unflatten_safe(owner: type) -> bool:
    """Whether `owner`'s methods also serve a class `unflatten_safe` guards (one
    registered before `install()`), which needs the general guard's row 4."""
    return any(owner in getattr(k, "__mro__", ()) for k in _fields) or any(
        owner in getattr(k, "__mro__", ())
        for ks in _unflatten_codes.values()
        for k in ks
    )


def _owner(cls: type, name: str) -> type | None:
    return next((k for k in cls.__mro__ if name in vars(k)), None)


def is_guard(fn: Any) -> bool:
    return guard_info(fn) is not None


def guard_class(
    cls: type, names: tuple[str, ...] = HOOKS, *, marked: bool = False
) -> str | None:
    """Guard the checked hooks among `names` of `cls` (where each is defined in its
    MRO), and its `__init__` as the entry point whenever another hook is checked.

    `marked`: `cls` is one of `install()`'s, whose unflattens JAX marks; its guards
    are generated with each method's own signature (`_fast_guard`), where the owner
    of the method is not also guarded for `unflatten_safe`.

    Returns why a checked hook can't be skipped (a layer that is not a checker sits
    above its check), or `None`. Idempotent.
    """
    blocked = None
    with lock:
        plan: list[tuple[type, str, Any, Any]] = []
        for name in names:
            owner = _owner(cls, name)
            if owner is None or owner is object:
                continue
            original = vars(owner)[name]
            if is_guard(original):
                continue
            layers = peel(original)
            if not layers.checkers:
                continue
            if layers.unchecked is None:
                blocked = _blocked(owner, name, layers.blocker)
                continue
            plan.append((owner, name, original, layers.unchecked))
        if plan and "__init__" in names and all(n != "__init__" for _, n, _, _ in plan):
            # An unchecked `__init__` still gets a guard when a hook it calls is
            # checked: judging the call once, at the entry point, is O(1), and makes
            # the constructions nested in it judged afresh.
            owner = _owner(cls, "__init__")
            if owner is not None and owner is not object:
                original = vars(owner)["__init__"]
                if not is_guard(original):
                    plan.insert(0, (owner, "__init__", original, original))
        for owner, name, original, unchecked in plan:
            guard = _make_guard(owner, name, original, unchecked)
            if marked and not _shared_with_unflatten_safe(owner):
                guard = _fast_guard(guard, unchecked) or guard
            try:
                setattr(owner, name, guard)
            except (TypeError, AttributeError):
                continue
            _guards.setdefault(owner, set()).add(name)
    return blocked


def _blocked(owner: type, name: str, blocker: Any) -> str:
    module = getattr(blocker, "__module__", None) or "?"
    code = getattr(blocker, "__code__", None)
    what = getattr(code, "co_qualname", None) or getattr(blocker, "__qualname__", "?")
    return (
        f"{owner.__qualname__}.{name} has a decorator that is not a typechecker "
        f"({module}.{what}) above its check, and the check can't be skipped without "
        "skipping that decorator too"
    )


def checks_any(cls: type, names: tuple[str, ...] = HOOKS) -> bool:
    """Whether any of the hooks `names` of `cls` carries a checker (guarded or not)."""
    for name in names:
        owner = _owner(cls, name)
        if owner is None or owner is object:
            continue
        method = vars(owner)[name]
        if peel(original_of(method)).checkers:
            return True
    return False


def blocker(cls: type, names: tuple[str, ...] = HOOKS) -> str | None:
    """Why a checked hook among `names` of `cls` can't be skipped, or `None`: what
    `guard_class` would return, without guarding anything."""
    for name in names:
        owner = _owner(cls, name)
        if owner is None or owner is object:
            continue
        method = vars(owner)[name]
        layers = peel(original_of(method))
        if layers.checkers and layers.unchecked is None:
            return _blocked(owner, name, layers.blocker)
    return None


def unguard_all() -> None:
    """Put back every method we guarded (called by `uninstall()`)."""
    with lock:
        for owner, names in list(_guards.items()):
            for name in names:
                info = guard_info(vars(owner).get(name))
                # Only put back what is still our guard: if the user has replaced
                # the method since, theirs stays.
                if info is not None and info.owner is owner:
                    setattr(owner, name, info.original)
        _guards.clear()
        _unflatten_codes.clear()
        _fields.clear()


# The code of every general guard (`_make_guard`'s nested `guard`): how
# `guard_info` knows one.
_GUARD_CODE = nested_code(_make_guard.__code__, "guard")
