"""The guards we put on a class's checked `__init__` / `__post_init__` / `__setattr__`,
and the one table they decide by: is this call an unflatten by JAX (skip the check)
or anything else (check, exactly as without us)?

Read it top down; the first row that matches decides. Every row is O(1) but the last,
O(leaves).

| # | the call                                                        | verdict     |
|---|-----------------------------------------------------------------|-------------|
| 1 | JAX is unflattening exactly `type(self)` through the function   | unflatten:  |
|   | its registry holds for it (the mark `install()`'s wrapper sets),| unchecked   |
|   | and that function's own code calls this hook, with no other     |             |
|   | constructor hook (`__init__`, `__new__`, `__post_init__`,       |             |
|   | `__setattr__`) running in between                               |             |
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

Rows 1, 2, 4, 5 and 7 skip nothing while a check would have a side effect outside its
call: a checker that is not jaxtyping's, reading jaxtyping annotations, binds
dimensions in the memo of an enclosing `@jaxtyped` function, and a later construction
there is checked against them. While such a memo is active, those checks run.

Row 1 is evidence that cannot lie: only JAX calls what its registry holds (C++
dispatch, `tree_util`, `eval_shape`, AOT `lower`, ...), so `Point.tree_unflatten(aux,
children)` called by the user, `jax.tree.map(Point, xs)` and `jax.jit(Point)` carry no
mark. And a hook is that unflatten's construction only when the unflatten's own code
calls it (`tree_unflatten` itself, a helper it calls, chex's unflatten, our
`cls(**fields)`): a construction nested in another one (another class, or another
instance of the same class, made by an `__init__` body, a `__post_init__`, a custom
`__new__`, a `default_factory`) has a constructor hook between it and the unflatten,
and is judged from row 2 on: checked. So is every construction made inside a hook
that an unflatten calls without a guard of ours (an unchecked `__post_init__` that
chex's unflatten, or a custom node's built with `object.__new__`, calls): the mark
says whose code may construct, not that the next construction is the unflatten's.

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

import sys
import threading
import weakref
from typing import Any, Final, NamedTuple

from .._compat._checkers import (
    INSTRUMENTED,
    INSTRUMENTED_WHY,
    checks_switched_off,
    nested_code,
    peel,
)
from . import _state
from ._records import CONSTRUCTOR_NAMES, HOOKS
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

# Id of the code object of a registered Python unflatten function -> that code and
# the classes registered with it (by id: a code object hashes its whole contents on
# every lookup). A construction counts as an unflatten (row 5) only for those classes: an
# unflatten that builds some other checked object from its children is user code
# making a construction. Weak sets: we must not keep classes alive.
_unflatten_codes: dict[int, tuple[Any, weakref.WeakSet[type]]] = {}
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
    _unflatten_codes.setdefault(id(code), (code, weakref.WeakSet()))[1].add(cls)


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
        return _always
    return _has_shape_memo


def _always() -> bool:
    return True


class _Plan:
    """What one guard knows of the method it stands in for, besides what it calls on
    the hot path.

    Pickled by what it was made from (a class defined in `__main__` travels by value
    with cloudpickle, its guards with it); in the receiving process it starts afresh:
    no verdicts, and no unflatten of ours registered for the class."""

    __slots__ = (
        "owner",
        "name",
        "checked",
        "unchecked",
        "verdicts",
        "is_init",
        "keyed",
        "memo",
        "own_fields",
        "where",
        "track",
        "stood_in",
    )

    def __init__(self, owner: Any, name: str, checked: Any, unchecked: Any):
        self.owner = owner
        self.name = name
        self.checked = checked
        self.unchecked = unchecked
        self.verdicts = VerdictCache()
        # Row 4 is about `cls(**fields)`, which reaches `__init__` only.
        self.is_init = name == "__init__"
        # Row 7 keys a constructor's arguments; a `__setattr__` is checked every time.
        self.keyed = name in ("__init__", "__post_init__")
        # A method whose outermost checker is jaxtyping's pushes a fresh shape memo,
        # so its check has no effect outside the call. Any other checker reading
        # jaxtyping annotations binds dimensions in whatever memo an enclosing
        # `@jaxtyped` function pushed: skipping it would skip that binding (and a
        # later inconsistent construction would pass), and its verdict is not a
        # function of the key either. While such a memo is active, it is checked.
        self.memo = _outer_memo_probe(checked)
        # The class that owns the guarded method is almost always the one
        # unflattened: its fields and its unflatten are looked up once, not per call.
        self.own_fields = None if owner is None else _fields.get(owner)
        self.where = None if owner is None else _wheres.get(owner)
        # Whether a construction row 1 skips must name its instance for row 2: when
        # the class has another guarded hook that its body may call (set by
        # `guard_class`).
        self.track = name != "__init__"
        # What `_stand_in` copied onto the guard: `uninstall()` writes onto the
        # method only what was written on the guard since (`_carry_back`).
        self.stood_in: Any = None

    def __reduce__(self) -> Any:
        # Not the class: pickling a method must not take its class along, as a
        # plain function's pickle does not. A plan rebuilt without it looks its
        # class's facts up by `type(self)`, as for a subclass.
        return (_Plan, (None, self.name, self.checked, self.unchecked))


def _make_guard(cls: type, name: str, checked: Any, unchecked: Any) -> Any:
    """The one guard shape: `(*args, **kwargs)`, handed on untouched to the method
    with or without its check. It can't re-bind a call, fill in a default, reorder
    arguments or shadow a parameter: it has no parameter of its own to shadow, and
    the instance is whatever came first, as the method receives it. Rows 1 and 2 are
    inline (they run on every node JAX rebuilds); the rest is `_decide`."""
    plan = _Plan(cls, name, checked, unchecked)
    marks = _state.marks
    getframe = sys._getframe
    decide = _decide
    from_unflatten = _from_unflatten
    where_of = _where_of
    modulename = getattr(sys, "_getframemodulename", None)  # Python 3.12+
    memo = plan.memo

    def guard(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if not args:  # no instance: the method raises its own error
            return checked(*args, **kwargs)
        self = args[0]
        kind = type(self)
        # Row 1: JAX's registry is running `install()`'s unflatten of exactly
        # `type(self)`, and this hook is called from that unflatten's own code.
        # `where` is `(code, depth, token, codes, at, fn_token)`: the code of our
        # wrapper, how far up its frame is when the class's own unflatten calls the
        # hook itself (the fast case), the wrapper's `__module__`, a string object
        # of its own, which Python 3.12+ reads off that frame without making a frame
        # object, the codes of the registered unflatten's own functions (by `id`),
        # the wrapper's `f_lasti` while it calls a Python function (`_calling_at`
        # in `_adapt/_codegen.py`), and the `__module__` of our own copy of that
        # function on 3.12+ (`_own_copy`). Otherwise we walk up to the wrapper, and
        # a frame of any other code on the way (a metaclass's `__call__`, a signal
        # handler) means no row 1.
        where = plan.where if kind is plan.owner else where_of(kind)
        if where is not None and (memo is None or not memo()):
            try:
                if where[1] == 1:  # our wrapper calls the class itself
                    if modulename is not None:
                        ours = modulename(1) is where[2]
                    else:
                        ours = getframe(1).f_code is where[0]
                elif where[5] is not None and modulename is not None:
                    # Python 3.12+: our own copy of the unflatten function (only our
                    # wrapper calls it) runs right above the hook.
                    ours = modulename(1) is where[5]
                elif where[4] is not None:  # a Python function, called by it
                    wrapper = getframe(2)
                    ours = wrapper.f_code is where[0] and wrapper.f_lasti == where[4]
                else:  # another callable, called by our wrapper
                    caller = getframe(1)
                    ours = id(caller.f_code) in where[3] and (
                        modulename(2) is where[2]
                        if modulename is not None
                        else caller.f_back.f_code is where[0]
                    )
            except (ValueError, AttributeError):  # not that deep: no unflatten
                ours = False
            if ours or from_unflatten(getframe(1), where):
                if not plan.track:
                    return unchecked(*args, **kwargs) if kwargs else unchecked(*args)
                state = marks.state
                building = state[0]
                state[0] = self
                try:
                    return unchecked(*args, **kwargs)
                finally:
                    state[0] = building
        # Row 2: a hook of the instance that row 1 (or 4, 5, 7) is building.
        if marks.state[0] is self and (memo is None or not memo()):
            return unchecked(*args, **kwargs)
        return decide(plan, args, kwargs)

    plan.stood_in = _stand_in(guard, checked)
    return guard


def _where_of(
    cls: type,
) -> tuple[Any, int, str, dict[int, Any], int | None, str | None] | None:
    # A module-level function, not a closure over the weak dictionary: a guard's
    # closure holds only what pickles (cloudpickle sends a class defined in
    # `__main__` by value, guards included).
    return _wheres.get(cls)


def _from_unflatten(
    frame: Any, where: tuple[Any, int, str, dict[int, Any], int | None, str | None]
) -> bool:
    """Whether `frame` runs the code of the unflatten whose wrapper is `where[0]`:
    `wrapper`'s frame is at most `_DEPTH` frames above it, and every frame in
    between runs the registered unflatten's own code (`where[3]`). A frame of any
    other code in between was not called by that unflatten (a signal handler or a
    finalizer runs on top of the frame it interrupts), or is a constructor of its
    own (a metaclass's `__call__`, an `__init__`): its constructions are checked."""
    wrapper, codes = where[0], where[3]
    for _ in range(_DEPTH):
        if frame is None:
            return False
        code = frame.f_code
        if code is wrapper:
            return True
        if (
            id(code) not in codes
            or code.co_name in CONSTRUCTOR_NAMES
            or id(code) in _BARRIERS
        ):
            return False
        frame = frame.f_back
    return False


def unflattening(frame: Any) -> type | None:
    """The class whose unflatten, registered by `install()`, JAX's registry is
    running with `frame` in its own code (see `_from_unflatten`), or `None`: what
    the runtime guard and the profiler call a rebuild."""
    for _ in range(_DEPTH):
        if frame is None:
            return None
        code = frame.f_code
        cls = _wrapper_classes.get(id(code))
        if cls is not None and _wheres.get(cls, _NO_WHERE)[0] is code:
            return cls
        if code.co_name in CONSTRUCTOR_NAMES or id(code) in _BARRIERS:
            return None
        frame = frame.f_back
    return None


def register_wrapper(
    cls: type, where: tuple[Any, int, str, dict[int, Any], int | None, str | None]
) -> None:
    """`where = (code, depth, token, codes, at, fn_token)`: the code of the wrapper
    `install()` registered for `cls`, how far above a hook its frame is when `cls`'s
    unflatten calls that hook directly, the wrapper's `__module__` (a string object
    of its own), the codes of the registered unflatten's own functions by `id`, the
    wrapper's `f_lasti` while it calls a Python function (else `None`), and the
    `__module__` of our own copy of that function (3.12+, else `None`). Row 1 of
    `cls`'s guards looks for that frame, with only those codes in between."""
    with lock:
        _wheres[cls] = where
        _wrapper_classes[id(where[0])] = cls
        for klass in cls.__mro__:
            for name in HOOKS:
                info = guard_info(vars(klass).get(name))
                if info is not None and info.plan.owner is cls:
                    info.plan.where = where


def register_barrier(code: Any) -> None:
    """Constructions made below a frame running `code` are never row 1 (what
    `typecheck_guard.check` runs its unflattens from)."""
    _BARRIERS[id(code)] = code


# Row 1 looks at most this many frames up from a hook for the unflatten that JAX's
# registry is running; an unflatten whose own code calls deeper than that is
# checked, as without us.
_DEPTH: Final = 8
# By id (a code object hashes its whole contents on every lookup), holding the code.
_BARRIERS: dict[int, Any] = {}
# class -> `where` of the wrapper `install()` registered for it (`register_wrapper`),
# and that code's id -> the class. Weak: JAX's registry keeps the class alive, not
# we; the wrapper's code lives as long as the class's registry entry, and a lookup
# checks that the class's `where` still names that very code.
_wheres: weakref.WeakKeyDictionary[
    type, tuple[Any, int, str, dict[int, Any], int | None, str | None]
] = weakref.WeakKeyDictionary()
_wrapper_classes: weakref.WeakValueDictionary[int, type] = weakref.WeakValueDictionary()
_NO_WHERE: Final = (None,)


_tracing: Any = None
_jit_disabled: Any = None


def _as_unflatten(plan: _Plan, args: Any, kwargs: Any) -> Any:
    # Run the method without its check, as part of an unflatten of `args[0]`, the
    # instance being built, for this call only.
    state = _state.marks.state
    building = state[0]
    state[0] = args[0]
    try:
        return plan.unchecked(*args, **kwargs)
    finally:
        state[0] = building


def _called_by_jax(frame: Any) -> bool:
    from ._frames import DISPATCH, NONE, kind, through

    while through(frame.f_code):  # the runtime guard only watches: its caller counts
        frame = frame.f_back
        if frame is None:
            return False
    code = kind(frame.f_code)
    return code is not NONE and (code is not DISPATCH or not _jit_disabled())


def _decide(plan: _Plan, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Rows 3 to 7, for a call rows 1 and 2 did not take (`args[0]` is the
    instance)."""
    __tracebackhide__ = True
    global _tracing, _jit_disabled
    checked = plan.checked
    if not _state.dispatch.depth:
        block = _state.block.get()
        if block is None or not _state.inside(block, sys._getframe(2)):
            return checked(*args, **kwargs)  # row 3
    if _tracing is None:
        from .._compat._jax import make_is_tracing, make_jit_disabled

        _tracing, _jit_disabled = make_is_tracing(), make_jit_disabled()
    if plan.memo is not None and plan.memo():
        return checked(*args, **kwargs)  # see `_Plan.memo`
    caller = sys._getframe(2)  # the guard's caller
    code = caller.f_code
    self = args[0]
    owner = type(self)
    fields = args[1:]
    known = _unflatten_codes.get(id(code))
    unflattened = known[1] if known is not None else None
    if unflattened is not None:
        outer = caller.f_back
        if owner in unflattened and outer is not None and _called_by_jax(outer):
            return _as_unflatten(plan, args, kwargs)  # row 5
    elif (
        plan.is_init
        and not fields
        and kwargs.keys()
        == (plan.own_fields if owner is plan.owner else _fields.get(owner))
        and _called_by_jax(caller)
    ):
        return _as_unflatten(plan, args, kwargs)  # row 4
    if _tracing():
        return checked(*args, **kwargs)  # row 6
    # Row 7. `self` is not part of `__init__`'s arguments (it is an empty instance),
    # but its class is: a subclass inheriting this `__init__` may check other
    # annotations. It is all of `__post_init__`'s arguments.
    if not plan.keyed or not cacheable(owner):
        return checked(*args, **kwargs)
    key = signature(fields if plan.is_init else args, kwargs)
    if key is None:
        return checked(*args, **kwargs)
    if plan.is_init:
        key = (owner, key)
    verdicts = plan.verdicts
    if key in verdicts:
        return _as_unflatten(plan, args, kwargs)
    # A check that ran under a checker's off-switch (`jaxtyping_disable`, ...)
    # checked nothing: its pass is no verdict.
    off = checks_switched_off(checked)
    out = checked(*args, **kwargs)
    if not off and not checks_switched_off(checked):
        verdicts.add(key)
    return out


# What a function of ours reads as when it stands in for another. `__defaults__` and
# `__kwdefaults__` too: ours take only `*args, **kwargs`, which no default applies
# to, so the copies change no call, and the attributes read as the original's.
_READ_AS_THE_ORIGINAL = (
    "__module__",
    "__name__",
    "__qualname__",
    "__doc__",
    "__annotations__",
    "__defaults__",
    "__kwdefaults__",
)


def stand_in(wrapper: Any, original: Any) -> Any:
    """`functools.wraps` for our `(*args, **kwargs)` wrappers: the original's names,
    docstring, annotations and defaults, its `__dict__` copied, and `__wrapped__`."""
    for name in _READ_AS_THE_ORIGINAL:
        try:
            setattr(wrapper, name, getattr(original, name))
        except (AttributeError, TypeError):
            pass
    wrapper.__dict__.update(getattr(original, "__dict__", {}))
    wrapper.__wrapped__ = original
    return wrapper


def _stand_in(guard: Any, checked: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Make `guard` look like `checked` where it replaces it: its name, docstring and
    annotations, and the very same attribute dictionary. Whatever you set on
    `Cls.__init__` lands where it did without us: jaxtyping's wrapper reads
    `__no_type_check__` on itself at every call, and with a copy it would check on.
    (So we keep what we know of a guard in its closure, not in attributes.)"""
    copied: dict[str, Any] = {}
    for name in _READ_AS_THE_ORIGINAL:
        try:
            setattr(guard, name, getattr(checked, name))
            copied[name] = getattr(guard, name)
        except (AttributeError, TypeError):
            pass
    if "__wrapped__" not in getattr(checked, "__dict__", {}):
        # No checker's wrapper: an unchecked `__init__`, guarded as the entry point
        # of a class whose `__post_init__` or `__setattr__` is checked (a dataclass's
        # generated one, say). Sharing its dictionary would leave the guard without
        # a `__wrapped__`, and `inspect.signature(cls)` would read the guard's
        # `(*args, **kwargs)`; adding one there would make the method wrap itself.
        # So the guard has a copy of its attributes, and `__wrapped__`, as
        # `functools.wraps` gives, and no checker reads the attributes of an
        # unchecked method.
        guard.__dict__.update(getattr(checked, "__dict__", {}))
        guard.__wrapped__ = checked
        return copied, dict(guard.__dict__)
    try:
        guard.__dict__ = checked.__dict__
    except (AttributeError, TypeError):  # not a function: a copy, as `wraps` does
        guard.__dict__.update(getattr(checked, "__dict__", {}))
        return copied, dict(guard.__dict__)
    return copied, None


class GuardInfo(NamedTuple):
    original: Any
    """The method the guard replaced (checked)."""
    owner: type
    """The class it is guarded on."""
    verdicts: VerdictCache
    plan: _Plan


def guard_info(fn: Any) -> GuardInfo | None:
    """What a guard stands for, read from its closure; `None` for anything else."""
    if getattr(fn, "__code__", None) is not _GUARD_CODE:
        return None
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__, strict=True))
    plan = cells["plan"].cell_contents
    return GuardInfo(plan.checked, plan.owner, plan.verdicts, plan)


