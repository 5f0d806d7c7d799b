"""Pickled treedefs that every process reads right, installed or not.

`install()` registers a `register_dataclass` / `flax.struct` class as a custom node
where JAX alone registers a dataclass node (`_register.py`). A pickled treedef
(`PyTreeDef.__getstate__`: `(registry, [(kind, arity, node_data, type, num_leaves,
num_nodes), ...])`) names each node's kind, and JAX's `__setstate__` looks the class
up in the receiving registry without checking that it has that kind there. Read where
the class is the other kind, a custom node crashes the process at unflatten (a
dataclass registration has no unflatten function), and a dataclass node calls
`cls()` with no field at all: a `TypeError`, or, for a class whose fields all have
defaults, an object built from its defaults, a wrong value.

The two kinds hold the same node data (the static fields' values, in order), so,
while installed:

- `__getstate__` writes each node of such a class as JAX alone would have (a
  dataclass node): our pickles are plain JAX's, and a process without `install()`,
  or without typecheck_guard at all, reads them as its own.
- `__setstate__` gives each custom or dataclass node the kind its class has in this
  process (`_compat._jax.registry()` tells JAX's dataclass registrations from the
  rest), so that a pickle from a plain process reads right here, and so does one
  from an installed process where the class was registered before `install()`.

`copy.deepcopy` of a treedef goes through both and gives back an equal treedef.

Rejected: a `copyreg` reducer whose pickle calls a loader of ours. It acts only on
what this process writes, so a pickle from a process without `install()` would still
be misread here; and a process without typecheck_guard could not unpickle ours at
all. Plain JAX's format needs nothing of ours to be read.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools as ft
from typing import Any, NamedTuple

from .._compat._jax import registry
from .._compat._versions import spec
from .._errors import PRIVATE_API_CHANGED, Unsupported
from .._unflatten._records import (
    FLAX_STRUCT,
    JAX_DATACLASS,
    adapted_how,
    is_dataclass_entry,
)

__all__ = ["patch"]

# The routes through which `install()` registers a class that JAX alone would have
# registered as a dataclass node (not `typecheck_guard.register_dataclass`: a class
# registered through it is a custom node in every process that defines it).
_IN_PLACE_OF_DATACLASS = frozenset({FLAX_STRUCT, JAX_DATACLASS})


class _Format(NamedTuple):
    """What we read of jaxlib's pickled treedefs, found by probing once."""

    treedef: type
    custom: int  # the kind of a custom node (`PyTreeKind::kCustom`)
    dataclass: int  # the kind of a dataclass node (`PyTreeKind::kDataclass`)
    registries: tuple[Any, ...]  # JAX's registries, which every registration fills


def _changed(what: str) -> Unsupported:
    import jax

    return Unsupported(
        PRIVATE_API_CHANGED.format(
            what=what, package="jax", found=jax.__version__, supported=spec("jax")
        )
    )


def _top_node(treedef: Any) -> tuple[Any, ...]:
    state = treedef.__getstate__()
    nodes = state[1] if isinstance(state, tuple) and len(state) == 2 else None
    if (
        not isinstance(nodes, list)
        or not nodes
        or not all(isinstance(n, tuple) and len(n) == 6 for n in nodes)
    ):
        raise _changed(
            "PyTreeDef.__getstate__() returning (registry, [(kind, arity, node_data, "
            f"type, num_leaves, num_nodes), ...]) (found {state!r})"
        )
    return nodes[-1]


@ft.cache
def _format(register_dataclass: Any) -> _Format:
    """Probe jaxlib's treedef pickles: their layout, and the kinds of a custom node
    (`jax.tree_util.Partial` is one) and of a dataclass node (a probe class,
    registered with JAX's own `register_dataclass`, once per process)."""
    import jax
    from jax._src import tree_util as src

    treedef_type = jax.tree_util.PyTreeDef
    if not all(
        callable(vars(treedef_type).get(name))
        for name in ("__getstate__", "__setstate__")
    ):
        raise _changed("PyTreeDef.__getstate__ and __setstate__")
    custom = _top_node(jax.tree.structure(jax.tree_util.Partial(len)))
    if custom[3] is not jax.tree_util.Partial:
        raise _changed(f"the pickled node of jax.tree_util.Partial (found {custom!r})")

    @dataclasses.dataclass
    class _TypecheckGuardPickleProbe:
        x: int
        tag: str = dataclasses.field(default="t", metadata=dict(static=True))

    register_dataclass(
        _TypecheckGuardPickleProbe, data_fields=["x"], meta_fields=["tag"]
    )
    dataclass = _top_node(jax.tree.structure(_TypecheckGuardPickleProbe(1)))
    if dataclass[2:4] != (("t",), _TypecheckGuardPickleProbe) or (
        dataclass[0] == custom[0]
    ):
        raise _changed(
            f"the pickled node of a register_dataclass class (found {dataclass!r})"
        )
    registries = tuple(
        r
        for r in (
            getattr(src, name, None)
            for name in ("default_registry", "none_leaf_registry", "dispatch_registry")
        )
        if r is not None
    )
    return _Format(treedef_type, custom[0], dataclass[0], registries)


def _written(fmt: _Format, nodes: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """`nodes` as JAX alone would have pickled them (the same list if nothing
    differs)."""
    out = None
    for i, node in enumerate(nodes):
        if node[0] == fmt.custom and adapted_how(node[3]) in _IN_PLACE_OF_DATACLASS:
            if out is None:
                out = list(nodes)
            out[i] = (fmt.dataclass, *node[1:])
    return nodes if out is None else out


def _read(fmt: _Format, nodes: Any) -> Any:
    """`nodes` with each custom or dataclass node given the kind its class has in
    this process. Anything malformed is left for JAX to reject."""
    if not isinstance(nodes, list):
        return nodes
    entries = registry()
    out = None
    for i, node in enumerate(nodes):
        if not (
            isinstance(node, tuple)
            and len(node) == 6
            and node[0] in (fmt.custom, fmt.dataclass)
        ):
            continue
        entry = entries.get(node[3]) if isinstance(node[3], type) else None
        if entry is None:
            continue  # JAX says "Unknown custom type" if it does not know it either
        kind = fmt.dataclass if is_dataclass_entry(entry) else fmt.custom
        if kind != node[0]:
            if out is None:
                out = list(nodes)
            out[i] = (kind, *node[1:])
    return nodes if out is None else out


def _of_jax(registry: Any, fmt: _Format) -> bool:
    return any(registry is r for r in fmt.registries)


def patch(stack: contextlib.ExitStack, register_dataclass: Any) -> None:
    """Make `PyTreeDef` pickle in plain JAX's form and unpickle in this process's,
    until `stack` closes (which puts JAX's two methods back). `register_dataclass`
    is JAX's own (`install()` is about to replace it)."""
    fmt = _format(register_dataclass)
    treedef = fmt.treedef
    getstate = vars(treedef)["__getstate__"]
    setstate = vars(treedef)["__setstate__"]

    @ft.wraps(getstate)
    def __getstate__(self: Any) -> Any:
        state = getstate(self)
        if not _of_jax(state[0], fmt):
            return state
        nodes = _written(fmt, state[1])
        return state if nodes is state[1] else (state[0], nodes)

    @ft.wraps(setstate)
    def __setstate__(self: Any, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:
            if _of_jax(state[0], fmt):
                state = (state[0], _read(fmt, state[1]))
        setstate(self, state)

    for name, new, old in (
        ("__getstate__", __getstate__, getstate),
        ("__setstate__", __setstate__, setstate),
    ):
        stack.callback(setattr, treedef, name, old)
        setattr(treedef, name, new)
