"""The cache's key: made from a checked value without running the user's code, and
stored without keeping the user's objects alive.

A key stands for what `isinstance(x, PyTree[L])` depends on (`_pytree.py`): the
annotation's `Reads`, the treedef of `x`, a signature per leaf and the memo entries
the annotation reads. Plain jaxtyping runs none of the user's code for these but the
flatten (which a hit does instead of jaxtyping's), and holds none of them once the
check returns. Neither do we:

- **A lookup runs nothing of the user's.** It hashes the key and compares it with
  stored ones, so everything in a key must hash and compare in C, without asking
  the user's `__eq__` or `__hash__`: JAX avals; builtin scalars; shapes of `int`s;
  dtypes whose `__eq__` and `__hash__` are C; classes whose metaclass compares by
  identity; `Enum` members whose `__eq__` is C's; and treedefs, which JAX hashes
  without their node data and compares node data with `==`. So `check_structure`
  looks at the node data of every treedef in a key (aux data, dict keys): builtin
  scalars, tuples and lists of them, and objects that compare by identity
  (`object.__eq__`: Equinox's `MISSING`, a function, a class) pass; anything with an
  `__eq__` of its own, which JAX's `==` would call on the slightest collision (it
  asks the other side when one side can't decide), makes the check uncacheable
  (`Uncacheable`), as does a leaf, dtype, `Literal` value or memo entry that is not
  one of the above.
- **A stored key holds nothing of the user's.** `freeze` rebuilds the treedef with
  builtin values copied (no one can see a copy of an `int` or a `str` kept, nor
  mutate a copied list) and every object compared by identity held weakly (`_Weak`,
  equal to that very object while it lives), and holds heap classes and `Enum`
  members in the signature weakly too. A tree that holds what a weak reference
  can't hold, or a namedtuple (whose class a treedef holds, where JAX's registry
  does not), is checked every time and never stored. So is a `Literal` annotation
  over a node whose `__eq__` is Python's: jaxtyping compares every node with the
  literal values, which a hit would skip.

A stored key is at least as fine as JAX's equality (an `Enum` member or a dtype kept
weakly equals itself only): at worst one more miss, never a wrong hit.
"""

from __future__ import annotations

import enum
import itertools
import types
import weakref
from typing import Any, Final

__all__ = [
    "MISSING",
    "Key",
    "Uncacheable",
    "check_structure",
    "freeze",
    "load",
    "make",
    "memo_deps",
    "signature",
]

MISSING: Final = object()
"""A memo entry the annotation reads and that is not bound."""

_SCALARS: Final = frozenset({int, bool, float, complex, str, bytes, type(None)})
_SEQUENCES: Final = frozenset({tuple, list, type(None)})
_HEAPTYPE: Final = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class that can be freed
_object_eq = object.__eq__
_object_ne = object.__ne__
_object_hash = object.__hash__
_object_getattribute = object.__getattribute__
_object_class = object.__dict__["__class__"]
_C_DESCRIPTORS: Final = (types.GetSetDescriptorType, types.MemberDescriptorType)

_array_impl: Any = None
_ndarray: Any = None
_jax_array: Any = None
_tracer: Any = None
_treedef: Any = None
_avals: Any = None
_from_node_data: Any = None
_node_data: Any = None
_registry: Any = None


class Uncacheable(Exception):
    """The value's key would run the user's code, or hold what JAX's own
    equality would not decide: check it uncached."""


class _Unstorable(Exception):
    pass


def load() -> None:
    """Resolve what keys are made of (JAX and NumPy types); `_pytree.py` calls it
    when the cache is first turned on."""
    global _array_impl, _ndarray, _jax_array, _tracer, _treedef, _avals
    global _from_node_data, _node_data, _registry
    import jax
    import jax.core
    import numpy as np

    from .._compat._jax import treedef_from_node_data, treedef_node_data

    try:
        from jax._src.array import ArrayImpl
    except ImportError:  # then every JAX array takes the general path below
        ArrayImpl = None
    _array_impl = ArrayImpl
    _ndarray = np.ndarray
    _jax_array = jax.Array
    _tracer = jax.core.Tracer
    _treedef = jax.tree_util.PyTreeDef
    _avals = jax.core.AbstractValue
    _from_node_data = treedef_from_node_data
    _node_data = treedef_node_data
    _registry = jax.tree_util.default_registry


