"""Wrapping jitted callables so that the runtime guard sees their calls.

JAX's C++ dispatch gives Python no hook around a cache-hit call of a jitted
function. So while the guard is switched on we patch the four factories users make
jitted callables with: `jax.jit`, `jax.pmap`, `equinox.filter_jit` and
`flax.nnx.jit`. A callable made afterwards comes back wrapped in `Jitted`, which
forwards every attribute (`lower`, `trace`, `clear_cache`, ...) and, while something
is listening (a `runtime_checks` level other than `"allow"`, or the pytest plugin),
watches each call that is not itself traced with `_track.Window`.

Equinox and Flax NNX build their wrappers on `jax.jit`, so their inner jitted
callable is wrapped too; a call that is already watched passes straight through it.

Callables made *before* the guard was switched on are not seen: the pytest plugin
switches it on before conftest files and test modules are imported, and
`runtime_checks` documents the same ordering for scripts. We rejected the
alternatives: patching JAX's private `_cpp_pjit` covers neither pmap nor the
Python around Equinox and NNX calls, and watching every Python call all the time
(a process-wide profile function) slows everything by about 2x.

The patches live in one `ExitStack` (chex's `fake.py`), put back when the last
holder releases the guard; wrappers made meanwhile keep working and only forward
calls.
"""

from __future__ import annotations

import contextlib
import copy
import functools as ft
import inspect
import operator
import sys
import threading
import types
from collections.abc import Callable
from typing import Any, Final

from .._compat._importhook import after_import
from .._errors import PRIVATE_API_CHANGED
from .._unflatten._frames import register_through
from . import _callbacks, _detect, _entries, _situation, _tracing, _watch

__all__ = ["Jitted", "acquire", "release", "active"]

_lock = threading.RLock()
_stack: contextlib.ExitStack | None = None
_holders = 0
# Whether the patches have been on since before the program made any jitted
# callable: then every jitted call is one of ours to see.
_complete = False

# Where the factories live: (module, attribute, the name we show users).
_TARGETS = (
    ("jax", "jit", "jax.jit"),
    ("jax", "pmap", "jax.pmap"),
    ("equinox", "filter_jit", "equinox.filter_jit"),
    ("flax.nnx", "jit", "flax.nnx.jit"),
)
_PACKAGE_OF = {"jax": "jax", "equinox": "equinox", "flax.nnx": "flax"}


