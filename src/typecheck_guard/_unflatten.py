"""`unflatten_safe`: skip the typecheck of a constructor reached through a pytree
unflatten, for classes that `install()` could not adapt, and keep every other check.

How it decides, per call of a guarded `__init__` / `__post_init__` (all O(1) except
the last step, which is O(leaves)):

1. Outside `unflatten_safe` (the common case): run the checked method. One
   `ContextVar.get()` of overhead.
2. JAX is tracing: run the checked method. Constructions in traced code are checked
   at trace time, as without us.
3. The caller is a Python unflatten function of a registered class (recognised by
   its code object), or, inside `unflatten_safe(jitted_fn)`, the wrapper itself or
   JAX/Equinox/Flax code (no user code runs during a cache-hit jitted call): this is
   an unflatten; run the method with its checker layers peeled off.
4. Otherwise (JAX's C++ unflatten leaves no Python frame of its own, so it looks just
   like a direct construction): look the arguments up in an exact verdict cache
   (`_verdict.py`). A hit means a check on exactly this signature passed before; a
   miss runs the check, and only a pass is remembered.

We never walk the stack (`inspect.stack()` is O(depth) and slow); we only read the
immediate caller's frame. State lives in a `ContextVar`, so threads and asyncio tasks
are isolated, blocks nest, and a block that raises restores its parent state.
"""

from __future__ import annotations

import contextvars
import functools as ft
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, overload

from ._checkers import peel
from ._errors import NOT_CALLABLE
from ._verdict import VerdictCache, signature

__all__ = ["unflatten_safe"]

_F = TypeVar("_F", bound=Callable[..., Any])


class _State(NamedTuple):
    skip: bool  # an enclosing guarded method was judged an unflatten
    parent: _State | None


# Inside `with unflatten_safe()` / an `@unflatten_safe` function: a context variable,
# so that a block spanning `await`s stays with its asyncio task.
_state: contextvars.ContextVar[_State | None] = contextvars.ContextVar(
    "typecheck_guard_unflatten_safe", default=None
)
_BLOCK = _State(False, None)
_SKIP = _State(True, None)


class _Dispatch(threading.local):
    depth = 0


# Inside `unflatten_safe(jitted_fn)(...)`: a thread-local depth. A jitted call is
# synchronous, so no other task can run on this thread while it is set, and a
# thread-local costs ~50 ns where a context-variable set and reset cost ~350 ns: this
# runs on every call of the user's step.
_dispatch = _Dispatch()

# Code objects of Python unflatten functions of registered classes.
_unflatten_codes: set[Any] = set()
# owner class -> names of the methods we guarded there, to undo our guards. Weak:
# we must not be the reason a class stays alive (JAX's registry may be). The
# original method is kept on the guard (`__typecheck_guard_original__`), which
# lives on the class, not here: a method's closure can refer to its class, and a
# value that refers to its key would keep a weak key alive.
_guards: weakref.WeakKeyDictionary[type, set[str]] = weakref.WeakKeyDictionary()
# How many registry entries we have looked at; JAX's registry only grows.
_seen = 0
_lock = threading.RLock()
_library_prefixes: tuple[str, ...] = ()
_is_library: dict[Any, bool] = {}


def _library_code(code: Any) -> bool:
    try:
        return _is_library[code]
    except KeyError:
        result = code.co_filename.startswith(_library_prefixes)
        _is_library[code] = result
        return result


def _package_dirs() -> tuple[str, ...]:
    import importlib.util
    import os

    dirs = []
    # typecheck_guard itself: the runtime guard's wrapper around a jitted callable
    # (`_jitwrap.Jitted`) is the last Python frame before JAX's C++ dispatch.
    for name in (
        "jax",
        "jaxlib",
        "equinox",
        "flax",
        "optax",
        "chex",
        "typecheck_guard",
    ):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            for location in spec.submodule_search_locations:
                dirs.append(os.path.join(location, ""))
    return tuple(dirs)


def _code_of(fn: Any) -> Any:
    while isinstance(fn, ft.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None)


