"""What we know about each registered class: how typecheck_guard registered it
(through a generated `__new__`-based unflatten, or through its own unflatten wrapped
so that JAX's calls are marked), why a check still runs on its unflatten, and the
route it was registered through, worded once for `unadapted()`, `typecheck-guard
scan`, the profiler and our error messages.

Data only: `_adapt/` writes it when it registers, the guards and the reports read it.
"""

from __future__ import annotations

import functools as ft
import threading
import weakref
from typing import Any, Final

__all__ = [
    "HOOKS",
    "NEW_BASED",
    "adapted_how",
    "function_of",
    "blocked_why",
    "builds_with_new",
    "hooks_called_by",
    "hooks_of",
    "is_dataclass_entry",
    "is_ours",
    "marked_why",
    "record_route",
    "registration_of",
    "route_of_unflatten",
]

# class -> the route typecheck_guard registered it through ("flax.struct.dataclass",
# "register_pytree_node", "chex.dataclass", ...). Weak: we must not be the reason a
# class stays alive (JAX's registry may be).
_adapted: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
# class -> why its unflatten is its library's own, wrapped (not a generated
# `__new__`-based one).
_marked: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
# class -> why a check still runs when JAX unflattens it.
_blocked: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
# class -> the route it was registered through, as we show it.
_routes: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
# Registration with JAX is a check-then-act on a shared registry.
lock = threading.RLock()

JAX_DATACLASS = "jax.tree_util.register_dataclass"
FLAX_STRUCT = "flax.struct.dataclass"
CHEX = "chex.dataclass"
PYTREE_NODE = "jax.tree_util.register_pytree_node"

# The constructor hooks an unflatten can run, in the order guards look at them.
HOOKS: Final = ("__init__", "__post_init__", "__setattr__")
# The names of the methods that build an object: a frame running one is building
# some object of its own (an `__init__` or `__post_init__` body, a custom `__new__`,
# a `__setattr__`), so a construction inside it is not an unflatten's.
CONSTRUCTOR_NAMES: Final = frozenset({*HOOKS, "__new__"})

# Libraries whose registered unflatten builds instances with `__new__` and calls no
# constructor hook: their classes (subclasses of their base classes, or of classes
# made by their metaclasses; their unflattens are generated per class, named after
# the user's module) never re-run a check on unflatten, and get no wrapper. JAX's
# own nodes check nothing either: their unflatten functions are JAX's.
NEW_BASED: Final = ("equinox.", "flax.nnx.")
_JAX: Final = ("jax.", "jaxlib.")


def adapted_how(cls: type) -> str | None:
    """The route typecheck_guard registered `cls` through, or `None` if it did not
    register it (it was registered before `install()`, or by a library we leave
    alone)."""
    return _adapted.get(cls)


def is_ours(cls: type) -> bool:
    return cls in _adapted


def marked_why(cls: type) -> str | None:
    """Why `cls` unflattens through its library's own unflatten (marked, so that its
    check is skipped) rather than a generated `__new__`-based one; `None` for a
    class with the generated one, or one we did not register."""
    return _marked.get(cls)


def blocked_why(cls: type) -> str | None:
    """Why a check still runs when JAX unflattens `cls`, though we registered it."""
    return _blocked.get(cls)


def record_route(cls: type, route: str) -> None:
    _routes[cls] = route


def mark_adapted(cls: type, how: str) -> None:
    _adapted[cls] = how
    _routes[cls] = how
    _marked.pop(cls, None)


def mark_marked(cls: type, how: str, reason: str) -> None:
    _adapted[cls] = how
    _routes[cls] = how
    _marked[cls] = reason


def mark_blocked(cls: type, reason: str | None) -> None:
    if reason is None:
        _blocked.pop(cls, None)
    else:
        _blocked[cls] = reason


def builds_with_new(cls: Any, unflatten: Any) -> bool:
    """Whether `cls`, registered with `unflatten`, unflattens without calling a
    constructor hook: a class of Equinox or Flax NNX, or one of JAX's own nodes."""
    if isinstance(cls, type):
        for klass in (*type(cls).__mro__, *cls.__mro__[1:]):
            if (getattr(klass, "__module__", None) or "").startswith(NEW_BASED):
                return True
    fn = function_of(unflatten)
    module = getattr(fn, "__module__", None) or ""
    if module == "jax._src.tree_util" and is_dataclass_entry(_Entry(fn)):
        return False  # JAX's own `register_dataclass`: `cls(**fields)`
    return module.startswith(_JAX)


class _Entry:
    def __init__(self, fn: Any):
        self.from_iter = fn


def hooks_of(cls: type, entry: Any) -> tuple[str, ...]:
    """The constructor hooks a registry entry's unflatten runs (see
    `hooks_called_by`)."""
    del cls
    return hooks_called_by(getattr(entry, "from_iter", None))


def hooks_called_by(unflatten: Any) -> tuple[str, ...]:
    """The constructor hooks an unflatten function runs: chex's own unflatten
    builds with `__new__` and calls `__post_init__`; every other one we assume calls
    the constructor."""
    if getattr(function_of(unflatten), "__module__", None) == "chex._src.dataclass":
        return ("__post_init__",)
    return HOOKS


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


def function_of(fn: Any) -> Any:
    """The plain function under `functools.partial`s and bound methods."""
    while isinstance(fn, ft.partial):
        fn = fn.func
    return getattr(fn, "__func__", fn)


def unflatten_of(entry: Any) -> Any:
    """The function a JAX registry entry unflattens with."""
    return function_of(getattr(entry, "from_iter", None))


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


def route_of_unflatten(fn: Any) -> str:
    """The route a class registered with unflatten function `fn` came through, in
    the words we show the user."""
    fn = function_of(fn)
    module = getattr(fn, "__module__", "") or ""
    if module == "chex._src.dataclass":
        return CHEX
    qualname = getattr(fn, "__qualname__", "") or ""
    return f"register_pytree_node (unflatten: {module}.{qualname})"


def registration_of(cls: type, entry: Any) -> str:
    """The route `cls` was registered through, in the words we show the user:
    `"flax.struct.dataclass"`, `"flax.struct.PyTreeNode subclass"`,
    `"jax.tree_util.register_dataclass"`, `"chex.dataclass"`,
    `"register_pytree_node (unflatten: ...)"`, ..."""
    route = _routes.get(cls)
    if route is None:
        if not is_dataclass_entry(entry):
            return route_of_unflatten(unflatten_of(entry))
        # Registered before install(): flax marks its classes.
        route = FLAX_STRUCT if "_flax_dataclass" in vars(cls) else JAX_DATACLASS
    return _flax_label(cls) if route == FLAX_STRUCT else route
