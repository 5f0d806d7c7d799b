"""`unflatten_safe`: skip the typecheck of a constructor reached through a pytree
unflatten, for classes that `install()` could not adapt, and keep every other check.

How it decides, per call of a guarded `__init__` / `__post_init__`. Read it top down;
the first row that matches decides. All rows are O(1) except the last, O(leaves).

| # | the call                                                     | verdict     |
|---|--------------------------------------------------------------|-------------|
| 1 | outside `unflatten_safe` (one `ContextVar.get()`)            | checked     |
| 2 | inside a call already judged an unflatten (`__post_init__`   | unchecked   |
|   | under an unflattened `__init__`)                             |             |
| 3 | `cls(**fields)` with exactly the registered fields of a      | unflatten:  |
|   | `register_dataclass` class, called by JAX's tree code or a   | unchecked   |
|   | dispatch frame (`_frames.py`), tracing or not                |             |
| 4 | called by the class's registered Python unflatten function,  | unflatten:  |
|   | which JAX's tree code or a dispatch frame called             | unchecked   |
| 5 | JAX is tracing                                               | checked     |
| 6 | anything else: the verdict cache (`_verdict.py`), for        | checked on  |
|   | classes whose annotations make the verdict a function of the | a miss, and |
|   | key (treedef, leaf types, shapes, dtypes); others            | always      |

Row 3 and 4 are what JAX does when it rebuilds a tree: `jax.tree.map`, `tree_unflatten`,
`jax.eval_shape`, `grad`, `vmap`, `scan` and a jitted call's outputs, including trees of
placeholders (`None`, `ShapeDtypeStruct`, `PartitionSpec`) that a typechecked
`__init__` would reject. A construction written in user code, or in library code
(`TrainState.create`, `dataclasses.replace`, a host callback), is never row 3 or 4:
its caller is not JAX's tree code. A Python unflatten that the user calls directly
(`Point.from_parts(...)`) is not row 4: its own caller is user code.

JAX's C++ dispatch of a cached `jax.jit` call has no Python frame of its own: inside
`unflatten_safe(jitted)` its caller is our wrapper (row 3/4); inside a `with` block it is
the user's code (row 6, the verdict cache).

We never walk the stack (`inspect.stack()` is O(depth) and slow); we read at most the
caller and its caller. State lives in a `ContextVar`, so threads and asyncio tasks are
isolated, blocks nest, and a block that raises restores its parent state.
"""

from __future__ import annotations

import contextvars
import functools as ft
import inspect
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar, overload

from .._compat._checkers import peel
from .._errors import NOT_CALLABLE
from ._frames import register_dispatch
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

# Code object of a registered Python unflatten function -> the classes registered
# with it. A construction counts as an unflatten (row 4) only for those classes: an
# unflatten that builds some other checked object from its children is user code
# making a construction. Weak sets: we must not keep classes alive.
_unflatten_codes: dict[Any, weakref.WeakSet[type]] = {}
# class -> the keyword names JAX's C++ unflatten passes to `cls(**fields)`, for
# classes registered with `jax.tree_util.register_dataclass`. Weak, as below.
_fields: weakref.WeakKeyDictionary[type, frozenset[str]] = weakref.WeakKeyDictionary()
# owner class -> names of the methods we guarded there, to undo our guards. Weak:
# we must not be the reason a class stays alive (JAX's registry may be). The
# original method is kept on the guard (`__typecheck_guard_original__`), which
# lives on the class, not here: a method's closure can refer to its class, and a
# value that refers to its key would keep a weak key alive.
_guards: weakref.WeakKeyDictionary[type, set[str]] = weakref.WeakKeyDictionary()
# How many registry entries we have looked at; JAX's registry only grows.
_seen = 0
_lock = threading.RLock()


def _code_of(fn: Any) -> Any:
    while isinstance(fn, ft.partial):
        fn = fn.func
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None)