class Jitted:
    """A jitted callable, watched by the runtime guard while it listens.

    To the program it is the callable it wraps: every attribute is that callable's
    (read, set and deleted there), it binds as a method the way that callable does
    (a `types.MethodType` for `jax.jit`'s and `jax.pmap`'s), its `repr`, equality
    and hash are that callable's, it pickles as that callable (unpickled, it is
    that callable), and a copy is a watched copy of that callable. Only `type()`
    tells it apart.
    """

    # Ours, where a program's attribute can't be; the instance dictionary holds the
    # names a class attribute of ours would shadow (`__module__`, `__doc__`), as
    # `functools.wraps` copies them, and nothing else.
    __slots__ = (
        "_typecheck_guard_jitted",
        "_typecheck_guard_transform",
        "_typecheck_guard_fun",
        "_typecheck_guard_made_at",
        "__dict__",
        "__weakref__",
    )

    def __init__(
        self,
        jitted: Callable[..., Any],
        transform: str,
        fun: Any,
        made_at: str | None = None,
    ):
        _set = object.__setattr__
        _set(self, "_typecheck_guard_jitted", jitted)
        _set(self, "_typecheck_guard_transform", transform)
        _set(self, "_typecheck_guard_fun", fun)
        # `path:line` of the user's code that made it: where its fix goes
        # (`_fixes`).
        _set(self, "_typecheck_guard_made_at", made_at)
        own = self.__dict__
        # An `equinox.filter_jit` wrapper's `__getattribute__` answers these names
        # as `object`'s does, and is a check of Equinox's under jaxtyping's import
        # hook, which the program did not make.
        read = (
            object.__getattribute__
            if _detect.is_filter_jit_wrapper(jitted)
            else getattr
        )
        for name in _SHADOWED:
            try:
                own[name] = read(jitted, name)
            except AttributeError:
                pass

    @register_through
    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            return _watch.watch(self, sys._getframe(1), args, kwargs)
        finally:
            if _situation.jitted_names:
                # The names of the jitted calls in flight, by their frames: this
                # call's frame (and what it holds) is not kept past its end.
                _situation.jitted_names.clear()

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        inner = self._typecheck_guard_jitted
        get = getattr(type(inner), "__get__", None)
        if get is None:
            return self  # not a descriptor: the same object from an instance too
        if _detect.is_filter_jit_wrapper(inner):
            # `equinox.filter_jit`'s own `__get__`, binding us where it binds its
            # wrapper: the one `equinox.Partial(self, obj)` it makes without us.
            # (Binding the wrapper and making the partial again around us built two,
            # each a construction jaxtyping's import hook checks.)
            return get(self, obj, objtype)
        bound = get(inner, obj, objtype)
        if bound is inner:
            return self
        if isinstance(bound, types.MethodType) and bound.__func__ is inner:
            # `jax.jit`'s and `jax.pmap`'s callables bind as functions do.
            return types.MethodType(self, bound.__self__)
        if (
            type(bound) is ft.partial
            and bound.func is inner
            and not bound.keywords
            and len(bound.args) == 1
        ):
            return ft.partial(self, *bound.args)  # `flax.nnx.jit`'s
        if (
            type(bound).__name__ == "Partial"
            and type(bound).__module__.startswith("equinox.")
            and getattr(bound, "func", None) is inner
        ):
            # `equinox.filter_jit`'s: `equinox.Partial(jit_wrapper, obj)`.
            return type(bound)(self, *bound.args, **bound.keywords)
        # Anything else: watched as it is.
        return Jitted(
            bound,
            self._typecheck_guard_transform,
            self._typecheck_guard_fun,
            self._typecheck_guard_made_at,
        )

    def __getattr__(self, name: str) -> Any:
        try:
            inner = object.__getattribute__(self, "_typecheck_guard_jitted")
        except AttributeError:  # not set yet (`copy`, unpickling)
            raise AttributeError(name) from None
        return getattr(inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._typecheck_guard_jitted, name, value)
        if name in _SHADOWED:
            self.__dict__[name] = value

    def __delattr__(self, name: str) -> None:
        delattr(self._typecheck_guard_jitted, name)
        self.__dict__.pop(name, None)

    # A class reads its `__annotations__` from its own dictionary (creating an empty
    # one on first read): the wrapped callable's must win, as the callable has them
    # now (Equinox computes its wrapper's).
    @property
    def __annotations__(self) -> Any:  # type: ignore[override]
        return self._typecheck_guard_jitted.__annotations__

    @__annotations__.setter
    def __annotations__(self, value: Any) -> None:
        self._typecheck_guard_jitted.__annotations__ = value

    @__annotations__.deleter
    def __annotations__(self) -> None:
        del self._typecheck_guard_jitted.__annotations__

    def __dir__(self) -> list[str]:
        return dir(self._typecheck_guard_jitted)

    def __repr__(self) -> str:
        return repr(self._typecheck_guard_jitted)

    def __eq__(self, other: Any) -> Any:
        if isinstance(other, Jitted):
            other = other._typecheck_guard_jitted
        return self._typecheck_guard_jitted == other

    def __hash__(self) -> int:
        return hash(self._typecheck_guard_jitted)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # The jitted callable itself, pickled as it pickles (by the pickler's own
        # means: a function by name, or by value under cloudpickle), behind a
        # standard library callable that returns it: unpickled without us, or in
        # another process, it is that callable, and what can't be pickled fails as
        # it does.
        return (operator.itemgetter(0), ((self._typecheck_guard_jitted,),))

    def __copy__(self) -> Jitted:
        return self._like(copy.copy(self._typecheck_guard_jitted))

    def __deepcopy__(self, memo: dict[int, Any]) -> Jitted:
        return self._like(copy.deepcopy(self._typecheck_guard_jitted, memo))

    def _like(self, jitted: Any) -> Jitted:
        return type(self)(
            jitted,
            self._typecheck_guard_transform,
            self._typecheck_guard_fun,
            self._typecheck_guard_made_at,
        )


class _JittedModule(Jitted):
    """`Jitted` around an `equinox.filter_jit` wrapper, which is an
    `equinox.Module`: a pytree, whose leaves are those of the function it jits (the
    arrays of a jitted `eqx.nn.Linear`, say). So is this: JAX flattens it into the
    wrapper's own children, with the wrapper's own keys and nothing of ours in the
    treedef's data (two wrappers whose treedefs are equal without us have equal
    treedefs), and rebuilds the wrapper from them, watched
    (`_register_module_proxy`). A `jax.tree.leaves`, `equinox.filter_grad` or
    `equinox.partition` sees what it sees without us; the treedef's node is ours.
    Its `__class__` is the wrapper's: `isinstance(f, equinox.Module)` holds, as a
    checker's check of a `f: equinox.Module` argument asks."""

    __slots__ = ()

    @property  # type: ignore[misc]
    def __class__(self) -> Any:  # type: ignore[override]
        return type(object.__getattribute__(self, "_typecheck_guard_jitted"))

    @property
    def _typecheck_guard_fun(self) -> Any:  # type: ignore[override]
        # The function it jits: as given to the factory, or, for one JAX rebuilt
        # (which keeps nothing of ours), read off the wrapper.
        fun = _FUN.__get__(self)
        if fun is None:
            fun = _detect.filter_jit_function(
                object.__getattribute__(self, "_typecheck_guard_jitted")
            )
        return fun

    @_typecheck_guard_fun.setter
    def _typecheck_guard_fun(self, value: Any) -> None:
        _FUN.__set__(self, value)


