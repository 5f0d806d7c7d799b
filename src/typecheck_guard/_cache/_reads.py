"""What a `PyTree[...]` instance check depends on, read off its annotation.

jaxtyping checks `PyTree[L, "S"]` by flattening the value (asking "is this node an
`L`?" at every node) and checking every leaf against `L`. For the leaf types below,
the answer for one node or leaf depends only on

- its type (a plain class, a union of them, `None`), or also its shape and dtype
  (jaxtyping arrays), or also its value (`Literal`), and
- the entries of the thread-local shape memo that the annotation names: `n` and
  `*batch` in `Float[Array, "n *batch"]` (the dims bound earlier in the same
  `@jaxtyped` call), `?n` under the structure `S` (one entry per leaf), and the
  structure names (`"S"`, or each piece of `"S T"`, `"... S"`, `"S ..."`).

Anything else (generics such as `list[int]`, `Callable`, protocols, `TypeVar`s,
forward references, symbolic dims such as `"n+1"`, nested `PyTree`s, array types
with their own `isinstance`) may read more than we can see, so `analyse` calls it
opaque, and such checks always run uncached.

jaxtyping also asks the leaf type of every *node* whether it is a leaf (its flatten's
`is_leaf`): a leaf type that could accept a node (`PyTree[object]`, `PyTree[MyNode]`)
stops jaxtyping's flatten where ours goes on, into the node's own flatten function.
`Reads.matches_nodes` says so, and the cache checks such annotations uncached. A check only writes memo entries that it
has read first (jaxtyping binds a name after looking it up), so the names here are
also everything a check can write; the cache verifies that on every miss.
"""

from __future__ import annotations

import abc
import functools as ft
import types
import typing
from typing import Annotated, Any, Literal, Union

from .._compat._jaxtyping import Jaxtyping, treepath_prefix

__all__ = ["Reads", "analyse"]


class Opaque(Exception):
    """The annotation may depend on something `Reads` cannot name."""


