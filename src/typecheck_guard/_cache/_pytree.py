"""An exact cache of `isinstance(x, PyTree[...])` verdicts.

jaxtyping checks `PyTree[L]` by decorating a fresh checker and calling it on every
node and leaf of the value: milliseconds for a few hundred leaves, on every eager
call. Whether it passes depends only on what `_reads.py` lists, so we wrap
`_MetaPyTree.__instancecheck__` (what beartype, typeguard and a bare `isinstance` all
end in) with a bounded LRU cache whose key (`_key.py`) is

- the annotation (through its `Reads`, one per annotation, compared by identity, so
  the key does not keep the annotation alive);
- the treedef of `jax.tree_util.tree_flatten(x)`: node types, dict keys, aux data;
- per leaf: the aval of a JAX array (its shape, dtype, weak type and sharding in one
  attribute read; JAX interns avals, so comparing them is an identity check), the
  type, shape and dtype of a NumPy array or an instance of the annotation's array
  class, and the type of anything else. Every leaf type we cache decides a plain
  leaf by its type alone, so a float hyperparameter that changes every step still
  hits. Only a `Literal` reads values: then the key holds the value of each (scalar
  or `Enum`) leaf, and array leaves make the check uncacheable;
- whether a `@jaxtyped` memo is active (without one, every leaf checks against fresh
  dims), and then the memo entries the check reads: bound dims, variadic dims,
  structure names, one `?dim` entry per leaf.

Making, comparing and storing the key runs none of the user's code and keeps none of
the user's objects alive (`_key.py` says how, and which trees that rules out).

Only passes are stored: a failing check runs again and raises or returns exactly what
it would without us. A miss runs jaxtyping's own check and records what it did to the
memo: the entries it wrote into the memo dicts, and, when a failed union alternative
inside made jaxtyping swap in fresh copies of the dicts (`set_shape_memo`), that it
did and what the fresh dicts hold. A hit replays exactly that, so later arguments,
`jaxtyped`'s error messages (which print the memo it pushed) and the return check see
the same memo as without the cache. A structure name (`PyTree[L, "T"]`) is bound to
the treedef of the value being checked now, as jaxtyping binds it, not to the one
the miss saw: the two are equal by the key's rules, which are finer than JAX's, but a
later comparison with another argument, and the memo an error message prints, see
the value's own.

Nested checks (inside the flatten of an enclosing `PyTree` check, or under its
`?dim` leaf path), checks of tracers, and annotations whose leaf type may match a
node (where jaxtyping's flatten stops and ours would not) run uncached: they depend
on state outside the key, run once per trace anyway, or would run the user's flatten
functions more often than jaxtyping does.
"""

from __future__ import annotations

import collections
import threading
import weakref
from contextlib import AbstractContextManager
from typing import Any, Final, NamedTuple

from .._errors import PYTREE_CACHE_UNAVAILABLE, Unsupported
from . import _key
from ._key import MISSING, Key

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
    # What a check wrote to each of the three memo dicts: dims and variadic dims by
    # value, the structure names it bound (to the treedef of the value checked).
    inplace: tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]
    replaced: bool
    final: tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]


_UNMODELLED: Final = object()
_UNSTORABLE: Final = object()

_lock = threading.RLock()
# key -> (the key as stored, so that `move_to_end` finds it by identity; effects).
_cache: collections.OrderedDict[Key, tuple[Key, _Effects | None]] = (
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
        or reads.matches_nodes
        or getattr(jt.treepath_storage, "value", None) is not None
        or jt.get_treeflatten_memo()
    ):
        return _original(cls, obj)
    try:
        leaves, treedef = _tree_flatten(obj)
        memos = jt.get_shape_memo() if jt.has_shape_memo() else None
        key = _key.make(reads, leaves, treedef, memos)
    except Exception:
        # Tracers; leaves, dtypes, node data and memo entries whose hashing or
        # comparison would run the user's code (`_key.Uncacheable`); values JAX
        # cannot flatten (let jaxtyping say what it says about those).
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
            _replay(jt, effects, treedef)
        return True
    _misses += 1
    return _miss(cls, obj, reads, key, treedef, memos is not None)


def _miss(
    cls: Any, obj: Any, reads: Any, key: Key, treedef: Any, memo_active: bool
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
        elif effects is not _UNSTORABLE:
            _store(key, effects)
    return out


def _diff(now: dict[str, Any], old: dict[str, Any]) -> Any:
    if len(now) < len(old) or any(k not in now for k in old):
        return _UNMODELLED
    # By identity: jaxtyping writes a new object or none, and `!=` on a treedef would
    # ask its aux data.
    return {k: v for k, v in now.items() if old.get(k, MISSING) is not v}


def _bound_structures(written: dict[str, Any], treedef: Any) -> Any:
    # jaxtyping binds a structure name to the treedef of its own flatten, which stops
    # at nodes its leaf type accepts (`None`, in `PyTree[X | None, "T"]`): when that
    # is the treedef of ours (the same number of nodes and leaves: a node cut short
    # has fewer nodes under it, or one more leaf), a hit binds the value's own.
    for bound in written.values():
        if type(bound) is not type(treedef) or (bound.num_nodes, bound.num_leaves) != (
            treedef.num_nodes,
            treedef.num_leaves,
        ):
            return _UNSTORABLE
    return tuple(written)


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
    structures = [_bound_structures(w[2], treedef) for w in (inplace, final)]
    if _UNSTORABLE in structures:
        return _UNSTORABLE
    inplace = (inplace[0], inplace[1], structures[0])
    final = (final[0], final[1], structures[1])
    return _Effects(inplace, replaced, final)  # pyright: ignore[reportArgumentType]


def _write(memos: Any, written: Any, treedef: Any) -> None:
    single, variadic, structures = written
    if single:
        memos[0].update(single)
    if variadic:
        memos[1].update(variadic)
    for name in structures:
        memos[2][name] = treedef


def _replay(jt: Any, effects: _Effects, treedef: Any) -> None:
    memos = jt.get_shape_memo()
    if effects.replaced:
        fresh = tuple(d.copy() for d in memos)
    _write(memos, effects.inplace, treedef)
    if effects.replaced:
        _write(fresh, effects.final, treedef)  # pyright: ignore[reportPossiblyUnbound]
        jt.set_shape_memo(*fresh)  # pyright: ignore[reportPossiblyUnbound]


def _store(key: Key, effects: _Effects | None) -> None:
    stored = _key.freeze(key)
    if stored is None:  # see `_key.py`: checked every time
        return
    _cache[stored] = (stored, effects)
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
    global _jt, _tree_flatten
    import jax

    from .._compat._jaxtyping import load

    try:
        jt = load()
    except Unsupported as e:
        raise Unsupported(PYTREE_CACHE_UNAVAILABLE.format(reason=e)) from None
    _key.load()
    _jt = jt
    _tree_flatten = jax.tree_util.tree_flatten


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
