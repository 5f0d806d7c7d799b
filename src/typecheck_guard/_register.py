"""Registering a dataclass-like class with a generated, `__new__`-based pair of
flatten/unflatten functions: `typecheck_guard.register_dataclass`, and what
`install()` does to every `jax.tree_util.register_dataclass` call."""

from __future__ import annotations

import dataclasses
import functools as ft
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar, overload

from ._codegen import Restore, generate_dataclass_functions
from ._errors import (
    ALREADY_ADAPTED_FIX,
    ALREADY_DATACLASS_FIX,
    ALREADY_OTHER_FIX,
    ALREADY_REGISTERED,
    FIELD_MISMATCH,
    NO_RESTORE,
    NOT_A_CLASS,
    NOT_A_DATACLASS,
    ONE_OF_FIELDS,
    OVERLAP,
    UNKNOWN_DROP,
)

__all__ = ["register_dataclass"]

_T = TypeVar("_T", bound=type)

# class -> how it was adapted ("register_dataclass", "flax.struct", "chex", ...).
# Weak: we must not be the reason a class stays alive (JAX's registry may be).
_adapted: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
# class -> why install() left it to JAX's own registration.
_refused: weakref.WeakKeyDictionary[type, str] = weakref.WeakKeyDictionary()
# Registration with JAX is a check-then-act on a shared registry.
_lock = threading.RLock()


def adapted_how(cls: type) -> str | None:
    """How typecheck_guard registered `cls`, or `None` if it did not."""
    return _adapted.get(cls)


def refused_why(cls: type) -> str | None:
    return _refused.get(cls)


class Plan(NamedTuple):
    data_fields: tuple[str, ...]
    meta_fields: tuple[str, ...]
    restore: dict[str, Restore]
    missing_default: tuple[tuple[str, str], ...]  # (field name, why not flattened)


def _plural(names: set[str]) -> tuple[str, str]:
    return ", ".join(sorted(map(repr, names))), ("are" if len(names) > 1 else "is")


def plan(
    cls: Any,
    data_fields: Sequence[str] | None,
    meta_fields: Sequence[str] | None,
    drop_fields: Sequence[str],
) -> Plan:
    """Validate the arguments the way `jax.tree_util.register_dataclass` does, with
    messages that name the class, and work out how unflatten fills every field."""
    if not isinstance(cls, type):
        raise TypeError(
            NOT_A_CLASS.format(obj=cls, name=getattr(cls, "__name__", "MyClass"))
        )
    name = cls.__qualname__
    if data_fields is None or meta_fields is None:
        if (data_fields is None) != (meta_fields is None):
            raise TypeError(
                ONE_OF_FIELDS.format(
                    cls=name,
                    data_fields=data_fields,
                    meta_fields=meta_fields,
                    missing="data_fields" if data_fields is None else "meta_fields",
                )
            )
        if not dataclasses.is_dataclass(cls):
            raise TypeError(NOT_A_DATACLASS.format(cls=name))
        fields = dataclasses.fields(cls)
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    for arg, value in (("data_fields", data_fields), ("meta_fields", meta_fields)):
        if isinstance(value, str):
            raise TypeError(
                f"typecheck_guard.register_dataclass({name}): {arg} must be a "
                f"sequence of field names, got the string {value!r}. Write "
                f"{arg}=[{value!r}]."
            )
    data_fields = tuple(data_fields)
    meta_fields = tuple(meta_fields)
    drop_fields = tuple(drop_fields)
    restore: dict[str, Restore] = {}
    missing: list[tuple[str, str]] = []
    if dataclasses.is_dataclass(cls):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if unknown := set(drop_fields) - set(fields):
            names, verb = _plural(unknown)
            raise ValueError(
                UNKNOWN_DROP.format(
                    cls=name, names=names, verb=verb, fields=", ".join(fields) or "none"
                )
            )
        init_fields = {n for n, f in fields.items() if f.init} - set(drop_fields)
        listed = {*data_fields, *meta_fields}
        if listed != init_fields:
            details = ""
            if absent := init_fields - listed:
                names, _ = _plural(absent)
                details += (
                    f" Missing: {names} (list them, or pass "
                    f"drop_fields=[{names}] to leave them to their defaults)."
                )
            if unexpected := listed - init_fields:
                names, _ = _plural(unexpected)
                not_fields = unexpected - set(fields)
                not_init = unexpected & {n for n, f in fields.items() if not f.init}
                details += f" Unexpected: {names}"
                if not_fields:
                    details += f" ({_plural(not_fields)[0]} not a field of {name})"
                details += "."
                if not_init:
                    # JAX infers data fields the same way and fails the same way; we
                    # say why, and what to write.
                    init_names, verb = _plural(not_init)
                    details += (
                        f" {init_names} {verb} declared with init=False, so it can't "
                        "be passed to __init__: leave it out of data_fields and "
                        "meta_fields (pass both explicitly), and unflatten sets it "
                        "to its default."
                    )
            raise ValueError(FIELD_MISMATCH.format(cls=name, details=details))
        for field_name, f in fields.items():
            if field_name in listed:
                continue
            why = "init=False" if not f.init else "in drop_fields"
            if f.default is not dataclasses.MISSING:
                restore[field_name] = Restore(value=f.default)
            elif f.default_factory is not dataclasses.MISSING:
                restore[field_name] = Restore(factory=f.default_factory)
            else:
                missing.append((field_name, why))
    if overlap := set(data_fields) & set(meta_fields):
        names, verb = _plural(overlap)
        raise ValueError(OVERLAP.format(cls=name, names=names, verb=verb))
    return Plan(data_fields, meta_fields, restore, tuple(missing))


