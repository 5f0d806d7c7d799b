"""An exact cache of `isinstance(x, PyTree[...])` verdicts.

jaxtyping checks `PyTree[L]` by decorating a fresh checker and calling it on every
node and leaf of the value: milliseconds for a few hundred leaves, on every eager
call. Whether it passes depends only on what `_reads.py` lists, so we wrap
`_MetaPyTree.__instancecheck__` (what beartype, typeguard and a bare `isinstance` all
end in) with a bounded LRU cache whose key is

- the annotation (through its `Reads`, one per annotation, compared by identity, so
  the key does not keep the annotation alive);
- the treedef of `jax.tree_util.tree_flatten(x)`: node types, dict keys, aux data;
- per leaf: the aval of a JAX array (its shape, dtype, weak type and sharding in one
  attribute read; JAX interns avals, so comparing them is an identity check), the
  type, shape and dtype of a NumPy array or any other object with both, and the type
  of anything else. Every leaf type we cache decides a plain leaf by its type alone,
  so a float hyperparameter that changes every step still hits, and we hold no
  reference to user objects. Only a `Literal` reads values: then the key holds the
  value of each (scalar) leaf, and array leaves make the check uncacheable;
- whether a `@jaxtyped` memo is active (without one, every leaf checks against fresh
  dims), and then the memo entries the check reads: bound dims, variadic dims,
  structure names, one `?dim` entry per leaf.

Only passes are stored: a failing check runs again and raises or returns exactly what
it would without us. A miss runs jaxtyping's own check and records what it did to the
memo: the entries it wrote into the memo dicts, and, when a failed union alternative
inside made jaxtyping swap in fresh copies of the dicts (`set_shape_memo`), that it
did and what the fresh dicts hold. A hit replays exactly that, so later arguments,
`jaxtyped`'s error messages (which print the memo it pushed) and the return check see
the same memo as without the cache.

Nested checks (inside the flatten of an enclosing `PyTree` check, or under its
`?dim` leaf path) and checks of tracers run uncached: they depend on state outside
the key, and run once per trace anyway.
"""

from __future__ import annotations

import collections
import threading
import weakref
from contextlib import AbstractContextManager
from enum import Enum
from typing import Any, Final, NamedTuple

from .._errors import PYTREE_CACHE_UNAVAILABLE, Unsupported

__all__ = [
    "PyTreeCacheInfo",
    "cache_pytree_checks",
    "clear_pytree_cache",
    "pytree_cache_info",
]

MAXSIZE: Final = 256
"""Entries kept. A program has a handful of (annotation, tree signature) pairs per
annotated function; shape churn (say, a ragged last batch per dataset) adds one entry
per new shape, and the least recently used ones go."""


class PyTreeCacheInfo(NamedTuple):
    """What `typecheck_guard.pytree_cache_info()` returns, as `functools.lru_cache`'s
    `cache_info()` does."""

    hits: int
    """Checks answered from the cache."""
    misses: int
    """Cacheable checks that ran jaxtyping's check (and stored it if it passed)."""
    maxsize: int
    """How many entries the cache keeps."""
    currsize: int
    """How many entries it holds now."""


class _Effects(NamedTuple):
    inplace: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]
    replaced: bool
    final: tuple[dict[str, Any], dict[str, Any], dict[str, Any]]


class _Uncacheable(Exception):
    pass


class _Key:
    # A key that hashes its parts once: a hit then costs one hash and one comparison
    # of the tree structure and leaf signature (about as much as the flatten that made
    # them), instead of two of each for `get` and `move_to_end`.
    __slots__ = ("parts", "hash", "comparable")

    def __init__(self, parts: tuple[Any, ...]):
        self.parts = parts
        self.hash = hash(parts)
        self.comparable = True

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Key):
            return False
        try:
            return self.parts == other.parts
        except Exception:
            # Aux data that can't be compared (JAX raises for arrays used as pytree
            # metadata): "not equal" makes it a miss, which runs the check, and
            # neither key is kept (see `_miss`).
            self.comparable = other.comparable = False
            return False


_MISSING: Final = object()
_UNMODELLED: Final = object()
_SCALARS: Final = frozenset({int, bool, float, complex, str, bytes, type(None)})

