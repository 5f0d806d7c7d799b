"""Patch `jax.tree_util.register_dataclass` so that every class registered through
it (directly, or by `flax.struct.dataclass` / `PyTreeNode`) gets generated,
`__new__`-based flatten/unflatten functions."""

from __future__ import annotations

import contextlib
import inspect

from .._compat._versions import check, spec
from .._errors import PRIVATE_API_CHANGED, Unsupported
from ._register import install_route

_EXPECTED_PARAMS = ("nodetype", "data_fields", "meta_fields", "drop_fields")


def patch(stack: contextlib.ExitStack) -> None:
    import jax
    import jax.tree_util

    check("jax")
    original = jax.tree_util.register_dataclass
    params = tuple(inspect.signature(original).parameters)
    if params != _EXPECTED_PARAMS:
        raise Unsupported(
            PRIVATE_API_CHANGED.format(
                what=f"jax.tree_util.register_dataclass{_EXPECTED_PARAMS} "
                f"(found parameters {params})",
                package="jax",
                found=jax.__version__,
                supported=spec("jax"),
            )
        )
    jax.tree_util.register_dataclass = install_route(
        original, "jax.tree_util.register_dataclass"
    )
    stack.callback(setattr, jax.tree_util, "register_dataclass", original)
