"""The few private pieces of JAX we read, behind one door, checked once.

- `jax._src.tree_util._registry`: the Python mirror of the pytree registry, which
  both `register_pytree_node` and `register_dataclass` fill. It is the only way to
  list the classes registered before `install()`.
- `jax._src.core.trace_ctx` / `eval_trace`: whether JAX is tracing right now, in
  O(1) (`jax.core.trace_state_clean()` is public but walks more state).
- `jax._src.tree_util.default_registry.flatten_one_level`: one node's children and
  auxiliary data (`None` for a leaf), what `typecheck_guard.check` walks with.
- `jax._src.config.disable_jit`: whether `jax.disable_jit()` is in effect (its
  `.value`, ~50 ns).
- `PyTreeDef.from_node_data_and_children` (jaxlib 0.4.36 spells it
  `make_from_node_data_and_children`): a treedef from a node's type and data and its
  children's treedefs, which the `PyTree` cache stores its keys with.
- `PyTreeDef.__getstate__`, what pickling a treedef reads: every node's data (aux
  data, dict keys) in one C call, which the `PyTree` cache inspects on every lookup.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

from .._errors import PRIVATE_API_CHANGED, Unsupported


@functools.cache
def _load() -> tuple[dict[type, Any], Any, Any]:
    import jax
    from jax._src import core, tree_util

    from ._versions import check, spec

    check("jax")
    try:
        registry = tree_util._registry
        trace_ctx = core.trace_ctx
        eval_trace = core.eval_trace
        trace_ctx.trace  # noqa: B018
    except AttributeError as e:
        raise Unsupported(
            PRIVATE_API_CHANGED.format(
                what=f"jax._src internals ({e})",
                package="jax",
                found=jax.__version__,
                supported=spec("jax"),
            )
        ) from None
    if not isinstance(registry, dict):
        raise Unsupported(
            PRIVATE_API_CHANGED.format(
                what="jax._src.tree_util._registry being a dict",
                package="jax",
                found=jax.__version__,
                supported=spec("jax"),
            )
        )
    return registry, trace_ctx, eval_trace


def registry() -> dict[type, Any]:
    """JAX's registry of custom pytree nodes: class -> entry with `from_iter`."""
    return _load()[0]


def registry_items() -> list[tuple[type, Any]]:
    """A snapshot of `registry()`'s items, safe while other threads register classes.

    `list(d.items())` builds a tuple per item, and an allocation can start a garbage
    collection whose finalizers run Python code and switch threads: another thread
    registering a class then fails us with "dictionary changed size during
    iteration". `dict.copy()` of a dict keyed by classes runs no Python code.
    """
    return list(_load()[0].copy().items())


def pass_for_jitted(cls: type) -> None:
    """Make instances of `cls`, a wrapper of jitted callables, pass JAX's own
    `isinstance(f, jax._src.stages.Wrapped)` (`jax.export.export` asks, from jax
    0.11 on): `Wrapped` is a `Protocol`, whose ABC registration JAX's check reads.
    Nothing is registered where JAX has no such class."""
    from jax._src import stages

    wrapped = getattr(stages, "Wrapped", None)
    if wrapped is not None and hasattr(wrapped, "register"):
        wrapped.register(cls)


def flatten_one_level(tree: Any) -> tuple[Any, Any] | None:
    """`(children, auxiliary data)` of `tree`'s top node, or `None` for a leaf."""
    _load()
    from jax._src.tree_util import default_registry

    return default_registry.flatten_one_level(tree)


def make_jit_disabled():
    """An O(1) function answering "is `jax.disable_jit()` in effect on this thread?"
    (then a jitted callable calls its function directly, and what it calls is no
    unflatten)."""
    _load()
    from jax._src import config

    state = config.disable_jit

    def jit_disabled() -> bool:
        return bool(state.value)

    return jit_disabled


def make_is_tracing():
    """An O(1) function answering "is JAX tracing on this thread right now?"."""
    _, trace_ctx, eval_trace = _load()

    def is_tracing() -> bool:
        return trace_ctx.trace is not eval_trace

    return is_tracing


@functools.cache
def _treedef_builder() -> Any:
    from jax.tree_util import PyTreeDef

    build = getattr(PyTreeDef, "from_node_data_and_children", None)
    if build is None:  # jaxlib 0.4.36 names it so
        build = PyTreeDef.make_from_node_data_and_children
    return build


def treedef_from_node_data(registry: Any, node_data: Any, children: Any) -> Any:
    """`PyTreeDef.from_node_data_and_children`: the treedef of a node of type
    `node_data[0]`, with the node data `node_data[1]` and `children` (treedefs), as
    JAX's own `filter_statics_from_treedef` builds one."""
    return _treedef_builder()(registry, node_data, children)


def _walk_node_data(treedef: Any) -> list[Any]:
    out = []
    stack = [treedef]
    while stack:
        node = stack.pop()
        if node.num_nodes == node.num_leaves == 1:
            continue  # a leaf
        out.append(node.node_data()[1])
        stack.extend(node.children())
    return out


@functools.cache
def _node_data_reader() -> Any:
    import jax

    # `__getstate__()` is `(registry, [(kind, arity, node data, custom type,
    # num_leaves, num_nodes), ...])`, one entry per node and leaf, in C. We check that
    # layout on a known tree, and walk `children()` (one call per node) if it changed.
    probe = jax.tree_util.tree_structure({"k": (1, None)})
    third = operator.itemgetter(2)
    try:
        found = list(map(third, probe.__getstate__()[1]))
    except Exception:
        found = None
    if found != [None, None, None, ["k"]]:
        return _walk_node_data

    def read(treedef: Any) -> Any:
        return list(map(third, treedef.__getstate__()[1]))

    return read


def treedef_node_data(treedef: Any) -> list[Any]:
    """The node data of every node of `treedef` (`None` for a leaf, a list, a tuple
    or `None` itself), in some order: aux data of custom nodes, key lists of dicts,
    the class of a namedtuple."""
    return _node_data_reader()(treedef)