_lock = threading.RLock()
# key -> (the key as stored, so that `move_to_end` finds it by identity; effects).
_cache: collections.OrderedDict[_Key, tuple[_Key, _Effects | None]] = (
    collections.OrderedDict()
)
_hits = 0
_misses = 0
# id(annotation) -> (weak reference to it, its `Reads` or None when opaque).
_reads: dict[int, tuple[weakref.ref[Any], Any]] = {}

_enabled = True  # the switch
_owners: set[str] = set()  # who asked for the patch: "install", "switch"
_active = False  # _enabled and patched: read once per check
_original: Any = None  # what `_MetaPyTree.__instancecheck__` was before us
_jt: Any = None
_tree_flatten: Any = None
_array_impl: Any = None
_ndarray: Any = None
_jax_array: Any = None
_tracer: Any = None


# --- the check -----------------------------------------------------------------------


def _instancecheck(cls: Any, obj: Any) -> bool:
    # `jaxtyping._pytree_type._MetaPyTree.__instancecheck__` while the cache is on.
    global _hits, _misses
    if not _active or obj is None:
        return _original(cls, obj)
    reads = _reads_of(cls)
    jt = _jt
    if (
        reads is None
        or getattr(jt.treepath_storage, "value", None) is not None
        or jt.get_treeflatten_memo()
    ):
        return _original(cls, obj)
    try:
        leaves, treedef = _tree_flatten(obj)
        sig = _signature(leaves, reads.by_value)
    except Exception:
        # Tracers, unhashable leaves, and values JAX cannot flatten (let jaxtyping
        # say what it says about those).
        return _original(cls, obj)
    if jt.has_shape_memo():
        deps = _deps(reads, jt.get_shape_memo(), treedef) if reads.any_reads else ()
    else:
        deps = None
    try:
        key = _Key((reads, treedef, sig, deps))
    except TypeError:
        # A memo entry put there by someone else, or aux data of a pytree node, that
        # can't be hashed: such a value is checked every time.
        return _original(cls, obj)
    found = _cache.get(key)
    if found is not None:
        stored, effects = found
        try:
            _cache.move_to_end(stored)
        except KeyError:  # evicted by another thread just now
            pass
        _hits += 1
        if effects is not None:
            _replay(jt, effects)
        return True
    _misses += 1
    if not key.comparable:
        with _lock:
            for stored in [k for k in list(_cache) if not k.comparable]:
                del _cache[stored]
    return _miss(cls, obj, reads, key, treedef, deps is not None)


def _signature(leaves: list[Any], by_value: bool) -> tuple[Any, ...]:
    if by_value:
        return tuple([_value_key(x) for x in leaves])
    array_impl = _array_impl
    return tuple([x.aval if type(x) is array_impl else _leaf_key(x) for x in leaves])


def _leaf_key(x: Any) -> Any:
    t = type(x)
    if x.__class__ is not t:
        # `isinstance` also consults `__class__`, which proxies fake per instance.
        raise _Uncacheable
    if t is _ndarray:
        return (t, x.shape, x.dtype)
    if isinstance(x, _jax_array):
        if isinstance(x, _tracer):
            raise _Uncacheable
        return (t, x.aval)
    shape = getattr(x, "shape", _MISSING)
    dtype = getattr(x, "dtype", _MISSING)
    if shape is _MISSING or dtype is _MISSING:
        # Every leaf type we key (`_reads.py`) checks such a leaf by its type.
        return t
    key = (t, shape, dtype)
    hash(key)
    return key


def _value_key(x: Any) -> Any:
    t = type(x)
    if t in _SCALARS or (isinstance(x, Enum) and x.__class__ is t):
        return (t, x)
    raise _Uncacheable


def _deps(reads: Any, memos: Any, treedef: Any) -> tuple[tuple[Any, ...], ...]:
    single_names, variadic_names, structure_names = reads.names(treedef.num_nodes)
    single, variadic, pytree, _ = memos
    return (
        tuple([single.get(n, _MISSING) for n in single_names]),
        tuple([variadic.get(n, _MISSING) for n in variadic_names]),
        tuple([pytree.get(n, _MISSING) for n in structure_names]),
    )