def original_of(fn: Any) -> Any:
    """The method a guard replaced, or `fn` itself when it is no guard."""
    info = guard_info(fn)
    return fn if info is None else info.original


def _owner(cls: type, name: str) -> type | None:
    return next((k for k in cls.__mro__ if name in vars(k)), None)


def is_guard(fn: Any) -> bool:
    return guard_info(fn) is not None


def guard_class(cls: type, names: tuple[str, ...] = HOOKS) -> str | None:
    """Guard the checked hooks among `names` of `cls` (where each is defined in its
    MRO), and its `__init__` as the entry point whenever another hook is checked.
    One guard shape serves `install()`'s classes and `unflatten_safe`'s.

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
            try:
                setattr(owner, name, guard)
            except (TypeError, AttributeError):
                continue
            _guards.setdefault(owner, set()).add(name)
        # A construction row 1 skips names its instance for row 2 only where the
        # class has another guarded hook (its `__post_init__`, `__setattr__`, a base
        # class's `__init__`) that the skipped one may call.
        infos = [
            info
            for klass in cls.__mro__
            for name in HOOKS
            if (info := guard_info(vars(klass).get(name))) is not None
        ]
        if len(infos) > 1:
            for info in infos:
                info.plan.track = True
    return blocked


def _blocked(owner: type, name: str, blocker: Any) -> str:
    if blocker is INSTRUMENTED:
        return f"{owner.__qualname__}.{name}: {INSTRUMENTED_WHY}"
    module = getattr(blocker, "__module__", None) or "?"
    code = getattr(blocker, "__code__", None)
    what = getattr(code, "co_qualname", None) or (  # Python 3.11+
        code.co_name
        if code is not None and hasattr(blocker, "__wrapped__")
        else getattr(blocker, "__qualname__", "?")
    )
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
    found = blocking_layer(cls, names)
    return None if found is None else _blocked(*found)


def blocking_layer(
    cls: type, names: tuple[str, ...] = HOOKS
) -> tuple[type, str, Any] | None:
    """`(owner, name, layer)` of the first checked hook among `names` of `cls` that
    can't be skipped: the layer is what sits above its check (a decorator that is
    not a checker, or `INSTRUMENTED`); `None` when every one can be."""
    for name in names:
        owner = _owner(cls, name)
        if owner is None or owner is object:
            continue
        method = vars(owner)[name]
        layers = peel(original_of(method))
        if layers.checkers and layers.unchecked is None:
            return owner, name, layers.blocker
    return None


def _carry_back(guard: Any, original: Any, stood_in: Any) -> None:
    """Write onto `original` what was written onto `guard`, which stood in for it,
    since `_stand_in` made it so (`stood_in`: what it copied, and its attribute
    dictionary then, where it has a copy rather than the method's own): without us
    those writes went to the method, and they are there once it is back. A guard
    unpickled in another process knows nothing of that, and writes nothing."""
    if stood_in is None:
        return
    copied, dictionary = stood_in
    for name, value in copied.items():
        try:
            now = getattr(guard, name)
            if now is not value:
                setattr(original, name, now)
        except (AttributeError, TypeError):
            pass
    mine, theirs = getattr(guard, "__dict__", None), getattr(original, "__dict__", None)
    if dictionary is None or mine is None or theirs is None or mine is theirs:
        return
    for key in dictionary:
        if key not in mine and key in theirs:
            del theirs[key]
    for key, value in mine.items():
        if dictionary.get(key, mine) is not value and key != "__wrapped__":
            theirs[key] = value


def unguard_all() -> None:
    """Put back every method we guarded (called by `uninstall()`)."""
    with lock:
        for owner, names in list(_guards.items()):
            for name in names:
                info = guard_info(vars(owner).get(name))
                # Only put back what is still our guard: if the user has replaced
                # the method since, theirs stays.
                if info is not None and info.owner is owner:
                    guard = vars(owner)[name]
                    _carry_back(guard, info.original, info.plan.stood_in)
                    setattr(owner, name, info.original)
        _guards.clear()
        _unflatten_codes.clear()
        _fields.clear()
        _wheres.clear()


# The code of every guard (`_make_guard`'s nested `guard`): how `guard_info` knows
# one.
_GUARD_CODE = nested_code(_make_guard.__code__, "guard")
