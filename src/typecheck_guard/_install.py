"""`install()` / `uninstall()`: every patch we make, kept in one `ExitStack` so that
it can be undone exactly (the design of chex's `fake.py`)."""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable

__all__ = [
    "install",
    "installed",
    "uninstall",
    "PartsDisabledWarning",
    "UnadaptedClassesWarning",
]


class UnadaptedClassesWarning(UserWarning):
    """`install()` found registered classes that still run a typecheck on unflatten."""


class PartsDisabledWarning(UserWarning):
    """`install()` switched off the parts that an installed library's version (or a
    changed private API) can't support, and installed the rest. The message names
    every such library and what is off."""


_lock = threading.RLock()
_stack: contextlib.ExitStack | None = None

# What each part does, for the message that says it is off.
_WHAT: dict[str, str] = {
    "jax": "classes registered through jax.tree_util.register_dataclass, "
    "flax.struct and TrainState are not adapted (they re-run their checks on "
    "unflatten; typecheck_guard.unflatten_safe still works)",
    "chex": "chex.dataclass classes are not adapted",
    "pytree_cache": "PyTree[...] checks are not cached",
}


def installed() -> bool:
    """Whether `typecheck_guard.install()` is in effect."""
    return _stack is not None


def install(*, pytree_cache: bool = True) -> None:
    """Make typechecked pytree classes unflatten without re-running their checks, and
    cache the verdicts of `PyTree[...]` checks.

    After this, every class registered through `jax.tree_util.register_dataclass`,
    `flax.struct.dataclass`, a `flax.struct.PyTreeNode` subclass (including
    subclasses of `flax.training.train_state.TrainState`) and `chex.dataclass` is
    registered with generated flatten/unflatten functions that build instances with
    `object.__new__`: unflattening (after every jitted call, in `tree_map`, ...) never
    calls `__init__` or `__post_init__`, so no check runs. Constructions are checked
    exactly as before. Works whether flax and chex are imported before or after.

    A class is adapted only when that provably builds the same object as the
    library's own unflatten: a dataclass whose `__init__` is the generated one
    (under typechecker wrappers), with no `__post_init__` other than an empty one,
    no `InitVar`, no custom `__new__`, metaclass `__call__` or `__setattr__`, and a
    default for every field not passed to `__init__`. Every other class keeps its
    library's registration and is listed, with the reason, by
    `typecheck_guard.unadapted()`.

    Classes registered before `install()` are left as they were: see
    `typecheck_guard.unadapted()`, and `typecheck_guard.unflatten_safe` for them.

    It also turns on the exact cache of `isinstance(x, PyTree[...])` checks (see
    `typecheck_guard.cache_pytree_checks`): an eager call that passes a tree with the
    same structure, leaf shapes and dtypes as before is not checked leaf by leaf again.

    **Arguments:**

    - `pytree_cache`: `False` to leave `PyTree[...]` checks uncached.

    Each part (the adapter of `register_dataclass` / flax.struct, the chex adapter,
    the `PyTree` cache) checks the versions and private APIs it relies on. One that
    can't work is switched off, with one `typecheck_guard.PartsDisabledWarning`
    naming every library outside its range and what is off; `install()` raises
    `RuntimeError`, naming every problem, only when no part can work.

    Idempotent. Undo with `typecheck_guard.uninstall()`.

    !!! Example

        ```python
        import typecheck_guard
        typecheck_guard.install()  # first thing, before your classes are defined
        ```
    """
    global _stack
    __tracebackhide__ = True
    if not isinstance(pytree_cache, bool):
        from ._errors import PYTREE_CACHE_NOT_BOOL

        raise TypeError(PYTREE_CACHE_NOT_BOOL.format(value=pytree_cache))
    with _lock:
        if _stack is not None:
            return
        from ._adapt import _chex, _jax
        from ._cache import _pytree
        from ._errors import INSTALL_REFUSED, PARTS_DISABLED, Unsupported

        # Each part checks the versions and internals it relies on when it starts,
        # and one that can't work is left off: an old chex must not cost a user the
        # flax adapters. We report every problem at once, not the first one.
        parts: dict[str, Callable[[contextlib.ExitStack], None]] = {
            "jax": _jax.patch,
            "chex": _chex.patch,
        }
        if pytree_cache:
            parts["pytree_cache"] = _pytree.start
        off: dict[str, str] = {}
        stack = contextlib.ExitStack()
        try:
            for name, start in parts.items():
                try:
                    start(stack)
                except Unsupported as e:
                    off[name] = f"- {_WHAT.get(name, name)}: {e}"
        except BaseException:
            stack.close()
            raise
        if off and len(off) == len(parts):
            stack.close()
            raise RuntimeError(INSTALL_REFUSED.format(problems="\n".join(off.values())))
        _stack = stack
    if off:
        warnings.warn(
            PARTS_DISABLED.format(problems="\n".join(off.values())),
            PartsDisabledWarning,
            stacklevel=2,
        )
    if "jax" in off:
        return  # we can't read JAX's registry either
    from ._adapt._unadapted import unadapted

    left = unadapted()
    if left:
        names = ", ".join(r.cls.__qualname__ for r in left[:5])
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        warnings.warn(
            f"typecheck_guard.install(): {len(left)} pytree class(es) registered "
            f"before install() still run their typecheck on every unflatten: "
            f"{names}{more}. Define them after install(), or wrap the jitted "
            "functions that return them in typecheck_guard.unflatten_safe(...); "
            "typecheck_guard.unadapted() lists them.",
            UnadaptedClassesWarning,
            stacklevel=2,
        )


def uninstall() -> None:
    """Undo `install()`: every patched function is put back exactly as it was, and
    every method `unflatten_safe` guarded is restored.

    Classes adapted while installed stay registered with their `__new__`-based
    functions: JAX has no way to unregister a pytree node.
    """
    global _stack
    with _lock:
        from ._unflatten._safe import unguard_all

        if _stack is not None:
            stack, _stack = _stack, None
            stack.close()
        unguard_all()
