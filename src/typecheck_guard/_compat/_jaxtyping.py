"""The private pieces of jaxtyping that the `PyTree[...]` cache reads or patches,
behind one door, checked once.

- `jaxtyping._pytree_type._MetaPyTree.__instancecheck__`: what `isinstance(x,
  PyTree[...])` runs, whichever checker asks (beartype and typeguard both end in
  `isinstance`). It is the function we wrap.
- `jaxtyping._storage`: the thread-local shape memo (`get_shape_memo`,
  `set_shape_memo`, `_has_shape_memo`), the tree-path memo behind `?dim` axes
  (`_treepath_storage`, and the `"(Leaf i in structure S) "` prefix it builds) and the
  flag that is up while a `PyTree` check flattens (`get_treeflatten_memo`).
- `jaxtyping._array_types`: the metaclass of `Float[Array, "..."]` annotations and
  the classes of their parsed dimensions, to know which memo entries a check reads.

Reading attributes is not enough to trust them: `load()` also runs one check through
the unpatched function and compares the memo it leaves behind with what our cache
would replay. If any of it differs, we refuse to install rather than cache wrongly.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, NamedTuple

from .._errors import PRIVATE_API_CHANGED, Unsupported

__all__ = [
    "Jaxtyping",
    "import_hook_packages",
    "load",
    "signature_as",
    "treepath_prefix",
]


def import_hook_packages(module_name: str | None) -> tuple[str, ...] | None:
    """The packages of the jaxtyping import hook (`install_import_hook`, which
    `pytest --jaxtyping-packages=...` installs) that instrumented the module
    `module_name`, or `None` when no hook did.

    We recognise the hook by what it leaves on the module: its spec's loader is
    jaxtyping's `_JaxtypingLoader`, and its finder, on `sys.meta_path`, lists the
    packages. Both are private: a jaxtyping that renames them only costs the hint we
    give with this (`()` when the loader is found but the finder is not).
    """
    import sys

    module = sys.modules.get(module_name or "")
    loader = getattr(getattr(module, "__spec__", None), "loader", None)
    kind = type(loader)
    if kind.__name__ != "_JaxtypingLoader" or kind.__module__ != (
        "jaxtyping._import_hook"
    ):
        return None
    for finder in sys.meta_path:
        should = getattr(finder, "should_instrument", None)
        if type(finder).__name__ == "_JaxtypingFinder" and should is not None:
            try:
                if should(module_name):
                    return tuple(getattr(finder, "modules", ()))
            except Exception:  # a hint is no place to fail
                continue
    return ()


class Jaxtyping(NamedTuple):
    """What we use from jaxtyping, resolved once."""

    version: str
    meta_pytree: type
    instancecheck: Any  # the original `_MetaPyTree.__instancecheck__`
    get_shape_memo: Any
    set_shape_memo: Any
    has_shape_memo: Any
    treepath_storage: Any  # `threading.local`; `.value` is set inside a `?dim` leaf
    get_treeflatten_memo: Any
    meta_array: type
    array_instancecheck: Any
    named_dim: type
    named_variadic_dim: type
    fixed_dim: type
    anonymous_dims: tuple[Any, ...]


def signature_as(cls: type, signature: Any, **slots: Any) -> Any:
    """jaxtyping's `param_signature` (an `inspect.Signature`) as an instance of
    `cls`, a subclass of ours with the slots `_typecheck_guard_original` (set to
    `signature`) and `slots`: equal to it, sharing its parameters, built without
    `Signature.__init__` (which would check them again). What the runtime guard and
    the profiler put in the closure cell jaxtyping binds each call with."""
    copy = object.__new__(cls)
    for slot in ("_parameters", "_return_annotation"):
        object.__setattr__(copy, slot, getattr(signature, slot))
    object.__setattr__(copy, "_typecheck_guard_original", signature)
    for slot, value in slots.items():
        object.__setattr__(copy, slot, value)
    return copy


def treepath_prefix(index: int, structure: str) -> str:
    """The prefix jaxtyping puts before a `?dim` name bound at leaf `index` of a
    `PyTree[..., structure]` (`jaxtyping._storage.set_treepath_memo`); `load()` checks
    that jaxtyping still spells it this way."""
    return f"(Leaf {index} in structure {structure}) "


def _changed(found: str, what: str) -> Unsupported:
    from ._versions import spec

    return Unsupported(
        PRIVATE_API_CHANGED.format(
            what=what, package="jaxtyping", found=found, supported=spec("jaxtyping")
        )
    )


def _unwrapped(method: Any) -> Any:
    """`method`, or what it stands in for when it is a stand-in of ours."""
    unwrap = getattr(method, "__typecheck_guard_unwrap__", None)
    return unwrap() if unwrap is not None else method


@functools.cache
def load() -> Jaxtyping:
    """Resolve and check jaxtyping's internals; raise `RuntimeError` naming the
    installed and the supported version when they are not what we expect."""
    import jaxtyping

    from ._versions import check

    found = getattr(jaxtyping, "__version__", "unknown")
    check("jaxtyping")
    try:
        from jaxtyping import _array_types, _pytree_type, _storage

        meta_pytree = _pytree_type._MetaPyTree
        # Through the profiler's stand-ins (`_profile/_engine.py`), which may be in
        # place when this first runs: what we model is jaxtyping's own.
        instancecheck = _unwrapped(meta_pytree.__dict__["__instancecheck__"])
        meta_array = _array_types._MetaAbstractArray
        internals = Jaxtyping(
            version=found,
            meta_pytree=meta_pytree,
            instancecheck=instancecheck,
            get_shape_memo=_storage.get_shape_memo,
            set_shape_memo=_storage.set_shape_memo,
            has_shape_memo=_storage._has_shape_memo,
            treepath_storage=_storage._treepath_storage,
            get_treeflatten_memo=_storage.get_treeflatten_memo,
            meta_array=meta_array,
            array_instancecheck=meta_array.__dict__["__instancecheck__"],
            named_dim=_array_types._NamedDim,
            named_variadic_dim=_array_types._NamedVariadicDim,
            fixed_dim=_array_types._FixedDim,
            anonymous_dims=(
                _array_types._anonymous_dim,
                _array_types._anonymous_variadic_dim,
            ),
        )
        # `_check` is where the instance check reads its memo; a `PyTree` that no
        # longer goes through it would make our model of its reads meaningless.
        check_params = tuple(
            inspect.signature(_unwrapped(meta_pytree.__dict__["_check"])).parameters
        )
        params = tuple(inspect.signature(instancecheck).parameters)
    except (ImportError, AttributeError, KeyError, TypeError, ValueError) as e:
        raise _changed(
            found, f"jaxtyping's PyTree instance check and shape memo ({e!r})"
        ) from None
    if params != ("cls", "obj") or check_params != ("cls", "obj", "pytree_memo"):
        raise _changed(
            found,
            "jaxtyping._pytree_type._MetaPyTree.__instancecheck__(cls, obj) and "
            f"._check(cls, obj, pytree_memo) (found {params} and {check_params})",
        )
    if vars(_pytree_type).get("get_shape_memo") is not _storage.get_shape_memo:
        raise _changed(found, "the shape memo of jaxtyping._storage")
    _canary(internals, _storage)
    return internals


def _canary(jt: Jaxtyping, storage: Any) -> None:
    # One real check through the unpatched function, with each kind of binding the
    # cache replays: a single dim, a variadic dim, a structure name and a `?dim` under
    # that structure. What it leaves in the memo must be exactly what we model.
    import jax.tree_util as jtu
    import numpy as np
    from jaxtyping import Float, PyTree

    tree = {"a": np.zeros((2, 3), np.float32)}
    checks = (
        (PyTree[Float[np.ndarray, "n *b"], "T"], True),
        (PyTree[Float[np.ndarray, "?m _"], "T"], True),
        (PyTree[Float[np.ndarray, "n"]], False),
    )
    storage.push_shape_memo({})
    try:
        verdicts = tuple(jt.instancecheck(ann, tree) for ann, _ in checks)
        single, variadic, pytree, _ = jt.get_shape_memo()
        memo = (dict(single), dict(variadic), dict(pytree))
        storage.set_treepath_memo(7, "S T")
        try:
            prefix = storage.get_treepath_memo()
        finally:
            storage.clear_treepath_memo()
    finally:
        storage.pop_shape_memo()
    expected_memo = (
        {"n": 2, treepath_prefix(0, "T") + "m": 2},
        {"b": (False, (3,))},
        {"T": jtu.tree_structure(tree)},
    )
    expected_verdicts = tuple(v for _, v in checks)
    if (
        verdicts != expected_verdicts
        or memo != expected_memo
        or prefix != treepath_prefix(7, "S T")
    ):
        raise _changed(
            jt.version,
            "the shape memo that jaxtyping's PyTree check reads and writes (a check "
            f"returned {verdicts}, expected {expected_verdicts}; it left {memo}, "
            f"expected {expected_memo}; tree-path prefix {prefix!r})",
        )