_FUN: Final = Jitted.__dict__["_typecheck_guard_fun"]  # the slot


def _flatten_module_proxy(proxy: _JittedModule) -> Any:
    import jax

    inner = object.__getattribute__(proxy, "_typecheck_guard_jitted")
    # The wrapper's top node alone: its children, each a leaf here, by their keys.
    pairs, node = jax.tree_util.tree_flatten_with_path(
        inner, is_leaf=lambda x: x is not inner
    )
    # Nothing of ours in the treedef's data: the function and the line that made
    # it would tell equal wrappers apart (an ensemble's members), and keep the
    # function's first arrays alive.
    return [(path[0], child) for path, child in pairs], node


def _flatten_module_proxy_plain(proxy: _JittedModule) -> Any:
    # (`_flatten_module_proxy` without the keys, which JAX's dispatch does not ask.)
    import jax

    inner = object.__getattribute__(proxy, "_typecheck_guard_jitted")
    return jax.tree_util.tree_flatten(inner, is_leaf=lambda x: x is not inner)


def _unflatten_module_proxy(node: Any, children: Any) -> _JittedModule:
    return _JittedModule(node.unflatten(list(children)), "equinox.filter_jit", None)


_module_proxy_registered = False


def _register_module_proxy(wrapper: type) -> None:
    global _module_proxy_registered
    with _lock:
        if _module_proxy_registered:
            return
        import jax

        # `dataclasses` asks the type, not `__class__`: Equinox's wrapper is a
        # dataclass (`dataclasses.fields`, `replace`, `is_dataclass`), and so is this.
        for name in ("__dataclass_fields__", "__dataclass_params__"):
            if name in vars(wrapper):
                setattr(_JittedModule, name, vars(wrapper)[name])

        jax.tree_util.register_pytree_with_keys(
            _JittedModule,
            _flatten_module_proxy,
            _unflatten_module_proxy,
            _flatten_module_proxy_plain,
        )
        _module_proxy_registered = True


# What a class attribute of `Jitted` would answer instead of the wrapped callable.
_SHADOWED: Final = ("__module__", "__doc__")


# Checks find the jitted call they run in by this frame (`_situation`).
_situation.register_jitted(Jitted.__call__.__code__, "jitted")
_detect.jitted_types = (Jitted, _JittedModule)


