"""Marked unflattens: what `install()` registers for a class whose own unflatten must
run (a custom node's `tree_unflatten`, a dataclass we can't rebuild with `__new__`,
chex's unflatten of a class with a `__post_init__`).

It is the class's own unflatten, called with JAX's mark set ("JAX is unflattening
`cls`", `_unflatten/_state.py`), so that the checker layers of `cls`'s constructor
skip their check for exactly the construction this unflatten makes, and everything
else runs as without us: the `__init__` body, `__post_init__`, other decorators,
`__new__`, and the constructions nested in them, which are checked. Values are
identical by construction: the same code runs, less the check.

The guards that read the mark are put on the class at its first unflatten, when the
decorators stacked above its registration (`@jaxtyped` above `@struct.dataclass`)
have wrapped its `__init__`, and again whenever `__init__` is replaced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .._unflatten._guards import guard_class, register_wrapper
from .._unflatten._records import (
    HOOKS,
    builds_with_new,
    hooks_called_by,
    mark_blocked,
)
from ._unskippable import warn_unskippable

__all__ = ["activate", "marks_calls", "preparer", "wants_mark"]

# Whether `install()` is in effect: after `uninstall()` the wrappers JAX's registry
# still holds guard nothing, and their classes are checked as without us.
_active = False


def activate(stack: Any) -> None:
    """Part of `install()`: marked unflattens guard their classes until `stack`
    closes."""
    global _active
    _active = True
    stack.callback(_deactivate)


def _deactivate() -> None:
    global _active
    _active = False


def preparer(cls: type, fn: Any, hooks: tuple[str, ...] = HOOKS) -> Callable[[], None]:
    """What a generated marked unflatten `fn` runs at its first call: guard `cls`'s
    checked hooks among `hooks` (those its unflatten calls), record why one can't be
    skipped, and remember which `__init__` that was judged for."""

    def prepare() -> None:
        if not _active:
            return
        blocked = guard_class(cls, hooks)
        mark_blocked(cls, blocked)
        if blocked is not None:
            warn_unskippable(cls, hooks)
        register_wrapper(cls, fn.__globals__["_where"])
        fn.__globals__["_init"] = cls.__init__

    return prepare


def marks_calls(cls: type, fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """`fn`, `cls`'s own unflatten, wrapped to set JAX's mark around each call."""
    from ._codegen import generate_marked_unflatten

    out = generate_marked_unflatten(cls, fn, lambda: None)
    out.__globals__["_prepare"] = preparer(cls, out, hooks_called_by(fn))
    return out


def wants_mark(cls: Any, unflatten: Any) -> bool:
    """Whether `install()` wraps this registration's unflatten: not for what is not a
    class, not for our own generated functions, and not for the libraries whose
    unflatten calls no constructor hook (Equinox, Flax NNX, JAX's own nodes)."""
    if not isinstance(cls, type) or not callable(unflatten):
        return False
    if hasattr(unflatten, "__typecheck_guard_plain__"):
        return False
    return not builds_with_new(cls, unflatten)