# --- the key of a lookup -------------------------------------------------------------


class Key:
    """`(reads, treedef, signature, memo entries)`, hashed once: a hit then costs one
    hash and one comparison (about as much as the flatten that made them), instead
    of two of each for `get` and `move_to_end`."""

    __slots__ = ("parts", "hash", "stored")

    def __init__(self, parts: tuple[Any, ...], stored_as: Key | None = None):
        self.parts = parts
        # A stored key keeps the hash of the key it was frozen from: the frozen
        # pieces are not hashable, and a treedef's hash leaves them out anyway.
        self.hash = hash(parts) if stored_as is None else stored_as.hash
        self.stored = stored_as is not None

    def __hash__(self) -> int:
        return self.hash

    def __eq__(self, other: object) -> bool:
        if type(other) is not Key:
            return NotImplemented
        # The stored side on the left, so that its `_Weak` pieces are asked first
        # (a dict lookup does so too, but we don't rely on it).
        stored, looked_up = (other, self) if other.stored else (self, other)
        try:
            return stored.parts == looked_up.parts
        except Exception:
            # JAX raises comparing a treedef with anything else (`MISSING`, on some
            # versions): not equal.
            return False


def make(reads: Any, leaves: list[Any], treedef: Any, memos: Any) -> Key:
    """The key of a value whose `tree_flatten` is `leaves, treedef`, checked against
    `reads`'s annotation with the shape memo `memos` (`None` outside `@jaxtyped`).
    Raises `Uncacheable` (see the module docstring)."""
    check_structure(treedef)
    sig = signature(leaves, reads)
    if memos is None:
        deps = None
    elif reads.any_reads:
        deps = memo_deps(reads, memos, treedef)
    else:
        deps = ()
    return Key((reads, treedef, sig, deps))


def signature(leaves: list[Any], reads: Any) -> tuple[Any, ...]:
    """One entry per leaf: what the leaf check depends on (`_reads.py`)."""
    if reads.by_value:
        return tuple([_value_key(x) for x in leaves])
    array_impl = _array_impl
    array_types = reads.array_types
    return tuple(
        [x.aval if type(x) is array_impl else _leaf_key(x, array_types) for x in leaves]
    )


def _keyable_type(t: type) -> None:
    meta = type(t)
    if meta.__eq__ is not _object_eq or meta.__hash__ is not _object_hash:
        raise Uncacheable  # a metaclass that compares classes by its own rules
    if t.__getattribute__ is not _object_getattribute and isinstance(
        t.__getattribute__, types.FunctionType
    ):
        raise Uncacheable
    for base in t.__mro__[:-1]:
        found = base.__dict__.get("__class__", _object_class)
        if found is not _object_class:
            # `isinstance` also asks `x.__class__`, which a proxy fakes per instance:
            # its answer is not the type's.
            raise Uncacheable


def _c_compared(obj: Any) -> bool:
    kind = type(obj)
    return not isinstance(kind.__eq__, types.FunctionType) and not isinstance(
        kind.__hash__, types.FunctionType
    )


def _plain_attribute(t: type, name: str) -> bool:
    # Reading `x.name` runs no Python code: no `__getattribute__` or `__getattr__` of
    # the class's own, and the attribute is in the instance's `__dict__` or a C slot.
    if isinstance(t.__getattribute__, types.FunctionType) or hasattr(t, "__getattr__"):
        return False
    for base in t.__mro__:
        found = base.__dict__.get(name)
        if found is not None:
            return isinstance(found, _C_DESCRIPTORS)
    return True


