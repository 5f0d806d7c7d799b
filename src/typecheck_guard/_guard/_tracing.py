"""Pausing the runtime guard's profile function while JAX traces, lowers, compiles
and runs an executable from Python (Python 3.11 and older).

There the guard watches a jitted call with a profile function (`sys.setprofile`),
which JAX's own Python pays for too: every call and return runs it. On a call that
misses the cache, most of that Python is JAX tracing the function, lowering it to
MLIR and compiling it, where no check can be flagged (checks while tracing are
trace-time checks, and lowering and compiling run no user code). On diffrax's
`test_saveat_solution.py` the plugin cost 29% more CPU time under
`--typecheck-guard=warn`; with these three steps paused, none measurable
(`docs/pytest-plugin.md`). So we wrap them to switch the profile function off for
their duration and back on after.

The targets are JAX's private functions, reached by module attribute at each call
(`pe.trace_to_jaxpr(...)` in `pjit`). A target that is missing or not callable in
another JAX release is skipped: this is only a saving, and the guard sees the same
checks without it.
"""

from __future__ import annotations

import contextlib
import functools as ft
import importlib
import sys
import threading
from collections.abc import Callable
from typing import Any, Final

from ._track import Window

__all__ = ["patch"]

# (module, class in it or "", function)
_TARGETS: Final = (
    ("jax._src.interpreters.partial_eval", "", "trace_to_jaxpr"),
    # What `pjit` traces with before jax 0.10.
    ("jax._src.interpreters.partial_eval", "", "trace_to_jaxpr_dynamic"),
    ("jax._src.interpreters.partial_eval", "", "trace_to_jaxpr_dynamic2"),
    ("jax._src.interpreters.pxla", "", "lower_sharding_computation"),
    ("jax._src.interpreters.pxla", "", "lower_parallel_callable"),
    ("jax._src.interpreters.pxla", "MeshComputation", "compile"),
    # Running the executable on a call that leaves JAX's C++ fast path (a jitted
    # function with a host callback, say): placing the flat arguments, executing,
    # wrapping the flat outputs. No tree is rebuilt there, and a host callback it
    # runs is watched through its own trampoline (`_callbacks`).
    ("jax._src.interpreters.pxla", "ExecuteReplicated", "__call__"),
    # Finding the compiled executable for such a call (its cache lookups).
    ("jax._src.pjit", "", "_resolve_and_lower"),
)


class _Local(threading.local):
    # The window paused on this thread: a host callback run meanwhile belongs to its
    # call (`_watch.watch_callback`). A class-level default, read without the
    # `AttributeError` a missing attribute costs.
    window: Window | None = None


_local = _Local()


def paused() -> Window | None:
    """The window whose profile function is paused on this thread, if any."""
    return _local.window


def _paused(original: Callable[..., Any]) -> Callable[..., Any]:
    @ft.wraps(original)
    def unwatched(*args: Any, **kwargs: Any) -> Any:
        profile = sys.getprofile()
        window = getattr(profile, "__self__", None)
        if not isinstance(window, Window):
            return original(*args, **kwargs)
        sys.setprofile(None)
        outer, _local.window = _local.window, window
        try:
            return original(*args, **kwargs)
        finally:
            _local.window = outer
            sys.setprofile(profile)

    # The targets are often not plain functions but caches of JAX's
    # (`weakref_lru_cache`): what JAX reads on them (`trace_to_jaxpr.evict_weakref`,
    # which `jitted.clear_cache()` calls; `cache_clear`, `cache_info`) reads the
    # original's, as `functools.wraps` would for a function's `__dict__`.
    for name in dir(original):
        if not name.startswith("__") and not hasattr(unwatched, name):
            try:
                setattr(unwatched, name, getattr(original, name))
            except (AttributeError, TypeError):
                pass
    unwatched.__typecheck_guard_original__ = original  # type: ignore[attr-defined]
    return unwatched


def patch(stack: contextlib.ExitStack) -> None:
    """Pause the profile function in JAX's trace, lower and compile steps until
    `stack` closes."""
    for module_name, owner_name, attribute in _TARGETS:
        try:
            owner = importlib.import_module(module_name)
        except ImportError:
            continue
        if owner_name:
            owner = getattr(owner, owner_name, None)
        original = getattr(owner, attribute, None)
        if not callable(original) or hasattr(original, "__typecheck_guard_original__"):
            continue
        setattr(owner, attribute, _paused(original))
        stack.callback(setattr, owner, attribute, original)