def _make_factory(original: Callable[..., Any], label: str) -> Callable[..., Any]:
    @ft.wraps(original)
    def factory(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        if args:
            fun = args[0]
        elif "fun" in kwargs:
            fun = kwargs["fun"]
        else:  # `@jax.jit(static_argnums=...)`: the decorator comes back to us
            return ft.partial(factory, **kwargs)
        if _pending:
            _patch_pending()
        jitted = original(*args, **kwargs)
        # (By its type: `isinstance` reads `__class__`, which an `equinox.Module`
        # answers through its `__getattribute__`, a check of its own under
        # jaxtyping's import hook, and not the program's.)
        if not callable(jitted) or issubclass(type(jitted), ft.partial):
            return jitted
        made_at = _detect.call_site(sys._getframe(1))
        cls = Jitted
        if _detect.is_filter_jit_wrapper(jitted):
            _register_module_proxy(type(jitted))
            cls = _JittedModule
        return cls(jitted, label, fun, None if made_at == "<unknown>" else made_at)

    factory.__typecheck_guard_original__ = original  # type: ignore[attr-defined]
    return factory


def _check_factory(original: Any, label: str, package: str) -> None:
    from .._compat._versions import installed, spec

    try:
        params = list(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        params = []
    if not callable(original) or not params or params[0] != "fun":
        raise RuntimeError(
            PRIVATE_API_CHANGED.format(
                what=f"{label}(fun, ...) (found {original!r} with parameters {params})",
                package=package,
                found=installed(package) or "unknown",
                supported=spec(package),
            )
        )


def _patch_module(module: Any, stack: contextlib.ExitStack) -> None:
    from .._compat._versions import check

    for module_name, attribute, label in _TARGETS:
        if module_name != module.__name__:
            continue
        package = _PACKAGE_OF[module_name]
        check(package)
        original = getattr(module, attribute, None)
        if getattr(original, "__typecheck_guard_original__", None) is not None:
            continue  # already ours (a module imported twice under one stack)
        _check_factory(original, label, package)
        setattr(module, attribute, _make_factory(original, label))  # pyright: ignore[reportArgumentType]
        stack.callback(setattr, module, attribute, original)


def _on_jax(module: Any, stack: contextlib.ExitStack) -> None:
    from .._compat._jax import pass_for_jitted

    _detect.PREPARE["jax"]()
    pass_for_jitted(Jitted)  # `jax.export.export(jitted)` accepts a watched one
    if not _detect.monitoring:
        _tracing.patch(stack)
    _callbacks.patch(stack)
    _patch_module(module, stack)


def _on_jaxtyping(module: Any, stack: contextlib.ExitStack) -> None:
    _detect.PREPARE["jaxtyping"]()
    _entries.patch(stack)


def _on_checker(module: Any, stack: contextlib.ExitStack) -> None:
    _detect.PREPARE[module.__name__]()


# What the guard does with each library, when the guard is switched on if it is
# imported by then, else right after its import (in this order for those already
# imported: JAX's state before the factories of the libraries built on it).
_ON_IMPORT: Final[dict[str, Callable[[Any, contextlib.ExitStack], None]]] = {
    "jax": _on_jax,
    "jaxtyping": _on_jaxtyping,
    "jaxtyping._pytree_type": _on_checker,
    "typeguard": _on_checker,
    "beartype": _on_checker,
    "equinox": _patch_module,
    "flax.nnx": _patch_module,
}


def _start(stack: contextlib.ExitStack) -> None:
    """Switch the guard on, importing nothing: a program that sets
    `JAX_ENABLE_X64` or `JAXTYPING_DISABLE` after `runtime_checks(...)` (or in a
    conftest, under the pytest plugin) must get what it set. Each library is
    patched and read when it is imported (`_compat/_importhook.py`)."""
    _detect.prepare()
    if _detect.start_monitoring():
        stack.callback(_detect.stop_monitoring)
    _pending.clear()
    stack.callback(_pending.clear)
    later = set()
    for name, handle in _ON_IMPORT.items():
        module = sys.modules.get(name)
        if module is not None and not _importing(module):
            handle(module, stack)
        else:
            later.add(name)
    if later:
        _pending.update(later)
        after_import(later, lambda module: _on_import(module, stack), stack)


# The libraries of `_ON_IMPORT` not imported when the guard was switched on. Our
# finder hands them to us on import, when it is asked: another import hook inserted
# before it on `sys.meta_path` (jaxtyping's, under `--jaxtyping-packages=equinox,...`)
# loads them without asking it. So each new jitted callable (Equinox and Flax NNX
# make theirs with `jax.jit`) also takes whichever of them has been imported since.
_pending: set[str] = set()


def _importing(module: Any) -> bool:
    """Whether `module`'s code is still running (it may be what called us)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def _on_import(module: Any, stack: contextlib.ExitStack) -> None:
    with _lock:
        name = module.__name__
        if name in _pending and sys.modules.get(name) is module:
            _pending.discard(name)
            _ON_IMPORT[name](module, stack)


def _patch_pending() -> None:
    with _lock:
        stack = _stack
        if stack is None or not _pending:
            return
        for name in [n for n in _ON_IMPORT if n in _pending]:
            module = sys.modules.get(name)
            if module is not None and not _importing(module):
                _pending.discard(name)
                _ON_IMPORT[name](module, stack)


def acquire(*, before_program: bool = False) -> None:
    """Switch the guard's patches on (or keep them on): one more holder.
    `before_program`: the caller knows the program has not made a jitted callable
    yet (the pytest plugin before collection, `typecheck-guard profile` before the
    program runs)."""
    global _stack, _holders, _complete
    with _lock:
        if _stack is None:
            # Without JAX imported, nothing can have been jitted yet.
            complete = before_program or "jax" not in sys.modules
            stack = contextlib.ExitStack()
            try:
                _start(stack)
            except BaseException:
                stack.close()
                raise
            _stack = stack
            _complete = complete
        _holders += 1


def sees_every_jit() -> bool:
    """Whether every jitted callable the program has made comes from our patched
    factories (so that each of their calls is seen)."""
    return _stack is not None and _complete


def release() -> None:
    """One holder fewer; the last one puts every patched factory back."""
    global _stack, _holders
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0 and _stack is not None:
            stack, _stack = _stack, None
            stack.close()


def active() -> bool:
    """Whether `jax.jit` & co are patched right now."""
    return _stack is not None