def _leaf_key(x: Any, array_types: tuple[type, ...]) -> Any:
    t = type(x)
    if t in _SCALARS:
        return t
    if issubclass(t, _tracer):
        # `isinstance(tracer, jax.Array)` asks the tracer's aval: not the type's.
        raise Uncacheable
    _keyable_type(t)
    if t is _ndarray:
        return (t, x.shape, x.dtype)
    if not array_types or not issubclass(t, array_types):
        # Every leaf type we key (`_reads.py`) decides such a leaf by its type: its
        # attributes are not read (jaxtyping reads `shape` and `dtype` of an instance
        # of the annotation's array class only).
        return t
    if issubclass(t, _jax_array):
        return (t, x.aval)
    if not (_plain_attribute(t, "shape") and _plain_attribute(t, "dtype")):
        raise Uncacheable
    shape, dtype = x.shape, x.dtype
    if type(shape) is not tuple:
        # `torch.Size`: a tuple of its own; the dims jaxtyping binds are its items.
        if not isinstance(shape, tuple) or type(shape).__iter__ is not tuple.__iter__:
            raise Uncacheable
        shape = tuple(shape)
    for dim in shape:
        if type(dim) is not int:
            raise Uncacheable
    if not _c_compared(dtype):
        raise Uncacheable
    return (t, shape, dtype)


def _value_key(x: Any) -> Any:
    t = type(x)
    if t in _SCALARS:
        return (t, x)
    if isinstance(x, enum.Enum):
        _keyable_type(t)
        # typeguard compares the value with each literal (`in`), and we hash it: both
        # must be C's or `Enum`'s own (a `str` or `int` mix-in is fine).
        if isinstance(t.__eq__, types.FunctionType) or (
            t.__hash__ is not enum.Enum.__hash__
            and isinstance(t.__hash__, types.FunctionType)
        ):
            raise Uncacheable
        return (t, x)
    raise Uncacheable


def _memo_value(value: Any, kind: int) -> Any:
    # What jaxtyping binds: an `int` per dim, `(broadcastable, shape)` per variadic
    # dim, a treedef per structure. Anything else came from elsewhere, and may
    # compare by the user's rules.
    if value is MISSING:
        return value
    if kind == 0:
        ok = type(value) is int
    elif kind == 1:
        ok = (
            type(value) is tuple
            and len(value) == 2
            and type(value[0]) is bool
            and type(value[1]) is tuple
            and all(type(d) is int for d in value[1])
        )
    else:
        ok = type(value) is _treedef
        if ok:
            check_structure(value)
    if not ok:
        raise Uncacheable
    return value


def memo_deps(reads: Any, memos: Any, treedef: Any) -> tuple[tuple[Any, ...], ...]:
    """The memo entries that the check of `treedef`'s value against `reads` reads."""
    names = reads.names(treedef.num_nodes)
    return tuple(
        tuple([_memo_value(memo.get(n, MISSING), kind) for n in names_of_kind])
        for kind, (memo, names_of_kind) in enumerate(zip(memos[:3], names, strict=True))
    )


def _plain(x: Any) -> None:
    # Comparing `x` with anything runs no Python code: builtin scalars, tuples and
    # lists of them, and objects that compare by identity (`object.__eq__`: an
    # Equinox `MISSING`, a function, a class).
    t = type(x)
    if t in _SCALARS:
        return
    if t is tuple or t is list:
        for v in x:
            _plain(v)
        return
    if t.__eq__ is _object_eq and t.__ne__ is _object_ne:
        return
    raise Uncacheable