def _already_registered(cls: type) -> str:
    """The message for registering `cls` twice: who registered it, and what to do."""
    from ._inspect import registration_of
    from ._jaxcompat import registry

    how = adapted_how(cls)
    if how is not None:
        by, fix = f"by {how}", ALREADY_ADAPTED_FIX
    else:
        registration = registration_of(cls, registry().get(cls))
        by = f"by {registration}"
        fix = (
            ALREADY_DATACLASS_FIX
            if registration == "jax.tree_util.register_dataclass"
            else ALREADY_OTHER_FIX
        )
    return ALREADY_REGISTERED.format(cls=cls.__qualname__, by=by, fix=fix)


def adapt(cls: type, p: Plan, how: str) -> None:
    """Register `cls` with JAX through generated `__new__`-based functions."""
    from jax._src.tree_util import register_pytree_with_keys

    from ._jaxcompat import registry

    with _lock:
        if cls in registry():
            raise ValueError(_already_registered(cls))
        fns = generate_dataclass_functions(cls, p.data_fields, p.meta_fields, p.restore)
        register_pytree_with_keys(
            cls, fns.flatten_with_keys, fns.unflatten, flatten_func=fns.flatten
        )
        _adapted[cls] = how


@overload
def register_dataclass(
    nodetype: None = None,
    data_fields: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
    drop_fields: Sequence[str] = (),
) -> Callable[[_T], _T]: ...


@overload
def register_dataclass(
    nodetype: _T,
    data_fields: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
    drop_fields: Sequence[str] = (),
) -> _T: ...


def register_dataclass(
    nodetype: Any = None,
    data_fields: Sequence[str] | None = None,
    meta_fields: Sequence[str] | None = None,
    drop_fields: Sequence[str] = (),
) -> Any:
    """Register a dataclass as a pytree node that unflattens without `__init__`.

    Same signature and field inference as `jax.tree_util.register_dataclass`: fields
    are data fields unless marked `dataclasses.field(metadata=dict(static=True))`,
    keypaths are one `jax.tree_util.GetAttrKey` per data field in the same order, and
    meta fields are kept in the treedef. The difference: unflattening creates the
    instance with `object.__new__` and sets the fields directly, so a typechecked
    `__init__` (or `__post_init__`) is not run again after every jitted call.

    Fields that are not flattened (`drop_fields`, `init=False`) are set to their
    default on unflatten. `__post_init__` is not called on unflatten: the values
    being restored are those of an object that was already constructed (or traced).

    **Arguments:**

    - `nodetype`: the class. Omit it to use `register_dataclass(...)` as a decorator
        factory.
    - `data_fields`, `meta_fields`: field names; both or neither.
    - `drop_fields`: dataclass fields left out of the pytree.

    **Returns:**

    `nodetype`, unchanged, so that this can be used as a decorator.

    !!! Example

        ```python
        @typecheck_guard.register_dataclass
        @dataclasses.dataclass
        class State:
            params: Float[Array, "n"]
            name: str = dataclasses.field(metadata=dict(static=True), default="s")
        ```
    """
    __tracebackhide__ = True
    if nodetype is None:
        return ft.partial(
            register_dataclass,
            data_fields=data_fields,
            meta_fields=meta_fields,
            drop_fields=drop_fields,
        )
    p = plan(nodetype, data_fields, meta_fields, drop_fields)
    if p.missing_default:
        field_name, why = p.missing_default[0]
        raise ValueError(
            NO_RESTORE.format(cls=nodetype.__qualname__, name=field_name, why=why)
        )
    adapt(nodetype, p, "typecheck_guard.register_dataclass")
    return nodetype