def _miss(
    cls: Any, obj: Any, reads: Any, key: _Key, treedef: Any, memo_active: bool
) -> bool:
    if not memo_active:
        # Outside `@jaxtyped`, jaxtyping hands out throwaway memos: nothing to replay.
        out = _original(cls, obj)
        if out:
            _store(key, None)
        return out
    jt = _jt
    memos = jt.get_shape_memo()
    before = (memos[0].copy(), memos[1].copy(), memos[2].copy())
    out = _original(cls, obj)
    if out:
        effects = _effects(jt, reads, memos, before, treedef)
        if effects is _UNMODELLED:
            # The check wrote where its annotation says it cannot: our model of this
            # jaxtyping is wrong for this annotation. Check it uncached from now on.
            _remember(cls, None)
        else:
            _store(key, effects)
    return out


def _diff(now: dict[str, Any], old: dict[str, Any]) -> Any:
    if len(now) < len(old) or any(k not in now for k in old):
        return _UNMODELLED
    return {
        k: v
        for k, v in now.items()
        if k not in old or (old[k] is not v and old[k] != v)
    }


def _effects(jt: Any, reads: Any, memos: Any, before: Any, treedef: Any) -> Any:
    after = jt.get_shape_memo()
    replaced = after[0] is not memos[0]
    if any((a is not m) != replaced for a, m in zip(after, memos, strict=True)):
        return _UNMODELLED
    inplace = tuple(_diff(m, b) for m, b in zip(memos[:3], before, strict=True))
    final = (
        tuple(_diff(a, b) for a, b in zip(after[:3], before, strict=True))
        if replaced
        else ({}, {}, {})
    )
    names = reads.names(treedef.num_nodes)
    for written, allowed in zip(inplace + final, names + names, strict=True):
        if written is _UNMODELLED or not set(written).issubset(allowed):
            return _UNMODELLED
    if not replaced and not any(inplace):
        return None
    return _Effects(inplace, replaced, final)  # pyright: ignore[reportArgumentType]


def _replay(jt: Any, effects: _Effects) -> None:
    memos = jt.get_shape_memo()
    if effects.replaced:
        fresh = tuple(d.copy() for d in memos)
    for d, written in zip(memos[:3], effects.inplace, strict=True):
        if written:
            d.update(written)
    if effects.replaced:
        for d, written in zip(fresh[:3], effects.final, strict=True):  # pyright: ignore[reportPossiblyUnbound]
            if written:
                d.update(written)
        jt.set_shape_memo(*fresh)  # pyright: ignore[reportPossiblyUnbound]


def _store(key: _Key, effects: _Effects | None) -> None:
    if not key.comparable:
        return
    _cache[key] = (key, effects)
    while len(_cache) > MAXSIZE:
        try:
            _cache.popitem(last=False)
        except KeyError:
            break


# --- annotations ---------------------------------------------------------------------


def _reads_of(cls: Any) -> Any:
    entry = _reads.get(id(cls))
    if entry is not None and entry[0]() is cls:
        return entry[1]
    from ._reads import analyse

    return _remember(cls, analyse(cls, _jt))


def _remember(cls: Any, reads: Any) -> Any:
    key = id(cls)

    def forget(ref: weakref.ref[Any]) -> None:
        # The annotation is gone: so are its entries, which nothing can hit again.
        with _lock:
            if _reads.get(key, (None,))[0] is ref:
                del _reads[key]
            if reads is not None:
                for k in [k for k in list(_cache) if k.parts[0] is reads]:
                    _cache.pop(k, None)

    with _lock:
        _reads[key] = (weakref.ref(cls, forget), reads)
    return reads


# --- switching it on and off ---------------------------------------------------------


def _load_tools() -> None:
    global _jt, _tree_flatten, _array_impl, _ndarray, _jax_array, _tracer
    import jax
    import jax.core
    import numpy as np

    from .._compat._jaxtyping import load

    try:
        jt = load()
    except Unsupported as e:
        raise Unsupported(PYTREE_CACHE_UNAVAILABLE.format(reason=e)) from None
    try:
        from jax._src.array import ArrayImpl
    except ImportError:  # then every JAX array takes the general path below
        ArrayImpl = None
    _jt = jt
    _tree_flatten = jax.tree_util.tree_flatten
    _array_impl = ArrayImpl
    _ndarray = np.ndarray
    _jax_array = jax.Array
    _tracer = jax.core.Tracer


