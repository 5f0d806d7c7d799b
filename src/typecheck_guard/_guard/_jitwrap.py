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
import functools as ft
import inspect
import sys
import threading
from collections.abc import Callable
from typing import Any

from .._compat._importhook import after_import
from .._errors import PRIVATE_API_CHANGED
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

    Every attribute other than `__call__` and `__get__` is the wrapped callable's.
    """

    def __init__(
        self,
        jitted: Callable[..., Any],
        transform: str,
        fun: Any,
        made_at: str | None = None,
    ):
        ft.update_wrapper(self, jitted, updated=())
        self.__wrapped__ = jitted
        self._typecheck_guard_transform = transform
        self._typecheck_guard_fun = fun
        # `path:line` of the user's code that made it: where its fix goes
        # (`_fixes`).
        self._typecheck_guard_made_at = made_at

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return _watch.watch(self, sys._getframe(1), args, kwargs)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        if obj is None:
            return self
        get = getattr(type(self.__wrapped__), "__get__", None)
        bound = get(self.__wrapped__, obj, objtype) if get else self.__wrapped__
        return Jitted(
            bound,
            self._typecheck_guard_transform,
            self._typecheck_guard_fun,
            self._typecheck_guard_made_at,
        )

    def __getattr__(self, name: str) -> Any:
        if name == "__wrapped__":  # not set yet (copy, unpickling)
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"{self.__wrapped__!r} (watched by typecheck_guard)"


# Checks find the jitted call they run in by this frame (`_situation`).
_situation.register_jitted(Jitted.__call__.__code__, "jitted")


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
        if not callable(jitted) or isinstance(jitted, ft.partial):
            return jitted
        made_at = _detect.call_site(sys._getframe(1))
        return Jitted(jitted, label, fun, None if made_at == "<unknown>" else made_at)

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


def _start(stack: contextlib.ExitStack) -> None:
    import jax  # noqa: F401  (the guard needs it; patching it is the first step)

    from .._compat._jax import pass_for_jitted

    _detect.prepare()
    pass_for_jitted(Jitted)  # `jax.export.export(jitted)` accepts a watched one
    if _detect.start_monitoring():
        stack.callback(_detect.stop_monitoring)
    else:
        _tracing.patch(stack)
        _entries.patch(stack)
    _callbacks.patch(stack)
    later = _pending
    later.clear()
    for module_name in dict.fromkeys(name for name, _, _ in _TARGETS):
        module = sys.modules.get(module_name)
        if module is not None:
            _patch_module(module, stack)
        else:
            later.add(module_name)
    if later:
        # equinox / flax.nnx imported after the guard was switched on.
        after_import(
            set(later), lambda module: _patched_on_import(module, stack), stack
        )
        stack.callback(later.clear)


# The modules of `_TARGETS` not imported when the guard was switched on. Our finder
# patches them on import, when it is asked: another import hook inserted before it
# on `sys.meta_path` (jaxtyping's, under `--jaxtyping-packages=equinox,...`) loads
# them without asking it. So each new jitted callable (Equinox and Flax NNX make
# theirs with `jax.jit`) also patches whichever of them has been imported since.
_pending: set[str] = set()


def _patched_on_import(module: Any, stack: contextlib.ExitStack) -> None:
    _pending.discard(module.__name__)
    _patch_module(module, stack)


def _patch_pending() -> None:
    with _lock:
        stack = _stack
        if stack is None:
            return
        for name in list(_pending):
            module = sys.modules.get(name)
            # Not while the module is still being imported (it may be what called
            # `jax.jit`): only once the factories we patch are there.
            if module is not None and all(
                callable(getattr(module, attribute, None))
                for module_name, attribute, _ in _TARGETS
                if module_name == name
            ):
                _pending.discard(name)
                _patch_module(module, stack)


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