def _dataclass_fields(unflatten: Any) -> frozenset[str] | None:
    """The keywords of `cls(**fields)` in JAX's `register_dataclass`: its Python
    mirror of the unflatten closes over `data_fields` and `meta_fields`, the same
    tuples it hands to the C++ node. `None` when we can't read them: then row 3 never
    matches for that class, and its unflattens go to the verdict cache."""
    code = getattr(unflatten, "__code__", None)
    cells = getattr(unflatten, "__closure__", None)
    if code is None or cells is None:
        return None
    try:
        env = dict(zip(code.co_freevars, (c.cell_contents for c in cells), strict=True))
        names = (*env["data_fields"], *env["meta_fields"])
    except (KeyError, ValueError, TypeError):
        return None
    if not all(isinstance(n, str) for n in names):
        return None
    return frozenset(names)


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
    from .._compat._jax import make_is_tracing
    from ._frames import NONE, kind
    from ._verdict import cacheable

    is_tracing = make_is_tracing()
    verdicts = VerdictCache()
    get_state = _state.get
    set_state = _state.set
    reset_state = _state.reset
    dispatch = _dispatch
    getframe = sys._getframe
    fields = _fields
    # The class that owns the guarded method is almost always the one unflattened:
    # its fields are looked up once, here, not per call.
    own_fields = _fields.get(cls)
    unflatten_codes = _unflatten_codes
    # Row 3 is about `cls(**fields)`, which reaches `__init__` only.
    is_init = name == "__init__"
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
        if state is None:
            if not dispatch.depth:
                return checked(*args, **kwargs)  # row 1
        elif state.skip:
            return unchecked(*args, **kwargs)  # row 2
        caller = getframe(1)
        code = caller.f_code
        unflattened = unflatten_codes.get(code)
        if unflattened is not None:
            outer = caller.f_back
            if (
                args
                and type(args[0]) in unflattened
                and outer is not None
                and kind(outer.f_code) is not NONE
            ):
                return run_unchecked(state, args, kwargs)  # row 4
        elif (
            is_init
            and len(args) == 1
            and kind(code) is not NONE
            and kwargs.keys()
            == (own_fields if type(args[0]) is cls else fields.get(type(args[0])))
        ):
            return run_unchecked(state, args, kwargs)  # row 3
        if is_tracing():
            return checked(*args, **kwargs)  # row 5
        # Row 6. `self` is not part of `__init__`'s arguments (it is an empty
        # instance), but its class is: a subclass inheriting this `__init__` may
        # check other annotations. It is all of `__post_init__`'s arguments.
        owner = type(args[0]) if args else None
        if (
            owner is None
            or not cacheable(owner)
            or (outer_memo_active is not None and outer_memo_active())
        ):
            return checked(*args, **kwargs)
        key = signature(args[1:] if is_init else args, kwargs)
        if key is None:
            return checked(*args, **kwargs)
        if is_init:
            key = (owner, key)
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
    global _seen, _registry
    reg = _registry
    if reg is None:
        from .._compat._jax import registry

        reg = _registry = registry()
    if len(reg) == _seen:
        return
    from .._adapt._unadapted import calls_on_unflatten, describe
    from .._compat._jax import registry_items
    from ._verdict import cacheable

    with _lock:
        items = registry_items()
        for cls, entry in items[_seen:]:
            record = describe(cls, entry)
            if record is None:
                continue
            unflatten = getattr(entry, "from_iter", None)
            if getattr(unflatten, "__module__", None) == "jax._src.tree_util":
                # `jax.tree_util.register_dataclass` (directly, or through
                # flax.struct): JAX's C++ node calls `cls(**fields)`.
                names = _dataclass_fields(unflatten)
                if names is not None:
                    _fields[cls] = names
            else:
                code = _code_of(unflatten)
                if code is not None:
                    _unflatten_codes.setdefault(code, weakref.WeakSet()).add(cls)
            _guard_class(cls, calls_on_unflatten(record.registration))
            # Decide now, at block entry, what the verdict cache may serve for this
            # class, rather than during the first dispatch.
            cacheable(cls)
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
        _fields.clear()
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
        from .._compat._jax import make_is_tracing, registry

        registry()
        make_is_tracing()
        self.__wrapped__ = fn
        ft.update_wrapper(self, fn, updated=())

    @register_dispatch
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

    A construction counts as an unflatten only when JAX's own tree code (or a
    jitted call's dispatch) calls the class exactly as its registered unflatten does:
    `jax.tree.map`, `tree_unflatten`, `jax.eval_shape`, `grad`, `scan`, a jitted
    call's outputs, whether JAX is tracing or not (so trees of placeholders such as
    `jax.tree.map(lambda _: None, state)` work). A construction in your code or in a
    library's (`TrainState.create`, `.replace(...)`, a host callback) is checked.

    Three forms, one object:

    - `typecheck_guard.unflatten_safe(jitted_fn)` wraps a `jax.jit` /
        `equinox.filter_jit` / `jax.pmap` callable: the unflattens of its inputs and
        outputs at dispatch are not checked (O(1) per object).
    - `with typecheck_guard.unflatten_safe(): ...` covers every unflatten in the
        block. A cached jitted call made in the block (no wrapper) unflattens its
        outputs from C++, which looks like a construction in your code: those go to
        an exact verdict cache, and the check runs once per distinct signature
        (treedef and leaf types, shapes, dtypes) for classes whose annotations the
        key decides, and every time for the others (value validators, containers).
    - `@typecheck_guard.unflatten_safe` on a function runs its body as in the
        `with` form; on a generator or an `async def`, every resumption of its body.

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
    if inspect.isasyncgenfunction(fn):
        return _async_generator(fn)
    if inspect.isgeneratorfunction(fn):
        return _generator(fn)
    if inspect.iscoroutinefunction(fn):
        return _coroutine(fn)

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