def _update() -> None:
    global _active, _original
    meta = _jt.meta_pytree if _jt is not None else None
    if _owners and meta is not None:
        current = meta.__dict__["__instancecheck__"]
        if current is not _instancecheck:
            _original = current
            meta.__instancecheck__ = _instancecheck
    elif meta is not None and meta.__dict__.get("__instancecheck__") is _instancecheck:
        meta.__instancecheck__ = _original
    _active = _enabled and bool(_owners)


def _acquire(owner: str) -> None:
    with _lock:
        if not _owners:
            _load_tools()
        _owners.add(owner)
        _update()


def _release(owner: str) -> None:
    with _lock:
        _owners.discard(owner)
        _update()
        if owner == "install" and not _owners:
            # `uninstall()` lets go of the stored treedefs (and the node classes they
            # hold). A `cache_pytree_checks(False)` block keeps them: they are still
            # exact when it ends.
            _cache.clear()


def start(stack: Any) -> None:
    """Our part of `typecheck_guard.install()`: undone when `stack` closes."""
    _acquire("install")
    stack.callback(_release, "install")


class _Restore:
    """Returned by `cache_pytree_checks`; as a context manager, puts the previous
    setting back on exit."""

    def __init__(self, enabled: bool, owned: bool):
        self._previous = (enabled, owned)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        global _enabled
        enabled, owned = self._previous
        with _lock:
            if owned:
                _acquire("switch")
            else:
                _release("switch")
            _enabled = enabled
            _update()

    def __repr__(self) -> str:
        return f"<typecheck_guard.cache_pytree_checks: previous enabled={self._previous[0]}>"


def cache_pytree_checks(enabled: bool = True) -> AbstractContextManager[None]:
    """Turn the cache of `PyTree[...]` checks on or off, for the whole process.

    `typecheck_guard.install()` turns it on (unless given `pytree_cache=False`);
    `cache_pytree_checks()` turns it on without `install()` too. While it is on, an
    `isinstance(x, PyTree[...])` check (run by beartype, typeguard, or yourself) that
    passed before for the same annotation, tree structure, leaf types, shapes and
    dtypes, and the same bound dims, passes again without running: the dims and
    structures it binds are bound as if it had run. A check that fails always runs,
    and raises the checker's own error.

    The setting is global, not per thread: a `with` block turns the cache off for
    every thread until it exits.

    **Arguments:**

    - `enabled`: `True` to cache, `False` to run every check.

    **Returns:**

    An object that, used as a context manager, restores the previous setting on exit.
    Calling the function alone changes the setting for good.

    !!! Example

        ```python
        import typecheck_guard

        typecheck_guard.install()  # caches PyTree checks from here on

        with typecheck_guard.cache_pytree_checks(False):
            train_step(params, batch)  # every PyTree check runs in here
        ```
    """
    global _enabled
    if not isinstance(enabled, bool):
        raise TypeError(
            f"typecheck_guard.cache_pytree_checks expects True or False, got {enabled!r}."
            " Write `typecheck_guard.cache_pytree_checks(False)` to turn the cache off."
        )
    with _lock:
        restore = _Restore(_enabled, "switch" in _owners)
        if enabled:
            _acquire("switch")
        else:
            _release("switch")
        _enabled = enabled
        _update()
    return restore


def pytree_cache_info() -> PyTreeCacheInfo:
    """How the cache of `PyTree[...]` checks has done since it was last cleared.

    **Returns:**

    A `PyTreeCacheInfo` named tuple: `hits`, `misses`, `maxsize`, `currsize`.

    !!! Example

        ```python
        f(params)
        f(params)
        print(typecheck_guard.pytree_cache_info())
        # PyTreeCacheInfo(hits=1, misses=1, maxsize=256, currsize=1)
        ```
    """
    return PyTreeCacheInfo(_hits, _misses, MAXSIZE, len(_cache))


def clear_pytree_cache() -> None:
    """Empty the cache of `PyTree[...]` checks and reset its counters.

    Nothing needs this for correctness (the cache is exact); it frees the memory of
    the stored tree structures and shapes.
    """
    global _hits, _misses
    with _lock:
        _cache.clear()
        _hits = 0
        _misses = 0
