"""`unflatten_safe`: skip the typecheck of a constructor reached through a pytree
unflatten, for classes registered before `install()` (whose unflatten we could not
wrap), and keep every other check.

It guards the checked `__init__` / `__post_init__` / `__setattr__` of each such class
(`_guards.py`, where the decision table is) and, inside a block or a wrapped jitted
call, lets rows 4 to 7 of that table judge each call. Classes registered after
`install()` need none of this: JAX's registry marks their unflattens (row 1).

Three forms, one object: `with unflatten_safe():`, `@unflatten_safe` on a function
(a generator's or coroutine's body at every resumption), and
`unflatten_safe(jitted_fn)`, whose AOT methods (`lower`, `trace`, and what they
return: `in_avals`, `out_info`, `compile()`) run as if in a block too.
"""

from __future__ import annotations

import copy
import functools as ft
import inspect
import threading
import types
from collections.abc import Callable
from typing import Any, Final, TypeVar, overload

from .._errors import NOT_CALLABLE
from . import _state
from ._frames import register_dispatch
from ._guards import (
    guard_class,
    register_dataclass_fields,
    register_unflatten,
    stand_in,
)
from ._records import builds_with_new, is_ours, unflatten_of

__all__ = ["unflatten_safe"]

_F = TypeVar("_F", bound=Callable[..., Any])

# How many registry entries we have looked at; JAX's registry only grows.
_seen = 0
_lock = threading.RLock()
_registry: dict[type, Any] | None = None


