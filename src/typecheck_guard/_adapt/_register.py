"""Registering a dataclass-like class with a generated, `__new__`-based pair of
flatten/unflatten functions: `typecheck_guard.register_dataclass`, and what
`install()` does to every `jax.tree_util.register_dataclass` call."""

from __future__ import annotations

import dataclasses
import functools as ft
import inspect
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar, overload

from .._errors import (
    ALREADY_ADAPTED_FIX,
    ALREADY_DATACLASS_FIX,
    ALREADY_OTHER_FIX,
    ALREADY_REGISTERED,
    FIELD_MISMATCH,
    NO_RESTORE,
    NOT_A_CLASS,
    NOT_A_DATACLASS,
    NOT_NAMES,
    ONE_OF_FIELDS,
    OVERLAP,
    UNKNOWN_DROP,
)
from .._unflatten._records import (
    FLAX_STRUCT,
    adapted_how as adapted_how,
    lock as _lock,
    mark_adapted,
    mark_marked,
    marked_why as marked_why,
    registration_of,
)
from ._codegen import Restore, generate_dataclass_functions
from ._rule import dataclass_refusal

__all__ = ["adapted_how", "marked_why", "register_dataclass"]

# The route of an explicit `typecheck_guard.register_dataclass`: `__new__`, always.
OPT_IN = "typecheck_guard.register_dataclass"

_T = TypeVar("_T", bound=type)


class Plan(NamedTuple):
    data_fields: tuple[str, ...]
    meta_fields: tuple[str, ...]
    restore: dict[str, Restore]
    missing_default: tuple[tuple[str, str], ...]  # (field name, why not flattened)
    order: tuple[str, ...]  # the dataclass field order, which __init__ writes in


def _plural(names: set[str]) -> tuple[str, str]:
    return ", ".join(sorted(map(repr, names))), ("are" if len(names) > 1 else "is")


def _slot_field(cls: type, name: str) -> bool:
    """Whether field `name` of `cls` is a slot: then the generated `__init__` writes
    even an `init=False` field's default (`dataclasses._field_init` with
    `slots=True`). A field with a default that is no slot is left to its class
    attribute, even when the class has hand-written `__slots__` (with `__dict__` or
    `__weakref__`): Python 3.10 and 3.11 don't record `slots=True`, so we look at
    the attribute itself."""
    return isinstance(
        inspect.getattr_static(cls, name, None), types.MemberDescriptorType
    )


def _meant(value: str, fields: Sequence[str]) -> list[str]:
    """The names a string given for a list of names stands for: one field's name,
    names between commas or spaces, or one name per letter (`'xy'`), whichever
    names fields of the class (none: `[]`). Without fields to compare with, the
    names between commas or spaces."""
    split = value.replace(",", " ").split()
    if not fields:
        return split
    for names in ([value], split, list(value)):
        if names and set(names) <= set(fields):
            return names
    return []


def _names(
    cls: str, arg: str, value: Any, fields: Sequence[str] = ()
) -> tuple[str, ...]:
    """`value` as a tuple of field names, or a message naming `cls` and `arg`;
    `fields`, the class's, make the suggestion for a string one that names them."""
    if isinstance(value, str):
        meant = _meant(value, fields)
        listed = ", ".join(map(repr, fields))
        fix = (
            f"{arg}={meant!r}"
            if meant
            else f"{arg}=[...], a list of its fields ({listed})"
        )
        raise TypeError(
            NOT_NAMES.format(cls=cls, arg=arg, got=f"the string {value!r}", fix=fix)
        )
    try:
        names = tuple(value)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(
            NOT_NAMES.format(
                cls=cls,
                arg=arg,
                got=f"{value!r} of type {type(value).__name__}",
                fix=f"{arg}=['x', 'y']",
            )
        ) from None
    return names


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
    # What is given must be names, before "give both or neither" (`data_fields=5`
    # alone is wrong twice; say the worse first).
    names = (
        tuple(f.name for f in dataclasses.fields(cls))
        if dataclasses.is_dataclass(cls)
        else ()
    )
    for arg, value in (("data_fields", data_fields), ("meta_fields", meta_fields)):
        if value is not None:
            _names(name, arg, value, names)
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
    data_fields = _names(name, "data_fields", data_fields, names)
    meta_fields = _names(name, "meta_fields", meta_fields, names)
    drop_fields = _names(name, "drop_fields", drop_fields, names)
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
                if not f.init and not _slot_field(cls, field_name):
                    # The generated `__init__` of a class without slots leaves such a
                    # field unset: the class attribute holds its default
                    # (`dataclasses._field_init`). So do we, or `vars()` would
                    # differ from JAX's unflatten.
                    continue
                restore[field_name] = Restore(value=f.default)
            elif f.default_factory is not dataclasses.MISSING:
                restore[field_name] = Restore(factory=f.default_factory)
            else:
                missing.append((field_name, why))
    if overlap := set(data_fields) & set(meta_fields):
        names, verb = _plural(overlap)
        raise ValueError(OVERLAP.format(cls=name, names=names, verb=verb))
    order = (
        tuple(f.name for f in dataclasses.fields(cls))
        if dataclasses.is_dataclass(cls)
        else (*data_fields, *meta_fields)
    )
    return Plan(data_fields, meta_fields, restore, tuple(missing), order)


