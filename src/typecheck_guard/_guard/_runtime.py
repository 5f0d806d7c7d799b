"""`runtime_checks(level)`: what to do when a typecheck runs while a jitted function
is called, outside tracing.

The level lives in a `ContextVar` (like `decimal`'s context): calling
`runtime_checks(level)` sets it for the current thread or asyncio task at once, and
leaving a `with runtime_checks(level):` block puts back the level it found. Threads
and tasks are isolated; a new thread starts at `"allow"`. (A host callback on one
of JAX's runtime threads takes the level last set or called at: `_watch.lend`.)
We rejected a process-wide default set by the bare call: one object cannot then
also scope a `with` block without a moment in which every other thread sees the
block's level.

The first level other than `"allow"` switches the guard's patches on (`_jitwrap`);
`_watch` watches each call and reads the level back.
"""

from __future__ import annotations

import threading
from typing import Any, Final, Literal

from ._watch import RuntimeTypecheckError, _callbacks, _level, lend

__all__ = ["RuntimeTypecheckError", "runtime_checks"]

LEVELS: Final = ("allow", "log", "disallow")

UNKNOWN_LEVEL: Final = (
    "typecheck_guard.runtime_checks: unknown level {level!r}. The levels are "
    '"allow" (the default: checks run silently), "log" (log each site once) and '
    '"disallow" (raise typecheck_guard.RuntimeTypecheckError). Write, for example,\n'
    "\n"
    '    with typecheck_guard.runtime_checks("disallow"):\n'
    "        state = step(state)\n"
)

_lock = threading.Lock()
_pinned = False


def _pin() -> None:
    """Switch the guard's patches on for the rest of the process."""
    global _pinned
    if _pinned:
        return
    # Imported here, not at the top: `import typecheck_guard` (and the pytest plugin
    # while it is off) loads none of the patching machinery.
    from . import _jitwrap

    with _lock:
        if _pinned:
            return
        _jitwrap.acquire()
        _pinned = True


class RuntimeChecks:
    """What `runtime_checks(level)` returns: the level, already in effect for the
    current thread or task; as a context manager, it is put back on exit."""

    __slots__ = ("level", "callbacks", "_token", "_previous", "_callbacks_token")

    def __init__(self, level: str, callbacks: bool = False):
        self.level = level
        self.callbacks = callbacks
        self._previous = (_level.get(), _callbacks.get())
        self._token = _level.set(level)
        self._callbacks_token = _callbacks.set(callbacks)
        lend(level, callbacks)

    def __enter__(self) -> RuntimeChecks:
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            _level.reset(self._token)
            _callbacks.reset(self._callbacks_token)
        except (ValueError, RuntimeError):  # left in another context, or twice
            _level.set(self._previous[0])
            _callbacks.set(self._previous[1])
        lend(_level.get(), _callbacks.get())

    def __repr__(self) -> str:
        if self.callbacks:
            return f"typecheck_guard.runtime_checks({self.level!r}, callbacks=True)"
        return f"typecheck_guard.runtime_checks({self.level!r})"


def runtime_checks(
    level: Literal["allow", "log", "disallow"], *, callbacks: bool = False
) -> RuntimeChecks:
    """What to do when a typecheck runs while a jitted function is called, outside
    tracing.

    Modelled on `jax.transfer_guard`. A call of a `jax.jit`, `jax.pmap`,
    `equinox.filter_jit` or `flax.nnx.jit` function runs the function's body only
    when JAX traces it, so any typecheck that runs outside tracing — a jaxtyped or
    beartype/typeguard-checked `__init__` reached when JAX unflattens an output, a
    checked function or an `isinstance(x, PyTree[...])` in a pytree's unflatten —
    runs again on every call. The first call is watched too (the unflatten of its
    outputs runs outside tracing); checks while JAX traces are never flagged.

    - `"allow"` (the default): checks run, unwatched.
    - `"log"`: each site (what was checked, the checker, the jitted function and the
      call site) is logged once, on the `typecheck_guard` logger.
    - `"disallow"`: the call raises `typecheck_guard.RuntimeTypecheckError` (after
      it completed, unless it raised its own error).

    Checks inside host callbacks (`jax.pure_callback`, `jax.experimental.io_callback`,
    `jax.debug.callback`) are their own kind: a callback runs its Python on every
    call by design, so `"log"` logs them (as callback sites) but `"disallow"` does
    not raise for them unless `callbacks=True`.

    One object, two forms: `runtime_checks("log")` sets the level for the current
    thread (or asyncio task) from now on; `with runtime_checks("disallow"): ...`
    sets it for the block and puts back the previous level on exit, also when the
    block raises. Threads and tasks are isolated; a host callback that JAX runs
    on one of its runtime's own threads, which no `runtime_checks` reaches, takes
    the level the program last set or last called a jitted function at, on any of
    its threads.

    The guard sees jitted callables created after a level other than `"allow"` was
    first set in the process (it wraps `jax.jit` & co from then on, for the rest of
    the process; a wrapped call costs under a microsecond while nothing is watched).
    Set a level at the top of your program, before your jitted functions are
    defined; the pytest plugin does this for you.

    **Arguments:**

    - `level`: `"allow"`, `"log"` or `"disallow"`.
    - `callbacks`: with `"disallow"`, also raise for checks inside host callbacks
      that ran on this thread during the call (a callback that JAX runs on another
      thread, or after the call returned, is logged instead: there is no call left
      to raise from).

    **Returns:**

    The setting, already in effect; use it in a `with` statement to scope it.

    **Raises:**

    `ValueError` for any other level; `TypeError` if `callbacks` is not a bool.

    !!! Example

        ```python
        typecheck_guard.runtime_checks("log")  # top of the script
        step = jax.jit(step)
        with typecheck_guard.runtime_checks("disallow"):
            for batch in data:
                state = step(state, batch)  # raises if a check runs per call
        ```
    """
    if not isinstance(level, str) or level not in LEVELS:
        raise ValueError(UNKNOWN_LEVEL.format(level=level))
    if not isinstance(callbacks, bool):
        raise TypeError(
            "typecheck_guard.runtime_checks: `callbacks` must be True or False, got "
            f"{callbacks!r}."
        )
    if level != "allow":
        _pin()
    return RuntimeChecks(level, callbacks)