class Reads:
    """The memo entries an annotation's instance check may read (and so write).

    Compared by identity: one instance per annotation, so that it can stand for the
    annotation in cache keys without keeping the annotation alive.
    """

    __slots__ = (
        "single",
        "variadic",
        "structures",
        "treepath_single",
        "treepath_variadic",
        "structure",
        "by_value",
        "array_types",
        "matches_nodes",
        "any_reads",
    )

    def __init__(
        self,
        single: tuple[str, ...],
        variadic: tuple[str, ...],
        structures: tuple[str, ...],
        treepath_single: tuple[str, ...],
        treepath_variadic: tuple[str, ...],
        structure: str | None,
        by_value: bool,
        array_types: tuple[type, ...] = (),
        matches_nodes: bool = False,
    ):
        self.single = single
        self.variadic = variadic
        self.structures = structures
        self.treepath_single = treepath_single
        self.treepath_variadic = treepath_variadic
        self.structure = structure
        # A `Literal` compares leaves by value, so array leaves (whose value we don't
        # key) make such a check uncacheable, and scalar leaves are keyed by value.
        self.by_value = by_value
        # The classes of the array annotations (`Array` in `Float[Array, "n"]`): the
        # only leaves whose `shape` and `dtype` jaxtyping reads.
        self.array_types = array_types
        # A plain class in the leaf type that a pytree node could be an instance of.
        self.matches_nodes = matches_nodes
        self.any_reads = bool(
            single or variadic or structures or treepath_single or treepath_variadic
        )

    def __repr__(self) -> str:
        fields = ", ".join(
            f"{name}={getattr(self, name)!r}"
            for name in self.__slots__
            if name != "any_reads" and getattr(self, name)
        )
        return f"Reads({fields})"

    def names(
        self, num_nodes: int
    ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
        """The single, variadic and structure entries read by a check of a tree with
        `num_nodes` nodes (a `?dim` is bound once per leaf, and jaxtyping's leaves are
        nodes of JAX's own flattening: it can stop early, or count `None` as a leaf)."""
        single, variadic = self.single, self.variadic
        if self.treepath_single or self.treepath_variadic:
            assert self.structure is not None
            prefixes = [treepath_prefix(i, self.structure) for i in range(num_nodes)]
            single = single + tuple(
                p + n for p in prefixes for n in self.treepath_single
            )
            variadic = variadic + tuple(
                p + n for p in prefixes for n in self.treepath_variadic
            )
        return single, variadic, self.structures


# Metaclasses whose `isinstance` is decided by the instance's type alone, for the
# objects we key (tracers, whose `isinstance(x, jax.Array)` looks at their aval, are
# never keyed). ABC registrations only ever add classes, and only passes are cached.
@ft.cache
def _plain_metaclasses() -> tuple[type, ...]:
    import jax

    return (type, abc.ABCMeta, type(jax.Array))


# Leaf classes that no pytree node is an instance of: jaxtyping's `is_leaf` never stops
# at a node for them. (A class registered as a node that subclasses one of these would
# be one; JAX's own nodes, flax's, Equinox's and chex's are not.)
@ft.cache
def _leaf_only_classes() -> tuple[type, ...]:
    import jax
    import numpy as np

    return (int, float, complex, str, bytes, np.ndarray, np.generic, jax.Array)


class _Collect:
    def __init__(self) -> None:
        self.single: dict[str, None] = {}
        self.variadic: dict[str, None] = {}
        self.treepath_single: dict[str, None] = {}
        self.treepath_variadic: dict[str, None] = {}
        self.by_value = False
        self.array_types: dict[type, None] = {}
        self.matches_nodes = False


def _is_plain_class(tp: Any) -> bool:
    if not isinstance(tp, type) or type(tp) not in _plain_metaclasses():
        return False
    # typeguard checks the fields of a `NamedTuple` (and so reads the values of its
    # leaves, and the memo through their annotations): not decided by type alone.
    return not issubclass(tp, tuple) or tp is tuple


def _array(tp: Any, jt: Jaxtyping, acc: _Collect) -> None:
    if type(tp).__instancecheck__ is not jt.array_instancecheck:
        raise Opaque
    try:
        array_type, dims = tp.array_type, tp.dims
    except AttributeError:  # `AbstractArray` itself
        raise Opaque from None
    # `Shaped[Any, ...]` accepts anything with `.shape` and `.dtype`, including
    # pytree nodes whose shape we would not see in the key.
    origin = typing.get_origin(array_type)
    options = (
        typing.get_args(array_type)
        if origin is Union or origin is types.UnionType
        else (array_type,)
    )
    for option in options:
        if not _is_plain_class(option):
            raise Opaque
        acc.array_types[option] = None
    for dim in dims:
        if any(dim is anonymous for anonymous in jt.anonymous_dims):
            continue
        kind = type(dim)
        if kind is jt.fixed_dim:
            continue
        if kind is jt.named_dim:
            target = acc.treepath_single if dim.treepath else acc.single
        elif kind is jt.named_variadic_dim:
            target = acc.treepath_variadic if dim.treepath else acc.variadic
        else:  # symbolic dims (`"n+1"`) evaluate against the whole memo
            raise Opaque
        target[dim.name] = None


def _leaftype(tp: Any, jt: Jaxtyping, acc: _Collect) -> None:
    if tp is Any or tp is None or tp is type(None):
        return
    if isinstance(tp, jt.meta_array):
        _array(tp, jt, acc)
        return
    if _is_plain_class(tp):
        if not issubclass(tp, _leaf_only_classes()):
            acc.matches_nodes = True
        return
    origin = typing.get_origin(tp)
    if origin is Union or origin is types.UnionType:
        for arg in typing.get_args(tp):
            _leaftype(arg, jt, acc)
        return
    if origin is Literal:
        for value in typing.get_args(tp):
            if isinstance(type(value).__eq__, types.FunctionType):
                # jaxtyping compares every node and leaf with each literal, and an
                # `__eq__` of the user's would see those calls skipped on a hit.
                raise Opaque
        acc.by_value = True
        return
    if origin is Annotated:  # jaxtyping's typeguard checks the bare type
        _leaftype(tp.__origin__, jt, acc)
        return
    raise Opaque


def analyse(annotation: Any, jt: Jaxtyping) -> Reads | None:
    """The memo entries that `isinstance(x, annotation)` may read, for a
    `PyTree[leaftype]` or `PyTree[leaftype, structure]`; `None` when the check can't
    be keyed (see the module docstring), or is no slower than keying it would be."""
    try:
        leaftype = annotation.leaftype
        structure = annotation.structure
    except AttributeError:  # bare `PyTree`
        return None
    if leaftype is Any:
        # Only a flatten and a structure comparison: what a cache lookup costs.
        return None
    acc = _Collect()
    try:
        _leaftype(leaftype, jt, acc)
    except Opaque:
        return None
    if structure is not None and not isinstance(structure, str):
        return None
    structures: tuple[str, ...] = ()
    if structure is not None:
        structures = tuple(p for p in structure.split() if p != "...")
    elif acc.treepath_single or acc.treepath_variadic:
        # A `?dim` outside a structured `PyTree` reads the path of an enclosing one.
        return None
    return Reads(
        single=tuple(acc.single),
        variadic=tuple(acc.variadic),
        structures=structures,
        treepath_single=tuple(acc.treepath_single),
        treepath_variadic=tuple(acc.treepath_variadic),
        structure=structure,
        by_value=acc.by_value,
        array_types=tuple(acc.array_types),
        matches_nodes=acc.matches_nodes,
    )
