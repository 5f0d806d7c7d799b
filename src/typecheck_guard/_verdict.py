"""An exact cache of typecheck verdicts for constructions, keyed by everything the
verdict depends on.

A check on `__init__(self, **fields)` reads each argument's type and, for arrays,
shape and dtype (jaxtyping), plus the values of non-array leaves (`Literal`, `int`
vs `bool`, ...). The key is the treedef of the arguments (which holds every pytree
node's type and auxiliary data) and, per leaf, its type with its abstract value
(shape, dtype, weak type) for arrays, or the leaf itself for Python and numpy
scalars, strings, `None` and abstract values (`ShapedArray`, `ShapeDtypeStruct`),
and a weak reference for functions. Anything else (a tracer, any other object) makes
the call uncacheable: it is checked every time. Only passing verdicts are stored; a
failure is never cached, so a bad construction raises every time.
"""

from __future__ import annotations

import collections
import functools as ft
import types
import weakref
from typing import Any

__all__ = ["VerdictCache", "signature"]


@ft.cache
def _leaf_tools() -> tuple[Any, Any, Any, tuple[type, ...]]:
    import jax
    import numpy as np
    from jax._src.array import ArrayImpl
    from jax._src.core import AbstractValue

    # Leaves hashed by value besides `_VALUE_TYPES`: numpy scalars, and abstract
    # values (`ShapedArray`, `jax.ShapeDtypeStruct`), which JAX itself puts in
    # place of arrays when it rebuilds a tree of shapes (`jax.eval_shape`, output
    # avals at dispatch).
    by_value = (np.generic, AbstractValue, jax.ShapeDtypeStruct)
    return jax.tree_util.tree_flatten, ArrayImpl, np.ndarray, by_value


class _Uncacheable(Exception):
    pass


# Non-array leaves we key on by value. Any other leaf makes the call uncacheable:
# an object hashed by identity would never give a hit (the next construction brings
# a new object), yet each miss would keep one alive in the cache, with whatever it
# refers to (device arrays included).
_VALUE_TYPES = frozenset({bool, int, float, complex, str, bytes, type(None)})


# Functions are the one kind of identity-hashed leaf that recurs from call to call:
# the `apply_fn` of a `TrainState`, the `init`/`update` of an optax transformation,
# meta fields that every unflatten passes back to the constructor. We key them by a
# weak reference: it matches the same live function, keeps nothing alive, and once
# the function is gone its entry matches nothing and ages out of the LRU.
_WEAKLY_KEYED = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    ft.partial,
)


def _leaf_key(leaf: Any, array_type: Any, ndarray: Any, by_value: Any) -> Any:
    t = type(leaf)
    if t is array_type:
        return (t, leaf.aval)
    if t is ndarray:
        return (t, leaf.shape, leaf.dtype)
    if t in _VALUE_TYPES or isinstance(leaf, by_value):
        return (t, leaf)
    if isinstance(leaf, _WEAKLY_KEYED):
        try:
            return (t, weakref.ref(leaf))
        except TypeError:
            raise _Uncacheable from None
    # Tracers, other array-likes, other objects: checked every time.
    raise _Uncacheable


def signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The cache key of one call, or `None` when the call can't be cached."""
    tree_flatten, array_type, ndarray, by_value = _leaf_tools()
    leaves, treedef = tree_flatten((args, kwargs))
    try:
        key = (
            treedef,
            tuple([_leaf_key(x, array_type, ndarray, by_value) for x in leaves]),
        )
        hash(key)
    except (_Uncacheable, TypeError):
        return None
    return key


class VerdictCache:
    """A bounded LRU set of keys whose check passed."""

    def __init__(self, maxsize: int = 256):
        self.maxsize = maxsize
        self._keys: collections.OrderedDict[Any, None] = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    def __contains__(self, key: Any) -> bool:
        try:
            self._keys.move_to_end(key)
        except Exception:
            # KeyError: a miss. Anything else comes from comparing two keys whose
            # hashes collide: aux data that hashes but refuses `==` (JAX raises for
            # some metadata). A miss too: the construction is checked.
            self.misses += 1
            return False
        self.hits += 1
        return True

    def add(self, key: Any) -> None:
        try:
            self._keys[key] = None
        except Exception:  # same as above: such a key is never stored
            return
        if len(self._keys) > self.maxsize:
            self._keys.popitem(last=False)

    def __len__(self) -> int:
        return len(self._keys)