def _innermost(fn: Any) -> Any:
    while getattr(fn, "__wrapped__", None) is not None:
        fn = fn.__wrapped__
    return fn


def _stored_attributes(fn: Any) -> tuple[set[str], bool]:
    """The attribute names `fn` stores with `obj.name = ...`, and whether it also sets
    attributes in ways we can't name (`setattr`, `object.__setattr__`, `__dict__`)."""
    import dis

    code = getattr(_innermost(fn), "__code__", None)
    if code is None:
        return set(), False
    stored = {
        ins.argval for ins in dis.get_instructions(code) if ins.opname == "STORE_ATTR"
    }
    opaque = bool({"__setattr__", "setattr", "__dict__"} & set(code.co_names))
    return stored, opaque


def derives_state(cls: type, registered: set[str]) -> str | None:
    """Why unflattening `cls` through `__new__` could lose state, or `None`.

    JAX's own unflatten calls `cls(**fields)`, which runs `__init__` and, for a
    dataclass, `__post_init__`. If either sets attributes other than the registered
    fields, that state is rebuilt by JAX and would be lost by us, so `install()`
    leaves such classes to JAX. This reads the methods' bytecode: a helper function
    that sets attributes on the instance's behalf is not seen.
    """
    methods = ["__post_init__"]
    if not dataclasses.is_dataclass(cls):
        methods.insert(0, "__init__")
    for name in methods:
        fn = getattr(cls, name, None)
        if fn is None or fn is object.__init__:
            continue
        stored, opaque = _stored_attributes(fn)
        extra = stored - registered
        if opaque or extra:
            what = ", ".join(sorted(extra)) if extra and not opaque else "attributes"
            return f"its {name} sets {what}, which JAX rebuilds by calling it"
    return None


def install_route(original: Callable[..., Any], how: str) -> Callable[..., Any]:
    """The function `install()` puts in place of `jax.tree_util.register_dataclass`."""

    @ft.wraps(original)
    def register_dataclass(
        nodetype: Any,
        data_fields: Sequence[str] | None = None,
        meta_fields: Sequence[str] | None = None,
        drop_fields: Sequence[str] = (),
    ) -> Any:
        __tracebackhide__ = True
        try:
            p = plan(nodetype, data_fields, meta_fields, drop_fields)
        except (TypeError, ValueError):
            # Let JAX raise exactly the error it raised before install().
            return original(nodetype, data_fields, meta_fields, drop_fields)
        reason = None
        if p.missing_default:
            field_name, why = p.missing_default[0]
            reason = (
                f"field {field_name!r} ({why}) has no default; JAX rebuilds it by "
                "calling __init__"
            )
        else:
            reason = derives_state(
                nodetype, {*p.data_fields, *p.meta_fields, *p.restore}
            )
        if reason is None:
            with _lock:
                from ._jaxcompat import registry

                if nodetype not in registry():
                    # Who called us names the route in `scan` and error messages.
                    caller = sys._getframe(1).f_globals.get("__name__")
                    label = "flax.struct.dataclass" if caller == "flax.struct" else how
                    adapt(nodetype, p, label)
                    return nodetype
        out = original(nodetype, data_fields, meta_fields, drop_fields)
        if reason is not None:
            _refused[nodetype] = reason
        return out

    register_dataclass.__typecheck_guard_original__ = original  # type: ignore[attr-defined]
    return register_dataclass
