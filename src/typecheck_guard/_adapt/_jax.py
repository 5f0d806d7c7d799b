"""Patch JAX's registration so that every class registered from now on unflattens
without its check.

JAX funnels every registration but one through a single function of
`jax._src.tree_util`: `register_pytree_node`, `register_pytree_with_keys`,
`register_pytree_node_class`, `register_pytree_with_keys_class`, `register_static`
and chex all reach `register_pytree_node` (up to jax 0.10) or
`_register_pytree_node` (from jax 0.11), looked up as a module global at call time.
We patch that funnel: the unflatten it hands JAX is the caller's own, wrapped to set
JAX's mark (`_marked.py`). `register_dataclass` (`_register_dataclass` from jax
0.11), what `flax.struct.dataclass`, `PyTreeNode` and `TrainState` go through, gets
`_register.install_route`: a generated `__new__`-based unflatten where that provably
builds what JAX's `cls(**fields)` builds, else `cls(**fields)`, marked.

Where a public name in `jax.tree_util` is the funnel itself (up to jax 0.10), we patch
that name too: `jax.tree_util.register_pytree_node(...)` looks up `jax.tree_util`'s
attribute, not `jax._src.tree_util`'s.

`install()` calls `patch` once JAX is imported: right after `import jax` runs JAX's
own code, or at once if JAX is imported already (`_compat/_importhook.py`). Then
one probe asks JAX whether its own dataclass unflatten still calls `__init__`
(jax-ml/jax#34317 proposes that it stop); if it doesn't, patching
`register_dataclass` is redundant, and we leave it alone and say so in the log.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools as ft
import inspect
import logging
from collections.abc import Callable
from typing import Any

from .._compat._versions import check, spec
from .._errors import PRIVATE_API_CHANGED, Unsupported
from .._unflatten._records import lock, mark_marked, route_of_unflatten
from ._codegen import generate_unchecked_flatten
from ._marked import activate, marks_calls, wants_mark
from ._pickling import patch as patch_pickling
from ._register import install_route

_logger = logging.getLogger("typecheck_guard")

_DATACLASS_PARAMS = ("nodetype", "data_fields", "meta_fields", "drop_fields")
_NODE_PARAMS = ("nodetype", "flatten_func", "unflatten_func", "flatten_with_keys_func")


def _params_ok(fn: Any, expected: tuple[str, ...], name: str) -> None:
    import jax

    params = tuple(inspect.signature(fn).parameters)
    if params[: len(expected)] != expected:
        raise Unsupported(
            PRIVATE_API_CHANGED.format(
                what=f"{name}{expected} (found parameters {params})",
                package="jax",
                found=jax.__version__,
                supported=spec("jax"),
            )
        )


def _marking_register(original: Callable[..., Any]) -> Callable[..., Any]:
    """What `install()` puts in place of JAX's `register_pytree_node` funnel."""

    @ft.wraps(original)
    def register_pytree_node(
        nodetype: Any,
        flatten_func: Any,
        unflatten_func: Any,
        flatten_with_keys_func: Any = None,
        **kwargs: Any,
    ) -> Any:
        __tracebackhide__ = True
        # `registry=...`: JAX filling one of its own registries, not the user's.
        if kwargs.get("registry") is not None or not wants_mark(
            nodetype, unflatten_func
        ):
            return original(
                nodetype, flatten_func, unflatten_func, flatten_with_keys_func, **kwargs
            )
        with lock:
            # A checked flatten (jaxtyping's import hook checks a node's own
            # `tree_flatten`) is called by JAX's registry without its check, as the
            # unflatten is: the registry calling it is the dispatch or tree operation
            # whose rebuild we skip.
            out = original(
                nodetype,
                generate_unchecked_flatten(nodetype, flatten_func) or flatten_func,
                marks_calls(nodetype, unflatten_func),
                flatten_with_keys_func
                if flatten_with_keys_func is None
                else generate_unchecked_flatten(nodetype, flatten_with_keys_func)
                or flatten_with_keys_func,
                **kwargs,
            )
            mark_marked(
                nodetype,
                route_of_unflatten(unflatten_func),
                "its registered unflatten is its own (JAX calls it, marked)",
            )
        return out

    register_pytree_node.__typecheck_guard_original__ = original  # type: ignore[attr-defined]
    return register_pytree_node


@ft.cache
def dataclass_unflatten_calls_init() -> bool:
    """Whether JAX's own `register_dataclass` unflatten calls `__init__` (or
    `__post_init__`): one probe class, registered once per process."""
    from jax import tree_util

    calls: list[str] = []

    @dataclasses.dataclass
    class _TypecheckGuardProbe:
        x: int

        def __post_init__(self) -> None:
            calls.append("__post_init__")

    init = _TypecheckGuardProbe.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        calls.append("__init__")
        init(self, *args, **kwargs)

    _TypecheckGuardProbe.__init__ = counted  # type: ignore[method-assign]
    original = (
        getattr(tree_util.register_dataclass, "__typecheck_guard_original__", None)
        or tree_util.register_dataclass
    )
    original(_TypecheckGuardProbe, data_fields=["x"], meta_fields=[])
    leaves, treedef = tree_util.tree_flatten(_TypecheckGuardProbe(1))
    calls.clear()
    tree_util.tree_unflatten(treedef, leaves)
    return bool(calls)


def _patch_names(
    stack: contextlib.ExitStack, modules: list[Any], name: str, new: Any
) -> None:
    for module in modules:
        stack.callback(setattr, module, name, getattr(module, name))
        setattr(module, name, new)


def funnel_name(public: str) -> str:
    """The name in `jax._src.tree_util` of the function every registration of a kind
    goes through: `_register_pytree_node` / `_register_dataclass` from jax 0.11 on,
    the public one before."""
    from jax._src import tree_util as src

    return f"_{public}" if hasattr(src, f"_{public}") else public


def patch(stack: contextlib.ExitStack) -> None:
    import jax
    import jax.tree_util
    from jax._src import tree_util as src

    check("jax")
    node_name = funnel_name("register_pytree_node")
    node_funnel = getattr(src, node_name)
    _params_ok(node_funnel, _NODE_PARAMS, f"jax._src.tree_util.{node_name}")
    dataclass_name = funnel_name("register_dataclass")
    dataclass_funnel = getattr(src, dataclass_name)
    _params_ok(
        dataclass_funnel, _DATACLASS_PARAMS, f"jax._src.tree_util.{dataclass_name}"
    )

    def aliases(name: str, fn: Any) -> list[Any]:
        # The public name too, where it is the funnel itself.
        return [src] + [m for m in (jax.tree_util,) if getattr(m, name, None) is fn]

    activate(stack)
    _patch_names(
        stack,
        aliases(node_name, node_funnel),
        node_name,
        _marking_register(node_funnel),
    )
    if dataclass_unflatten_calls_init():
        # Its classes become custom nodes: their pickled treedefs stay plain JAX's.
        patch_pickling(stack, dataclass_funnel)
        _patch_names(
            stack,
            aliases(dataclass_name, dataclass_funnel),
            dataclass_name,
            install_route(dataclass_funnel, "jax.tree_util.register_dataclass"),
        )
    else:
        _logger.info(
            "typecheck_guard.install(): jax %s's own register_dataclass unflattens "
            "without calling __init__, so it is left as it is.",
            jax.__version__,
        )
