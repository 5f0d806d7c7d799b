"""Patch chex so that `chex.dataclass` classes registered from now on unflatten
without their check.

chex already unflattens through `__new__`, but then calls `__post_init__` on every
unflatten (`chex/_src/dataclass.py`, `_dataclass_unflatten`), and a typechecked
`__post_init__` runs its check each time. We replace the module-level
`register_dataclass_type_with_jax_tree_util`, which chex looks up at call time from
`dataclass.__call__`, `__init__` and `__setstate__`, with one that registers the
same flatten (sorted `__dict__`, `GetAttrKey` paths: keypaths and treedefs are
unchanged) and a generated unflatten that does what chex's does, less the call of
`__post_init__`. That is exact only when `__post_init__`'s own body is empty under
its typechecker wrappers (`_rule.py`), judged at the class's first unflatten: any
other class keeps chex's own unflatten, which `install()`'s `register_pytree_node`
wraps so that JAX's calls are marked (`_marked.py`), and its checked `__post_init__`
skips only its check.

`install()` patches `chex._src.dataclass` right after it is executed, before the rest
of chex (`_compat/_importhook.py`), or at once if chex is imported already.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
import weakref
from typing import Any, Final

from .._compat import _versions
from .._compat._versions import check, spec
from .._errors import PRIVATE_API_CHANGED, Unsupported
from ._codegen import generate_dict_unflatten

MODULE: Final = "chex._src.dataclass"
_logger = logging.getLogger(__name__)


def _flatten(node: Any) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    # Same output as chex's own `flatten` closure.
    if node.__dict__:
        return tuple(zip(*sorted(node.__dict__.items()), strict=True))[::-1]  # type: ignore[return-value]
    return ((), ())


def _make_register(module: Any, original: Any) -> Any:
    import functools

    from jax._src.tree_util import register_pytree_with_keys

    from .._compat._jax import registry
    from .._unflatten._records import CHEX, lock, mark_adapted, mark_marked
    from ._marked import marks_calls
    from ._rule import chex_refusal

    flatten_with_path = module._flatten_with_path
    # chex caches its registration function with `functools.cache`, because it runs
    # on every construction; ours remembers the classes it has seen weakly, so
    # that we are not what keeps a chex dataclass alive.
    seen: weakref.WeakSet[type] = weakref.WeakSet()

    def adapt(data_class: type) -> None:
        plain = functools.partial(module._dataclass_unflatten, data_class)
        new = generate_dict_unflatten(data_class)
        marked = marks_calls(data_class, plain)
        switched: list[str] = []

        def slow(keys: Any, values: Any) -> Any:
            # `__post_init__` is not the one we judged (a decorator stacked above
            # `@chex.dataclass`, or a later one, wrapped it): judge it as it is now.
            if not switched:
                reason = chex_refusal(data_class)
                if reason is None:
                    new.__globals__["_post"] = getattr(
                        data_class, "__post_init__", None
                    )
                    return new(keys, values)
                switched.append(f"{reason} (as decorated when first unflattened)")
                mark_marked(data_class, CHEX, switched[0])
            return marked(keys, values)

        new.__globals__["_slow"] = slow
        new.__typecheck_guard_plain__ = plain  # type: ignore[attr-defined]
        register_pytree_with_keys(
            nodetype=data_class,
            flatten_with_keys=flatten_with_path,
            flatten_func=_flatten,
            unflatten_func=new,
        )
        mark_adapted(data_class, CHEX)

    def register_dataclass_type_with_jax_tree_util(data_class: type) -> None:
        """typecheck_guard's replacement for chex's registration function."""
        if data_class in seen:
            return
        with lock:
            reason = chex_refusal(data_class)
            if reason is not None:
                # chex's own registration, whose unflatten (which calls
                # `__post_init__`) our `register_pytree_node` marks.
                original(data_class)
                if data_class in registry():
                    mark_marked(data_class, CHEX, reason)
            elif data_class in registry():
                _logger.info("%s is already registered as JAX PyTree node.", data_class)
            else:
                adapt(data_class)
            # Only once registered: another thread that finds it here goes on to
            # flatten it.
            seen.add(data_class)

    # It stands in for chex's function, in chex's module: named as that, it pickles
    # by reference to it (cloudpickle sends a chex dataclass defined in `__main__`
    # by value, with the chex functions its methods call), and the receiving
    # process calls whatever chex's module holds there.
    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(
            register_dataclass_type_with_jax_tree_util, name, getattr(original, name)
        )
    return register_dataclass_type_with_jax_tree_util


def _check_shape(module: Any) -> None:
    found = _versions.installed("chex") or "unknown"
    check("chex")
    problems = []
    for name in ("register_dataclass_type_with_jax_tree_util", "_flatten_with_path"):
        if not callable(getattr(module, name, None)):
            problems.append(f"{MODULE}.{name}")
    unflatten = getattr(module, "_dataclass_unflatten", None)
    if unflatten is None or tuple(inspect.signature(unflatten).parameters) != (
        "dcls",
        "keys",
        "values",
    ):
        problems.append(f"{MODULE}._dataclass_unflatten(dcls, keys, values)")
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
    """Our part of `install()`, once `chex._src.dataclass` is imported (`install()`
    waits for it: `MODULE`)."""
    _patch_module(sys.modules[MODULE], stack)