# A generator's body runs in pieces, each time it is resumed, in whatever context the
# consumer resumes it from; a block around *creating* it would cover none of them.
# So we resume it ourselves, inside the block, one step at a time, and leave the
# block at every `yield`: the consumer's code between two items is not covered.


def _generator(fn: Callable[..., Any]) -> Callable[..., Any]:
    @ft.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _sync()
        _enter()
        try:
            gen = fn(*args, **kwargs)
        finally:
            _exit()
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            _enter()
            try:
                item = gen.send(sent) if thrown is None else gen.throw(thrown)
            except StopIteration as stop:
                return stop.value
            finally:
                _exit()
            thrown = None
            try:
                sent = yield item
            except GeneratorExit:
                _enter()
                try:
                    gen.close()
                finally:
                    _exit()
                raise
            except BaseException as e:  # `.throw()` from the consumer
                thrown, sent = e, None

    return wrapper


def _coroutine(fn: Callable[..., Any]) -> Callable[..., Any]:
    # A coroutine is resumed by its own task's event loop, in that task's context: a
    # block entered inside it stays with it across `await`s and no other task sees it.
    @ft.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _sync()
        _enter()
        try:
            return await fn(*args, **kwargs)
        finally:
            _exit()

    return wrapper


def _async_generator(fn: Callable[..., Any]) -> Callable[..., Any]:
    @ft.wraps(fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _sync()
        gen = fn(*args, **kwargs)
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            _enter()
            try:
                item = await (gen.asend(sent) if thrown is None else gen.athrow(thrown))
            except StopAsyncIteration:
                return
            finally:
                _exit()
            thrown = None
            try:
                sent = yield item
            except GeneratorExit:
                _enter()
                try:
                    await gen.aclose()
                finally:
                    _exit()
                raise
            except BaseException as e:
                thrown, sent = e, None

    return wrapper