def _outer_memo_probe(checked: Any) -> Callable[[], bool] | None:
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
    from ._jaxcompat import make_is_tracing

    is_tracing = make_is_tracing()
    verdicts = VerdictCache()
    get_state = _state.get
    set_state = _state.set
    reset_state = _state.reset
    dispatch = _dispatch
    getframe = sys._getframe
    dispatch_code = _GuardedCall.__call__.__code__
    # `self` is not part of `__init__`'s verdict (it is an empty instance), but it is
    # all of `__post_init__`'s.
    drop_self = name == "__init__"
    # A method whose outermost checker is jaxtyping's pushes a fresh shape memo, so its
    # verdict depends on its arguments only. Any other checker reading jaxtyping
    # annotations resolves dims against whatever memo an enclosing `@jaxtyped`
    # function pushed, which is not in the verdict key: no caching then.
    outer_memo_active = _outer_memo_probe(checked)

    def run_unchecked(
        state: _State | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ):
        token = set_state(_SKIP if state is None else _State(True, state))
        try:
            return unchecked(*args, **kwargs)
        finally:
            reset_state(token)

    def guard(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        state = get_state()
        depth = dispatch.depth
        if state is None:
            if not depth:
                return checked(*args, **kwargs)
        elif state.skip:
            return unchecked(*args, **kwargs)
        if is_tracing():
            return checked(*args, **kwargs)
        code = getframe(1).f_code
        if code in _unflatten_codes or (
            depth and (code is dispatch_code or _library_code(code))
        ):
            return run_unchecked(state, args, kwargs)
        key = (
            None
            if outer_memo_active is not None and outer_memo_active()
            else signature(args[1:] if drop_self else args, kwargs)
        )
        if key is None:
            return checked(*args, **kwargs)
        if key in verdicts:
            return run_unchecked(state, args, kwargs)
        out = checked(*args, **kwargs)
        verdicts.add(key)
        return out

    ft.update_wrapper(guard, checked)
    guard.__typecheck_guard_original__ = checked  # type: ignore[attr-defined]
    guard.__typecheck_guard_guards__ = cls  # type: ignore[attr-defined]
    guard.__typecheck_guard_verdicts__ = verdicts  # type: ignore[attr-defined]
    return guard


def _guard_class(cls: type, methods: tuple[str, ...]) -> None:
    for name in methods:
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or owner is object or name in _guards.get(owner, ()):
            continue
        original = vars(owner)[name]
        layers = peel(original)
        if not layers.checkers:
            # An unchecked `__init__` still gets a guard when the `__post_init__` it
            # calls is checked: judging the call once, at the entry point, is O(1);
            # judging it inside would mean a verdict lookup on the whole instance.
            unchecked = original
        elif layers.unchecked is None:
            continue
        else:
            unchecked = layers.unchecked
        guard = _make_guard(owner, name, original, unchecked)
        try:
            setattr(owner, name, guard)
        except (TypeError, AttributeError):
            continue
        _guards.setdefault(owner, set()).add(name)


_registry: dict[type, Any] | None = None


def _sync() -> None:
    """Guard the classes registered since we last looked. O(1) when none were."""
    global _seen, _library_prefixes, _registry
    reg = _registry
    if reg is None:
        from ._jaxcompat import registry

        reg = _registry = registry()
    if len(reg) == _seen:
        return
    from ._inspect import calls_on_unflatten, describe
    from ._jaxcompat import registry_items

    with _lock:
        if not _library_prefixes:
            _library_prefixes = _package_dirs()
            try:
                from chex._src import dataclass as chex_dataclass

                _unflatten_codes.add(chex_dataclass._dataclass_unflatten.__code__)
            except ImportError:
                pass
        items = registry_items()
        for cls, entry in items[_seen:]:
            record = describe(cls, entry)
            if record is None:
                continue
            code = _code_of(getattr(entry, "from_iter", None))
            if code is not None:
                _unflatten_codes.add(code)
            _guard_class(cls, calls_on_unflatten(record.registration))
        _seen = len(items)


def unguard_all() -> None:
    """Put back every method `unflatten_safe` guarded (called by `uninstall()`)."""
    global _seen
    with _lock:
        for owner, names in list(_guards.items()):
            for name in names:
                guard = vars(owner).get(name)
                original = getattr(guard, "__typecheck_guard_original__", None)
                # Only put back what is still our guard: if the user has replaced
                # the method since, theirs stays.
                guards = getattr(guard, "__typecheck_guard_guards__", None)
                if original is not None and guards is owner:
                    setattr(owner, name, original)
        _guards.clear()
        _unflatten_codes.clear()
        _seen = 0


def _enter() -> None:
    parent = _state.get()
    _state.set(_BLOCK if parent is None else _State(False, parent))


def _exit() -> None:
    current = _state.get()
    _state.set(None if current is None else current.parent)


class _Context:
    """The object `unflatten_safe()` returns: a context manager."""

    def __enter__(self) -> None:
        _sync()
        _enter()

    def __exit__(self, *exc: Any) -> None:
        _exit()

    def __repr__(self) -> str:
        return "typecheck_guard.unflatten_safe()"


class _GuardedCall:
    """`unflatten_safe(jitted_fn)`: calls `jitted_fn` with dispatch-time unflattens
    of its inputs and outputs unchecked. Other attributes (`lower`, `trace`,
    `clear_cache`, ...) are those of `jitted_fn`."""

    def __init__(self, fn: Callable[..., Any]):
        # The JAX internals every call relies on are resolved and checked here, so
        # that an unsupported JAX fails where the user wraps their step, not at its
        # first call deep inside a training loop.
        from ._jaxcompat import make_is_tracing, registry

        registry()
        make_is_tracing()
        self.__wrapped__ = fn
        ft.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if _registry is None or len(_registry) != _seen:
            _sync()
        dispatch = _dispatch
        dispatch.depth += 1
        try:
            return self.__wrapped__(*args, **kwargs)
        finally:
            dispatch.depth -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__wrapped__, name)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        return ft.partial(self, obj)

    def __repr__(self) -> str:
        return f"typecheck_guard.unflatten_safe({self.__wrapped__!r})"


