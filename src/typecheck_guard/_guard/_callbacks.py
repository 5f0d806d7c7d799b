"""Seeing the typechecks that run inside host callbacks.

`jax.pure_callback`, `jax.experimental.io_callback` and `jax.debug.callback` run a
Python function each time the compiled program reaches them: during a call of the
jitted function, on the calling thread or on one of the runtime's threads, possibly
after the call has returned (JAX dispatches asynchronously). A typecheck in that
function (a jaxtyped progress meter, say) runs on every call by design, is no
unflatten check, and is often library code the user cannot move: the guard reports
it as its own kind, `"callback"`, and does not fail on it unless asked to.

To see every run of a callback, wherever and whenever it runs, we wrap JAX's
trampolines between the compiled program and the user's function:
`jax._src.callback.pure_callback_impl` and `io_callback_impl` (module globals) and
`jax._src.debugging.debug_callback_p.impl` (the primitive's implementation, which
`jax.debug.callback`'s lowering calls). JAX looks each up every time a callback
runs, so executables compiled before the patch are covered too.
We rejected recognising callbacks by their frames on the stack of a check: it is
exact only for callbacks that run inside the window of the jitted call, and which
ones do depends on timing (the same site was counted 7 times in one run and 4 in
the next).
"""

from __future__ import annotations

import contextlib
import functools as ft
import importlib
import inspect
from collections.abc import Callable
from typing import Any, Final

from .._errors import PRIVATE_API_CHANGED
from . import _watch

__all__ = ["patch"]

# (module, object in it or "", attribute, the name of the public API users call)
_TRAMPOLINES: Final = (
    ("jax._src.callback", "", "pure_callback_impl", "jax.pure_callback"),
    ("jax._src.callback", "", "io_callback_impl", "jax.experimental.io_callback"),
    ("jax._src.debugging", "debug_callback_p", "impl", "jax.debug.callback"),
)


def _check(original: Any, where: str) -> None:
    from .._compat._versions import installed, spec

    try:
        parameters = inspect.signature(original).parameters
    except (TypeError, ValueError):
        parameters = {}
    callback = parameters.get("callback")
    if callback is None or callback.kind is not inspect.Parameter.KEYWORD_ONLY:
        raise RuntimeError(
            PRIVATE_API_CHANGED.format(
                what=f"{where}(*args, callback=..., ...) (found {original!r} with "
                f"parameters {list(parameters)})",
                package="jax",
                found=installed("jax") or "unknown",
                supported=spec("jax"),
            )
        )


def _wrap(original: Callable[..., Any], primitive: str) -> Callable[..., Any]:
    @ft.wraps(original)
    def trampoline(*args: Any, **kwargs: Any) -> Any:
        return _watch.watch_callback(
            primitive, kwargs.get("callback"), original, args, kwargs
        )

    trampoline.__typecheck_guard_original__ = original  # type: ignore[attr-defined]
    return trampoline


def patch(stack: contextlib.ExitStack) -> None:
    """Wrap JAX's callback trampolines until `stack` closes."""
    for module_name, owner_name, attribute, primitive in _TRAMPOLINES:
        owner = importlib.import_module(module_name)
        where = module_name
        if owner_name:
            owner = getattr(owner, owner_name, None)
            where = f"{module_name}.{owner_name}"
        original = getattr(owner, attribute, None)
        if getattr(original, "__typecheck_guard_original__", None) is not None:
            continue
        _check(original, f"{where}.{attribute}")
        setattr(owner, attribute, _wrap(original, primitive))  # pyright: ignore[reportArgumentType]
        stack.callback(setattr, owner, attribute, original)