def check_structure(treedef: Any) -> None:
    """Raise `Uncacheable` unless comparing `treedef` with a stored one runs no Python
    code: JAX compares node data (aux data, dict keys) with `==`, which asks the
    other side too when one side can't decide."""
    if treedef.num_nodes == treedef.num_leaves + 1:  # one node, over leaves only
        datas: Any = (treedef.node_data()[1],)
    else:
        datas = _node_data(treedef)  # `None` for leaves
    # The common trees, in C: dict keys and aux tuples of builtin scalars. (Types
    # first: `filter` asks each piece's truth and `chain` iterates it, which a user's
    # object may define.)
    if _SEQUENCES.issuperset(map(type, datas)) and _SCALARS.issuperset(
        map(type, itertools.chain.from_iterable(filter(None, datas)))
    ):
        return
    for data in datas:
        _plain(data)


# --- what a stored key holds ---------------------------------------------------------


class _Weak:
    """A piece of node data that compares by identity, held weakly: equal to the
    object itself only, while it lives."""

    __slots__ = ("ref",)
    # Never hashed: a stored key keeps the hash of the key it was frozen from.
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, obj: Any):
        try:
            self.ref = weakref.ref(obj)
        except TypeError:  # `object()`, `__slots__` without `__weakref__`
            raise _Unstorable from None

    def __eq__(self, other: object) -> bool:
        target = self.ref()
        if type(other) is _Weak:  # two stored keys
            other = other.ref()
        return target is not None and other is target

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        return f"<weak {self.ref()!r}>"


def _freeze(x: Any) -> Any:
    # `x` passed `_plain`: copy what is compared by value (a list the user may
    # mutate included), refer weakly to what is compared by identity.
    t = type(x)
    if t in _SCALARS:
        return x
    if t is tuple:
        return tuple([_freeze(v) for v in x])
    if t is list:
        return [_freeze(v) for v in x]
    return _Weak(x)


_NO_DATA: Final = frozenset({list, tuple, type(None)})  # JAX keeps no node data


def _freeze_treedef(treedef: Any, by_value: bool) -> Any:
    if treedef.num_nodes == 1 and treedef.num_leaves == 1:
        return treedef  # a leaf
    node_type, data = treedef.node_data()
    if node_type is not tuple and issubclass(node_type, tuple):
        raise _Unstorable  # a namedtuple: the treedef holds its class
    if by_value and isinstance(node_type.__eq__, types.FunctionType):
        # `PyTree[Literal[...]]`: jaxtyping's `is_leaf` compares every node with the
        # literals (`"relu" == node` asks the node), which a hit would skip.
        raise _Unstorable
    if node_type is dict:
        data = [_freeze(k) for k in data]
    elif node_type not in _NO_DATA:
        data = _freeze(data)
    children = [_freeze_treedef(c, by_value) for c in treedef.children()]
    return _from_node_data(_registry, (node_type, data), children)


def _freeze_part(part: Any) -> Any:
    # A piece of a leaf's signature: a class, a shape, an aval, a dtype, a value.
    t = type(part)
    if t in _SCALARS:
        return part
    if t is tuple:
        return tuple([_freeze_part(p) for p in part])
    if isinstance(part, type):
        return _Weak(part) if part.__flags__ & _HEAPTYPE else part
    if isinstance(part, _avals):
        return part  # JAX's own, interned
    try:
        # An `Enum` member, a dtype that can be referenced: by identity, which is
        # finer than their `__eq__`.
        return _Weak(part)
    except _Unstorable:
        # A dtype that no weak reference can hold (NumPy's): nor can anyone see that
        # we keep it.
        return part


def freeze(key: Key) -> Key | None:
    """`key` as the cache stores it, or `None` when it can't be stored (see the
    module docstring)."""
    reads, treedef, sig, deps = key.parts
    try:
        frozen_sig = tuple([_freeze_part(entry) for entry in sig])
        frozen_deps = deps
        if deps and any(v is not MISSING for v in deps[2]):
            frozen_deps = (
                deps[0],
                deps[1],
                tuple(
                    v if v is MISSING else _freeze_treedef(v, False) for v in deps[2]
                ),
            )
        frozen_treedef = _freeze_treedef(treedef, reads.by_value)
    except _Unstorable:
        return None
    return Key((reads, frozen_treedef, frozen_sig, frozen_deps), stored_as=key)
