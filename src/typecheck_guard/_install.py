"""`install()` / `uninstall()`: every patch we make, kept in one `ExitStack` so that
it can be undone exactly (the design of chex's `fake.py`)."""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable

from ._errors import UnadaptedClassesWarning

__all__ = [
    "install",
    "installed",
    "uninstall",
    "PartsDisabledWarning",
    "UnadaptedClassesWarning",
]


class PartsDisabledWarning(UserWarning):
    """`install()` switched off the parts that an installed library's version (or a
    changed private API) can't support, and installed the rest. The message names
    every such library and what is off."""


_lock = threading.RLock()
_stack: contextlib.ExitStack | None = None

# What each part does, for the message that says it is off.
_WHAT: dict[str, str] = {
    "jax": "classes registered through jax.tree_util (register_pytree_node, "
    "register_dataclass, flax.struct, TrainState) still re-run their checks on "
    "unflatten (typecheck_guard.unflatten_safe still works)",
    "chex": "chex.dataclass classes still re-run their __post_init__ check on "
    "unflatten",
    "pytree_cache": "PyTree[...] checks are not cached",
}


def installed() -> bool:
    """Whether `typecheck_guard.install()` is in effect."""
    return _stack is not None


def install(*, pytree_cache: bool = True) -> None:
    """Make every pytree class registered from now on unflatten without re-running
    its typecheck, and cache the verdicts of `PyTree[...]` checks.

    JAX's registry is the one place that knows a call is an unflatten. After this,
    what JAX's registry holds for a class registered through
    `jax.tree_util.register_pytree_node`, `register_pytree_with_keys`,
    `register_pytree_node_class`, `register_dataclass`, `flax.struct.dataclass`
    (`PyTreeNode`, `TrainState`) or `chex.dataclass` is either a generated
    unflatten that builds the instance with `object.__new__` (where that provably
    builds what the library's own unflatten builds), or the class's own unflatten,
    wrapped to mark "JAX is unflattening this class": the checker layers of its
    constructor then skip their check for exactly that construction, and the rest
    runs as without us (the `__init__` body, `__post_init__`, other decorators,
    constructions nested in them, which are checked). Every construction you write
    is checked as before, and every unflatten returns what JAX's returns. Equinox
    modules and Flax NNX objects already unflatten without `__init__` and are left
    as they are. Works whether flax and chex are imported before or after.

    What you give up: a tree operation is not re-checked, so one that builds values
    the check would reject (`jax.tree.map(lambda x: x.astype(jnp.int32), state)`)
    returns them where plain JAX raises; `typecheck_guard.check(tree)` runs those
    checks on demand.

    Classes registered before `install()` are left as they were:
    `typecheck_guard.unadapted()` lists them, and `typecheck_guard.unflatten_safe`
    covers them.

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
            f"{names}{more}. Call install() before they are defined (with no code "
            "change: `typecheck-guard run your_script.py`, or `pytest "
            "--typecheck-guard-install`), or wrap the jitted functions that return "
            "them in typecheck_guard.unflatten_safe(...); typecheck_guard.unadapted() "
            "lists them.",
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
        from ._unflatten._guards import unguard_all
        from ._unflatten._safe import forget

        if _stack is not None:
            stack, _stack = _stack, None
            stack.close()
        unguard_all()
        forget()
