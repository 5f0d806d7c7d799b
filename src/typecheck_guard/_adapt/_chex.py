"""Patch chex so that `chex.dataclass` classes registered from now on whose
`__post_init__` only checks unflatten without calling it.

chex already unflattens through `__new__`, but then calls `__post_init__` on every
unflatten (`chex/_src/dataclass.py`, `_dataclass_unflatten`), and a typechecked
`__post_init__` runs its check each time. We replace the module-level
`register_dataclass_type_with_jax_tree_util`, which chex looks up at call time from
`dataclass.__call__`, `__init__` and `__setstate__`, with one that registers the
same flatten (sorted `__dict__`, `GetAttrKey` paths: keypaths and treedefs are
unchanged) and a generated unflatten that does what chex's does, less the call of
`__post_init__`. That is exact only when `__post_init__`'s own body is empty under
its typechecker wrappers (`_rule.py`): any other class keeps chex's own
registration, and `unadapted()` lists it with the reason.

If chex is not imported yet, a meta-path finder patches `chex._src.dataclass` right
after it is executed (the design of typeguard's `_importhook.py`).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import weakref
from typing import Any

from .._compat import _versions
from .._compat._importhook import after_import
from .._compat._versions import check, spec
from .._errors import PRIVATE_API_CHANGED, Unsupported
from ._codegen import generate_dict_unflatten

_MODULE = "chex._src.dataclass"
_logger = logging.getLogger(__name__)


def _flatten(node: Any) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    # Same output as chex's own `flatten` closure.
    if node.__dict__:
        return tuple(zip(*sorted(node.__dict__.items()), strict=True))[::-1]  # type: ignore[return-value]
    return ((), ())


def _make_register(module: Any, original: Any) -> Any:
    from jax._src.tree_util import register_pytree_with_keys

    from .._compat._jax import registry
    from ._records import CHEX, lock, mark_adapted, mark_refused
    from ._rule import chex_refusal

    flatten_with_path = module._flatten_with_path
    # chex caches its registration function with `functools.cache`, because it runs
    # on every construction; ours remembers the classes it has seen weakly, so
    # that we are not what keeps a chex dataclass alive.
    seen: weakref.WeakSet[type] = weakref.WeakSet()

    def register_dataclass_type_with_jax_tree_util(data_class: type) -> None:
        """typecheck_guard's replacement for chex's registration function."""
        if data_class in seen:
            return
        with lock:
            reason = chex_refusal(data_class)
            if reason is not None:
                # chex's own registration, unflatten and all.
                original(data_class)
                mark_refused(data_class, CHEX, reason)
            elif data_class in registry():
                _logger.info("%s is already registered as JAX PyTree node.", data_class)
            else:
                register_pytree_with_keys(
                    nodetype=data_class,
                    flatten_with_keys=flatten_with_path,
                    flatten_func=_flatten,
                    unflatten_func=generate_dict_unflatten(data_class),
                )
                mark_adapted(data_class, CHEX)
            # Only once registered: another thread that finds it here goes on to
            # flatten it.
            seen.add(data_class)

    return register_dataclass_type_with_jax_tree_util


def _check_shape(module: Any) -> None:
    found = _versions.installed("chex") or "unknown"
    check("chex")
    problems = []
    for name in ("register_dataclass_type_with_jax_tree_util", "_flatten_with_path"):
        if not callable(getattr(module, name, None)):
            problems.append(f"{_MODULE}.{name}")
    unflatten = getattr(module, "_dataclass_unflatten", None)
    if unflatten is None or tuple(inspect.signature(unflatten).parameters) != (
        "dcls",
        "keys",
        "values",
    ):
        problems.append(f"{_MODULE}._dataclass_unflatten(dcls, keys, values)")
    if problems:
        raise Unsupported(
            PRIVATE_API_CHANGED.format(
                what=", ".join(problems),
                package="chex",
                found=found,
                supported=spec("chex"),
            )
        )


def _patch_module(module: Any, stack: contextlib.ExitStack) -> None:
    _check_shape(module)
    original = module.register_dataclass_type_with_jax_tree_util
    module.register_dataclass_type_with_jax_tree_util = _make_register(module, original)
    stack.callback(
        setattr, module, "register_dataclass_type_with_jax_tree_util", original
    )


def patch(stack: contextlib.ExitStack) -> None:
    module = sys.modules.get(_MODULE)
    if module is not None:
        _patch_module(module, stack)
        return
    if _versions.installed("chex") is None:
        return
    check("chex")
    after_import({_MODULE}, lambda module: _patch_module(module, stack), stack)