def _is_jitted(fn: Any) -> bool:
    # jax.jit, jax.pmap, equinox.filter_jit and flax.nnx.jit wrappers all have
    # `lower`; a plain function does not.
    return callable(getattr(fn, "lower", None))


@overload
def unflatten_safe() -> _Context: ...


@overload
def unflatten_safe(fn: _F, /) -> _F: ...


def unflatten_safe(fn: Any = None, /) -> Any:
    """Don't re-run typechecks when JAX rebuilds a pytree object by unflattening it.

    For the classes `install()` could not adapt (defined before it, nodes registered
    with `register_pytree_node(_class)` whose unflatten calls the constructor,
    third-party classes). Direct constructions are still checked, and constructions
    in traced code are still checked at trace time.

    Three forms, one object:

    - `typecheck_guard.unflatten_safe(jitted_fn)` wraps a `jax.jit` /
        `equinox.filter_jit` / `jax.pmap` callable: during a call, a constructor that
        JAX reaches while not tracing is an unflatten of inputs or outputs, and is
        not checked (O(1) per object).
    - `with typecheck_guard.unflatten_safe(): ...` covers every unflatten in the
        block: Python unflatten functions are recognised by their code objects, and
        JAX's C++ unflatten by an exact verdict cache (the check runs once per
        distinct signature of treedef and leaf types/shapes/dtypes).
    - `@typecheck_guard.unflatten_safe` on a plain function runs its body as in the
        `with` form.

    State is per thread and per asyncio task, blocks nest, and leaving a block by an
    exception restores the enclosing state.

    **Arguments:**

    - `fn`: optional. A jitted callable or a function.

    **Returns:**

    A context manager (no argument), or a callable wrapping `fn`.

    !!! Example

        ```python
        step = typecheck_guard.unflatten_safe(jax.jit(step))
        for batch in data:
            state = step(state, batch)
        ```
    """
    if fn is None:
        return _Context()
    if not callable(fn):
        raise TypeError(NOT_CALLABLE.format(obj=fn, type=type(fn).__name__))
    if _is_jitted(fn):
        return _GuardedCall(fn)

    @ft.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _sync()
        _enter()
        try:
            return fn(*args, **kwargs)
        finally:
            _exit()

    return wrapper
