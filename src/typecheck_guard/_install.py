"""`install()` / `uninstall()`: every patch we make, kept in one `ExitStack` so that
it can be undone exactly (the design of chex's `fake.py`)."""

from __future__ import annotations

import contextlib
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

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
    as they are.

    `install()` imports nothing: each part patches its library when the program
    imports it (right after the library's own code runs, before the `import`
    returns), or at once if it is imported already. So JAX and jaxtyping read
    their configuration (`JAX_ENABLE_X64`, `JAX_PLATFORMS`, `JAXTYPING_DISABLE`,
    ...) when the program imports them, as without us, and flax and chex may come
    before or after.

    What you give up: a tree operation is not re-checked, so one that builds values
    the check would reject (`jax.tree.map(lambda x: x.astype(jnp.int32), state)`)
    returns them where plain JAX raises; `typecheck_guard.check(tree)` runs those
    checks on demand.

    Classes registered before `install()` are left as they were:
    `typecheck_guard.unadapted()` lists them, and `typecheck_guard.unflatten_safe`
    covers them. When JAX is imported already, `install()` warns about them with a
    `typecheck_guard.UnadaptedClassesWarning`.

    It also turns on the exact cache of `isinstance(x, PyTree[...])` checks (see
    `typecheck_guard.cache_pytree_checks`): an eager call that passes a tree with the
    same structure, leaf shapes and dtypes as before is not checked leaf by leaf again.

    **Arguments:**

    - `pytree_cache`: `False` to leave `PyTree[...]` checks uncached.

    Each part (the adapter of JAX's registrations and flax.struct, the chex adapter,
    the `PyTree` cache) checks the versions and private APIs it relies on when it
    patches. One that can't work is switched off with a
    `typecheck_guard.PartsDisabledWarning` naming the library and what is off: at
    `install()` for the libraries imported already (one warning naming them all;
    `RuntimeError`, naming every problem, when no part can work), else at the
    `import` of the library.

    Idempotent. Undo with `typecheck_guard.uninstall()`.

    !!! Example

        ```python
        import typecheck_guard
        typecheck_guard.install()  # first thing, before your classes are defined
        ```
    """
    global _stack, _starting
    __tracebackhide__ = True
    if not isinstance(pytree_cache, bool):
        from ._errors import PYTREE_CACHE_NOT_BOOL

        raise TypeError(PYTREE_CACHE_NOT_BOOL.format(value=pytree_cache))
    # Our own modules, imported before we take the lock: a part that starts in
    # another thread, inside an import, takes it (see `_part`).
    from ._compat._importhook import after_all_imported, imported, settle
    from ._errors import INSTALL_REFUSED, PARTS_DISABLED, Unsupported

    parts = _parts(pytree_cache)
    with _lock:
        if _stack is not None:
            return
        jax_imported = imported("jax") is not None
        off: dict[str, str] = {}
        stack = contextlib.ExitStack()
        _starting = stack
        try:
            for name, (modules, start) in parts.items():
                # A part whose libraries are imported starts here and now, and one
                # that can't work is left off: an old chex must not cost a user the
                # flax adapters. We report every problem at once, not the first one.
                try:
                    after_all_imported(modules, _part(name, start, stack), stack)
                except Unsupported as e:
                    off[name] = _problem(name, e)
        except BaseException:
            stack.close()
            raise
        finally:
            _starting = None
        if off and len(off) == len(parts):
            stack.close()
            raise RuntimeError(INSTALL_REFUSED.format(problems="\n".join(off.values())))
        _stack = stack
    # A library another thread is importing right now, past our finder: its part
    # starts once that import is done (we hold no lock here, and that thread may
    # take ours to start it).
    settle()
    if off:
        warnings.warn(
            PARTS_DISABLED.format(problems="\n".join(off.values())),
            PartsDisabledWarning,
            stacklevel=2,
        )
    if not jax_imported or "jax" in off:
        # Without JAX, nothing is registered yet; with its part off, we can't read
        # its registry either.
        return
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


_Start = Callable[[contextlib.ExitStack], None]


def _parts(pytree_cache: bool) -> dict[str, tuple[tuple[str, ...], _Start]]:
    """Each part of `install()`: the modules it patches or reads (it starts once
    they are all imported) and what starts it."""
    from ._adapt import _chex, _jax
    from ._cache import _pytree

    parts: dict[str, tuple[tuple[str, ...], _Start]] = {
        "jax": (("jax",), _jax.patch),
        # Right after chex's dataclass module, before the rest of chex: chex's own
        # modules may define chex dataclasses.
        "chex": ((_chex.MODULE,), _chex.patch),
    }
    if pytree_cache:
        # The package and the module of `PyTree` (which imports jax), whichever
        # comes last: jaxtyping imports it lazily, at `from jaxtyping import PyTree`.
        parts["pytree_cache"] = (
            ("jax", "jaxtyping", "jaxtyping._pytree_type"),
            _pytree.start,
        )
    return parts


# The stack `install()` is filling, while it holds `_lock`: a part that starts then
# starts inside `install()`, which reports its problem with the others.
_starting: contextlib.ExitStack | None = None


def _part(name: str, start: _Start, stack: contextlib.ExitStack) -> Callable[[], None]:
    """What the post-import hook calls when the modules of part `name` are imported:
    `start(stack)`, unless `uninstall()` came first."""

    def on_import() -> None:
        __tracebackhide__ = True
        from ._errors import Unsupported

        with _lock:
            if _starting is stack:
                start(stack)  # inside install(): it reports a problem
                return
            if _stack is not stack:
                return  # uninstalled since
            try:
                start(stack)
                return
            except Unsupported as e:
                problem = _problem(name, e)
        _disabled_at_import(name, problem)

    return on_import


def _problem(name: str, e: Exception) -> str:
    return f"- {_WHAT.get(name, name)}: {e}"


# Set by the start-up hook (`_startup.py`), whose problems are lines on stderr and
# never exceptions (`python -W error` must not turn one into a failed `import`): a
# part switched off at its library's import is then one such line.
say_instead: Callable[[str], None] | None = None

# The library each part waits for, whose import statement a late warning points at.
_LIBRARY: dict[str, str] = {"jax": "jax", "chex": "chex", "pytree_cache": "jaxtyping"}


def _disabled_at_import(name: str, problem: str) -> None:
    """A part that can't work, found when the program imported its library: a
    `PartsDisabledWarning` pointing at that import (a line on stderr under the
    start-up hook, whose problems are never exceptions)."""
    from ._errors import PARTS_DISABLED

    message = PARTS_DISABLED.format(problems=problem)
    if say_instead is not None:
        say_instead(f"typecheck_guard: PartsDisabledWarning: {message}")
        return
    # The first frame outside importlib, us and the library being imported: the
    # program's `import` (or that of the library that imported it).
    # (`warnings` counts no frame of importlib's bootstrap in `stacklevel`.)
    library = _LIBRARY.get(name, name)
    frame, level = sys._getframe(), 1
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if not (
            module.startswith("typecheck_guard.")
            or module == library
            or module.startswith(library + ".")
        ):
            break
        frame, level = frame.f_back, level + 1
        while frame is not None and _bootstrap(frame):
            frame = frame.f_back
    warnings.warn(message, PartsDisabledWarning, stacklevel=level if frame else 1)


def _bootstrap(frame: Any) -> bool:
    filename = frame.f_code.co_filename
    return "importlib" in filename and "_bootstrap" in filename


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
