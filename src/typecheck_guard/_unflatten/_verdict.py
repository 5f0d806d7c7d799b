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

A key only stands for a verdict when the verdict is a function of it, and that is a
property of the annotations being checked, not of the values: `cacheable` reads them
once per class. A value validator (beartype's `Is[...]`, anything `Annotated`) reads
values we don't key; beartype checks one item of a `list[...]` or `dict[...]` (the
first key of a dict, a random index of a list), so that verdict depends on which
item and on dict order and key equality the treedef does not see. Only annotations
decided by the types, shapes and dtypes in the key are cacheable: plain classes,
`None`, `Any`, unions and `Literal`s of them, jaxtyping arrays (`Float[Array, "n"]`)
and the `PyTree[...]` annotations that `_cache._reads.analyse` can model. Anything
else, or an annotation we can't resolve, makes the class uncacheable: checked every
time, as without us.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import functools as ft
import types
import typing
import weakref
from typing import Any, ClassVar, Literal, Union

from .._compat._checkers import peel

__all__ = ["VerdictCache", "cacheable", "signature"]


def _check_structure(treedef: Any) -> None:
    from .._cache import _key

    if _key._node_data is None:
        _key.load()
    _key.check_structure(treedef)


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
    try:
        # Flattening runs user code (a node's flatten may read an attribute its
        # `__post_init__` has not set yet; JAX sorts dict keys that may not compare):
        # whatever fails here makes the call uncacheable, never an error of ours.
        leaves, treedef = tree_flatten((args, kwargs))
        # A lookup compares the treedef with stored ones, and JAX compares node
        # data (aux data, dict keys) with `==`: one whose `__eq__` is the user's
        # would run at every lookup. Such a call is checked, uncached (the PyTree
        # cache's rule, `_cache/_key.py`).
        _check_structure(treedef)
        # A JAX array is keyed by its aval alone (shape, dtype, weak type; nothing
        # else is a bare aval in a key, so none can be taken for one): no call and
        # no tuple per array leaf, which is most of them.
        key = (
            treedef,
            tuple(
                [
                    x.aval
                    if type(x) is array_type
                    else _leaf_key(x, array_type, ndarray, by_value)
                    for x in leaves
                ]
            ),
        )
        hash(key)
    except Exception:
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


class _Opaque(Exception):
    pass


def _understood(tp: Any, jt: Any, seen: frozenset[Any] = frozenset()) -> None:
    """Raise `_Opaque` unless checking `tp` depends only on what a key holds."""
    from .._cache._reads import Opaque, _array, _Collect, _is_plain_class, analyse

    if tp is Any or tp is None or tp is type(None):
        return
    if isinstance(tp, jt.meta_pytree):
        if (
            getattr(tp, "leaftype", Any) is Any
            and getattr(tp, "structure", None) is None
        ):
            return  # bare `PyTree` / `PyTree[Any]`: only its structure is read
        reads = analyse(tp, jt)
        if reads is None or reads.by_value:
            raise _Opaque
        return
    if isinstance(tp, jt.meta_array):
        try:
            _array(tp, jt, _Collect())
        except Opaque:
            raise _Opaque from None
        return
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Union or origin is types.UnionType:
        for arg in args:
            _understood(arg, jt, seen)
        return
    if origin is Literal:
        return
    if tp is collections.abc.Callable or origin is collections.abc.Callable:
        # A function leaf is keyed by its identity: whatever a checker reads of its
        # signature, the same function gives the same verdict. Other callables are
        # leaves the key refuses.
        return
    if origin is tuple and args and args[-1] is not Ellipsis:
        # `tuple[X, Y]`: every position is checked, and positions are in the treedef.
        # (`tuple[X, ...]`: beartype checks one item, so no.)
        for arg in args:
            _understood(arg, jt, seen)
        return
    if origin is not None and args == (str, Any):
        # `dict[str, Any]`, `Mapping[str, Any]`, `FrozenDict[str, Any]`: only the
        # keys' types are read, and the treedef holds the keys themselves.
        if isinstance(origin, type) and _is_plain_class(origin):
            return
        raise _Opaque
    if origin is None and isinstance(tp, type):
        if _is_plain_class(tp):
            return
        if issubclass(tp, tuple) and hasattr(tp, "_fields") and tp not in seen:
            # A `NamedTuple`: typeguard checks its fields' annotations.
            for field in _hints(tp).values():
                _understood(field, jt, seen | {tp})
            return
        if getattr(tp, "_is_protocol", False) and not _data_members(tp):
            # A protocol of methods is checked against the attributes of the value's
            # type (or of a function, keyed by identity). One with data members reads
            # the instance's own attributes, which a key by identity does not hold.
            return
    # `Annotated` (value validators), containers (`list[...]`, `dict[K, V]`: beartype
    # checks one item, and the treedef sorts dict keys and compares them with `==`),
    # type variables, unresolved strings: opaque.
    raise _Opaque


def _data_members(protocol: type) -> bool:
    """Whether a protocol declares members that are not methods (annotated
    attributes, or non-callable class attributes)."""
    names = getattr(protocol, "__protocol_attrs__", None)
    if names is None:  # Python < 3.12
        from typing import _get_protocol_attrs  # type: ignore[attr-defined]

        names = _get_protocol_attrs(protocol)
    return any(not callable(getattr(protocol, name, None)) for name in names)


def _hints(obj: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(obj, include_extras=True)
    return {
        name: tp
        for name, tp in hints.items()
        if typing.get_origin(tp) is not ClassVar and tp is not ClassVar
    }


def _innermost(fn: Any) -> Any:
    layers = peel(fn)
    fn = layers.unchecked if layers.unchecked is not None else fn
    while getattr(fn, "__wrapped__", None) is not None:
        fn = fn.__wrapped__
    return getattr(fn, "__func__", fn)


_cacheable: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def cacheable(cls: type) -> bool:
    """Whether a check of `cls`'s `__init__` / `__post_init__` is decided by the
    verdict key alone (see the module docstring). Computed once per class."""
    try:
        return _cacheable[cls]
    except KeyError:
        pass
    try:
        from .._compat._jaxtyping import load

        jt = load()
        hints: list[Any] = []
        if dataclasses.is_dataclass(cls):
            hints.extend(_hints(cls).values())
        for name in ("__init__", "__post_init__"):
            method = getattr(cls, name, None)
            if method is None or method is object.__init__:
                continue
            inner = _innermost(method)
            if isinstance(inner, types.FunctionType):
                hints.extend(tp for key, tp in _hints(inner).items() if key != "return")
        for tp in hints:
            if isinstance(tp, dataclasses.InitVar):
                raise _Opaque
            _understood(tp, jt)
        result = True
    except Exception:
        # `_Opaque`, an annotation that doesn't resolve (`NameError`), jaxtyping
        # internals we don't recognise: checked every time.
        result = False
    _cacheable[cls] = result
    return result
