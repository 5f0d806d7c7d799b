"""What we know about each registered class: how we adapted it, why `install()` left
it to its library, and the route it was registered through, worded once for
`unadapted()`, `typecheck-guard scan` and our error messages.

Kept apart from `_register.py` (which registers) and `_unadapted.py` (which reads
JAX's registry) so that neither imports the other.
"""

from __future__ import annotations

import functools as ft
import threading
import weakref
from typing import Any

__all__ = [
    "adapted_how",
    "is_dataclass_entry",
    "record_route",
    "refused_why",
    "registration_of",
]

# class -> how it was adapted ("typecheck_guard.register_dataclass",
# "flax.struct.dataclass", "chex.dataclass", ...).
# Weak: we must not be the reason a class stays alive (JAX's registry may be).
_adapted: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
# class -> why install() left it to its library's own registration.
_refused: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
# class -> the route it was registered through, as we show it.
_routes: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
# Registration with JAX is a check-then-act on a shared registry.
lock = threading.RLock()

JAX_DATACLASS = "jax.tree_util.register_dataclass"
FLAX_STRUCT = "flax.struct.dataclass"
CHEX = "chex.dataclass"


def adapted_how(cls: type) -> str | None:
    """How typecheck_guard registered `cls`, or `None` if it did not."""
    return _adapted.get(cls)


def refused_why(cls: type) -> str | None:
    """Why `install()` left `cls` to its library's own unflatten, or `None`."""
    return _refused.get(cls)


def record_route(cls: type, route: str) -> None:
    _routes[cls] = route


def mark_adapted(cls: type, how: str) -> None:
    _adapted[cls] = how
    _routes[cls] = how


def mark_refused(cls: type, route: str, reason: str) -> None:
    _refused[cls] = reason
    _routes[cls] = route


def _flax_label(cls: type) -> str:
    # flax.struct.dataclass is also what `PyTreeNode` subclasses (and so TrainState
    # subclasses) go through; we name the one the user wrote.
    for klass in cls.__mro__[1:]:
        if klass.__module__.startswith("flax.training") and (
            klass.__name__ == "TrainState"
        ):
            return "flax.struct.PyTreeNode (a TrainState subclass)"
    for klass in cls.__mro__[1:]:
        if klass.__module__ == "flax.struct" and klass.__name__ == "PyTreeNode":
            return "flax.struct.PyTreeNode subclass"
    return FLAX_STRUCT


def unflatten_of(entry: Any) -> Any:
    """The function a JAX registry entry unflattens with."""
    fn = getattr(entry, "from_iter", None)
    while isinstance(fn, ft.partial):
        fn = fn.func
    return getattr(fn, "__func__", fn)


def is_dataclass_entry(entry: Any) -> bool:
    """Whether a registry entry is JAX's own `register_dataclass`."""
    fn = unflatten_of(entry)
    module = getattr(fn, "__module__", "") or ""
    qualname = getattr(fn, "__qualname__", "") or ""
    # `register_dataclass.<locals>.unflatten_func` up to jax 0.10,
    # `_register_dataclass.<locals>.unflatten_func` from jax 0.11 on.
    return module == "jax._src.tree_util" and (
        qualname.split(".")[0].lstrip("_") == "register_dataclass"
    )


def registration_of(cls: type, entry: Any) -> str:
    """The route `cls` was registered through, in the words we show the user:
    `"flax.struct.dataclass"`, `"flax.struct.PyTreeNode subclass"`,
    `"jax.tree_util.register_dataclass"`, `"chex.dataclass"`,
    `"register_pytree_node (unflatten: ...)"`, ..."""
    route = _routes.get(cls)
    if route is None:
        fn = unflatten_of(entry)
        module = getattr(fn, "__module__", "") or ""
        qualname = getattr(fn, "__qualname__", "") or ""
        if is_dataclass_entry(entry):
            # Registered before install(): flax marks its classes.
            route = FLAX_STRUCT if "_flax_dataclass" in vars(cls) else JAX_DATACLASS
        elif module == "chex._src.dataclass":
            route = CHEX
        else:
            return f"register_pytree_node (unflatten: {module}.{qualname})"
    return _flax_label(cls) if route == FLAX_STRUCT else route