def _already_registered(cls: type) -> str:
    """The message for registering `cls` twice: who registered it, and what to do."""
    from .._compat._jax import registry
    from .._unflatten._records import is_dataclass_entry

    how = adapted_how(cls)
    if how is not None:
        by, fix = f"by {how}", ALREADY_ADAPTED_FIX
    else:
        entry = registry().get(cls)
        by = f"by {registration_of(cls, entry)}"
        fix = ALREADY_DATACLASS_FIX if is_dataclass_entry(entry) else ALREADY_OTHER_FIX
    return ALREADY_REGISTERED.format(cls=cls.__qualname__, by=by, fix=fix)


def adapt(cls: type, p: Plan, how: str, refusal: str | None = None) -> None:
    """Register `cls` with JAX through generated functions.

    Without `refusal` (`typecheck_guard.register_dataclass`, your opt-in), unflatten
    creates the instance with `__new__` and writes its fields. With `refusal="..."`
    (`install()`'s route: the reason we can't prove that equal to JAX's
    `cls(**fields)`, or `None` when we can), `install()`'s rule applies: `__new__`
    while the class, judged as it is at its first unflatten and whenever its
    `__init__` is replaced, still passes the rule; otherwise JAX's own
    `cls(**fields)`, marked, so that only its check is skipped.
    """
    from jax._src.tree_util import register_pytree_with_keys

    from .._compat._jax import registry
    from ._marked import preparer

    with _lock:
        if cls in registry():
            raise ValueError(_already_registered(cls))
        fns = generate_dataclass_functions(
            cls, p.data_fields, p.meta_fields, p.restore, p.order
        )
        new, marked = fns.unflatten, fns.marked_unflatten
        marked.__globals__["_prepare"] = preparer(cls, marked)
        judged = {"refusal": refusal}

        def slow(meta: Any, data: Any) -> Any:
            # `__init__` is not the one we judged: a decorator stacked above the
            # registration (or a later one) wrapped it. Judge the class as it is now.
            if judged["refusal"] is None:
                reason = (
                    None if how == OPT_IN else dataclass_refusal(cls, p.missing_default)
                )
                if reason is None:
                    new.__globals__["_init"] = cls.__init__
                    return new(meta, data)
                judged["refusal"] = f"{reason} (as decorated when first unflattened)"
                mark_marked(cls, how, judged["refusal"])
            return marked(meta, data)

        new.__globals__["_slow"] = slow
        if refusal is None:
            unflatten, plain = new, fns.plain_unflatten
        else:
            unflatten, plain = marked, fns.plain_unflatten
        unflatten.__typecheck_guard_plain__ = plain  # type: ignore[attr-defined]
        register_pytree_with_keys(
            cls, fns.flatten_with_keys, unflatten, flatten_func=fns.flatten
        )
        if refusal is None:
            mark_adapted(cls, how)
        else:
            mark_marked(cls, how, refusal)


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

    Fields that are not flattened (`drop_fields`, `init=False`) are set as the
    dataclass-generated `__init__` sets them (their default or `default_factory()`),
    and fields are written in field order. `__post_init__` is not called on
    unflatten: the values being restored are those of an object that was already
    constructed (or traced).

    Calling this is your opt-in to `__new__` semantics for `nodetype`, whatever its
    `__init__`, `__post_init__` or `__new__` do. `typecheck_guard.install()` is
    stricter: it adapts a class only when this builds exactly what JAX's own
    `cls(**fields)` builds, and leaves every other class to JAX (see
    `typecheck_guard.unadapted()`).

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
    adapt(nodetype, p, OPT_IN)
    return nodetype


def _once(value: Any) -> Any:
    """`value` as a tuple when it is an iterator (which reading once would leave
    empty for JAX), else unchanged: a list reaches JAX as the list it is, in its
    error messages too."""
    if value is None or isinstance(value, (str, Sequence)):
        return value
    try:
        return tuple(value)
    except TypeError:
        return value


def install_route(original: Callable[..., Any], how: str) -> Callable[..., Any]:
    """The function `install()` puts in place of `jax.tree_util.register_dataclass`.

    Every class it registers unflattens without its check: through `__new__` when
    `_rule.dataclass_refusal` finds no reason not to, else through JAX's own
    `cls(**fields)` with JAX's mark set (`adapt`). Arguments JAX would refuse go to
    JAX, which raises its own error.
    """

    @ft.wraps(original)
    def register_dataclass(
        nodetype: Any,
        data_fields: Sequence[str] | None = None,
        meta_fields: Sequence[str] | None = None,
        drop_fields: Sequence[str] = (),
    ) -> Any:
        __tracebackhide__ = True
        # Who called us names the route in `unadapted()`, `scan` and our messages
        # (from jax 0.11 on, the public `register_dataclass` calls us).
        frame = sys._getframe(1)
        while frame.f_back is not None and (
            frame.f_globals.get("__name__") == "jax._src.tree_util"
        ):
            frame = frame.f_back
        caller = frame.f_globals.get("__name__")
        route = FLAX_STRUCT if caller == "flax.struct" else how
        # An iterator read once by us would reach JAX empty.
        data_fields, meta_fields, drop_fields = map(
            _once, (data_fields, meta_fields, drop_fields)
        )
        try:
            p = plan(nodetype, data_fields, meta_fields, drop_fields)
        except (TypeError, ValueError):
            p = None
        if p is not None:
            from .._compat._jax import registry

            with _lock:
                if nodetype not in registry():
                    adapt(
                        nodetype,
                        p,
                        route,
                        dataclass_refusal(nodetype, p.missing_default),
                    )
                    return nodetype
        # Let JAX raise exactly the error it raised before install(), alone (raised
        # here, outside the `except`, it has no `__context__`).
        return original(nodetype, data_fields, meta_fields, drop_fields)

    register_dataclass.__typecheck_guard_original__ = original  # type: ignore[attr-defined]
    return register_dataclass