def _dataclass_fields(unflatten: Any) -> frozenset[str] | None:
    """The keywords of `cls(**fields)` in JAX's `register_dataclass`: its Python
    mirror of the unflatten closes over `data_fields` and `meta_fields`, the same
    tuples it hands to the C++ node. `None` when we can't read them: then row 4 never
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


def _sync() -> None:
    """Guard the classes registered since we last looked. O(1) when none were."""
    global _seen, _registry
    reg = _registry
    if reg is None:
        from .._compat._jax import registry

        reg = _registry = registry()
    if len(reg) == _seen:
        return
    from .._compat._jax import registry_items
    from ._records import hooks_of, is_dataclass_entry
    from ._verdict import cacheable

    with _lock:
        items = registry_items()
        for cls, entry in items[_seen:]:
            if is_ours(cls) or builds_with_new(cls, getattr(entry, "from_iter", None)):
                continue
            if is_dataclass_entry(entry):
                # `jax.tree_util.register_dataclass` (directly, or through
                # flax.struct): JAX's C++ node calls `cls(**fields)`.
                names = _dataclass_fields(getattr(entry, "from_iter", None))
                if names is not None:
                    register_dataclass_fields(cls, names)
            else:
                code = getattr(unflatten_of(entry), "__code__", None)
                if code is not None:
                    register_unflatten(code, cls)
            guard_class(cls, hooks_of(cls, entry))
            # Decide now, at block entry, what the verdict cache may serve for this
            # class, rather than during the first dispatch.
            cacheable(cls)
        _seen = len(items)


def forget() -> None:
    """Look at every registered class again at the next block (after
    `uninstall()` took our guards off)."""
    global _seen
    with _lock:
        _seen = 0


class _Context:
    """The object `unflatten_safe()` returns: a context manager."""

    def __enter__(self) -> None:
        _sync()
        _state.enter(2)  # the `with` statement's frame

    def __exit__(self, *exc: Any) -> None:
        _state.exit()

    def __repr__(self) -> str:
        return "typecheck_guard.unflatten_safe()"


class _GuardedCall:
    """`unflatten_safe(jitted_fn)`: calls `jitted_fn` with dispatch-time unflattens
    of its inputs and outputs unchecked. Everything else is `jitted_fn`'s: its
    attributes (`lower`, `trace`, `clear_cache`, `__wrapped__`, `__name__`, ...), its
    binding as a method (a `types.MethodType`, as a jitted function binds), its
    pickles and copies (those of `unflatten_safe(copy of jitted_fn)`)."""

    # The one name of ours, where a user's attribute can't be: the rest of the
    # instance dictionary is `jitted_fn`'s metadata, as `functools.wraps` copies it.
    __slots__ = ("_typecheck_guard_jitted", "__dict__", "__weakref__")

    def __init__(self, fn: Callable[..., Any]):
        # The JAX internals every call relies on are resolved and checked here, so
        # that an unsupported JAX fails where the user wraps their step, not at its
        # first call deep inside a training loop.
        from .._compat._jax import make_is_tracing, pass_for_jitted, registry

        registry()
        make_is_tracing()
        pass_for_jitted(type(self))
        self._typecheck_guard_jitted = fn
        # What `functools.wraps` would copy, but `__wrapped__` is the jitted
        # function's own (the function it compiles), as `jitted_fn.__wrapped__` is.
        for name in ("__module__", "__name__", "__qualname__", "__doc__"):
            try:
                self.__dict__[name] = getattr(fn, name)
            except AttributeError:
                pass
        try:
            self.__dict__["__wrapped__"] = fn.__wrapped__  # pyright: ignore
        except AttributeError:
            pass

    @register_dispatch
    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if _registry is None or len(_registry) != _seen:
            _sync()
        dispatch = _state.dispatch
        dispatch.depth += 1
        try:
            return self._typecheck_guard_jitted(*args, **kwargs)
        finally:
            dispatch.depth -= 1

    def __getattr__(self, name: str) -> Any:
        try:
            fn = object.__getattribute__(self, "_typecheck_guard_jitted")
        except AttributeError:  # not set yet (`copy`, unpickling)
            raise AttributeError(name) from None
        value = getattr(fn, name)
        # `lower`, `trace`, `eval_shape`: JAX rebuilds the arguments' and outputs'
        # trees with placeholder leaves there, and in the stages they return. Every
        # other attribute (`clear_cache`, `_cache_size`, `_fun`, ...) is the jitted
        # function's own, as it is.
        return _in_block(value) if name in _AOT else value

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        # What the jitted function does as a class attribute, with ourselves in its
        # place: `jax.jit`'s binds a `types.MethodType` (`__self__`, `__func__`, and
        # every attribute of ours through it), Equinox's `filter_jit` an
        # `equinox.Partial` (a pytree). One we don't know is bound as it binds
        # itself: its calls then check, as without us.
        fn = self._typecheck_guard_jitted
        get = getattr(type(fn), "__get__", None)
        if get is None:
            return self
        bound = get(fn, obj, objtype)
        if bound is fn:
            return self
        if isinstance(bound, types.MethodType) and bound.__func__ is fn:
            return types.MethodType(self, bound.__self__)
        if getattr(bound, "func", None) is fn:
            try:
                return type(bound)(self, *bound.args, **bound.keywords)
            except Exception:
                pass
        return bound

    def __reduce__(self) -> Any:
        return (unflatten_safe, (self._typecheck_guard_jitted,))

    def __copy__(self) -> Any:
        return _GuardedCall(copy.copy(self._typecheck_guard_jitted))

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return _GuardedCall(copy.deepcopy(self._typecheck_guard_jitted, memo))

    def __repr__(self) -> str:
        return repr(self._typecheck_guard_jitted)


# The jitted function's methods that trace, lower or evaluate shapes.
_AOT: Final = frozenset({"lower", "trace", "eval_shape"})


def _in_block(value: Any) -> Any:
    """`value`, where it is a callable or one of JAX's AOT stages, made to run as if
    in `with unflatten_safe():`; anything else as it is."""
    if isinstance(value, type):
        return value
    if type(value).__module__ == "jax._src.stages":
        # `Traced`, `Lowered`, `Compiled` (callable): their own attributes too. We
        # give the object a subclass of its class that runs its attributes in a
        # block, so that it stays what JAX made (`isinstance`, its name, its
        # methods), not a proxy of it.
        guarded = _guarded_stage(type(value))
        if guarded is not None:
            try:
                value.__class__ = guarded
            except TypeError:  # a layout we can't share: leave it as JAX made it
                pass
        return value
    if callable(value):

        @ft.partial(stand_in, original=value)
        def in_block(*args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            _sync()
            _state.enter()
            try:
                return _in_block(value(*args, **kwargs))
            finally:
                _state.exit()

        return in_block
    return value


@ft.cache
def _guarded_stage(cls: type) -> type | None:
    """A subclass of JAX's AOT stage `cls`, with its name, whose attribute reads and
    calls run as if in `with unflatten_safe():`; `None` when `cls` is already one."""
    if getattr(cls, "__typecheck_guard_stage__", False):
        return None

    def __getattribute__(self: Any, name: str) -> Any:  # noqa: N807
        _state.enter()
        try:
            value = object.__getattribute__(self, name)
        finally:
            _state.exit()
        if name.startswith("__") or isinstance(value, type):
            return value
        return _in_block(value)

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N807
        # `compiled(*args)`: a call of the executable, like a jitted call.
        __tracebackhide__ = True
        _sync()
        _state.enter()
        try:
            return cls.__call__(self, *args, **kwargs)
        finally:
            _state.exit()

    namespace: dict[str, Any] = {
        "__slots__": (),
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "__getattribute__": __getattribute__,
        "__typecheck_guard_stage__": True,
    }
    if "__call__" in dir(cls):
        namespace["__call__"] = __call__
    return type(cls.__name__, (cls,), namespace)


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

    @ft.partial(stand_in, original=fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _sync()
        _state.enter()
        try:
            return fn(*args, **kwargs)
        finally:
            _state.exit()

    return wrapper


# A generator's body runs in pieces, each time it is resumed, in whatever context the
# consumer resumes it from; a block around *creating* it would cover none of them.
# So we resume it ourselves, inside the block, one step at a time, and leave the
# block at every `yield`: the consumer's code between two items is not covered.


def _generator(fn: Callable[..., Any]) -> Callable[..., Any]:
    @ft.partial(stand_in, original=fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _sync()
        _state.enter()
        try:
            gen = fn(*args, **kwargs)
        finally:
            _state.exit()
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            _state.enter()
            try:
                item = gen.send(sent) if thrown is None else gen.throw(thrown)
            except StopIteration as stop:
                return stop.value
            finally:
                _state.exit()
            thrown = None
            try:
                sent = yield item
            except GeneratorExit:
                _state.enter()
                try:
                    gen.close()
                finally:
                    _state.exit()
                raise
            except BaseException as e:  # `.throw()` from the consumer
                thrown, sent = e, None

    return wrapper


def _coroutine(fn: Callable[..., Any]) -> Callable[..., Any]:
    # A coroutine is resumed by its own task's event loop, in that task's context: a
    # block entered inside it stays with it across `await`s and no other task sees it.
    @ft.partial(stand_in, original=fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _sync()
        _state.enter()
        try:
            return await fn(*args, **kwargs)
        finally:
            _state.exit()

    return wrapper


def _async_generator(fn: Callable[..., Any]) -> Callable[..., Any]:
    @ft.partial(stand_in, original=fn)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        _sync()
        gen = fn(*args, **kwargs)
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            _state.enter()
            try:
                item = await (gen.asend(sent) if thrown is None else gen.athrow(thrown))
            except StopAsyncIteration:
                return
            finally:
                _state.exit()
            thrown = None
            try:
                sent = yield item
            except GeneratorExit:
                _state.enter()
                try:
                    await gen.aclose()
                finally:
                    _state.exit()
                raise
            except BaseException as e:
                thrown, sent = e, None

    return wrapper
