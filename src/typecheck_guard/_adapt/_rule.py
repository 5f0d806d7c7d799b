"""The rule `install()` follows before unflattening a class through `__new__`: only
where that provably rebuilds exactly what the library's own unflatten does.

JAX's `register_dataclass` unflattens with `cls(**fields)`. Ours creates the instance
with `object.__new__` and writes the fields. The two build the same object when
`cls(**fields)` does nothing but write those fields, which we can tell from the
class without reading any user code:

1. `cls` is a dataclass with no `InitVar` (an `InitVar` is passed to
   `__post_init__`, or refused by `__init__` when it has no default);
2. `cls.__init__`, under typechecker wrappers only (jaxtyping, beartype,
   typeguard), is the `__init__` that `@dataclass` generated for these fields: it
   writes each field, in field order, and defaults the rest;
3. `cls` has no `__post_init__`, or one whose own body is empty (`pass`, `...`, a
   docstring) under typechecker wrappers: the generated `__init__` calls it, and
   anything else it does (through `super()`, helpers, `setattr`, ...) is not ours to
   prove;
4. `cls.__new__` is `object.__new__`: a custom `__new__` receives the constructor's
   arguments;
5. the metaclass does not override `type.__call__`, which `cls(**fields)` runs;
6. `__setattr__` is `object`'s, or the class is frozen (the generated `__init__` of
   a frozen class writes with `object.__setattr__`; a non-frozen one assigns through
   `__setattr__`);
7. every field not passed to `__init__` (`init=False`, `drop_fields`) has a
   default or a default factory, which we apply as `__init__` would.
8. the checks on `__init__` and `__post_init__` are under a `@jaxtyped` of their own:
   a checker that is not (beartype or typeguard on the class or the method) binds
   jaxtyping dimensions in the memo of an enclosing `@jaxtyped` function, as plain
   JAX's `cls(**fields)` there does, and a later construction is checked against
   them.

chex unflattens with `cls.__new__(cls)`, writes the fields with
`object.__setattr__` and calls `__post_init__`: only rules 3 and 8 matter there.

Any other class unflattens through the library's own unflatten, with JAX's mark set,
so that only its check is skipped (`_marked.py`): the same code runs, so the same
object comes out, a little slower. The rule is judged at registration, again at the
class's first unflatten (decorators stacked above the registration have run by then)
and whenever `__init__` is replaced. We rejected reading bytecode for the
attributes `__post_init__` sets: `super().__post_init__()`, helper methods and
`setattr` hide them, and a rule that misses a case silently changes a value.
"""

from __future__ import annotations

import dataclasses
import dis
import types
from collections.abc import Iterable
from typing import Any

from .._compat._checkers import checker_of, peel
from .._unflatten._guards import original_of

__all__ = ["chex_refusal", "dataclass_refusal"]


def _under_checkers(fn: Any) -> Any:
    """`fn` with its typechecker wrapper layers taken off (a layer that is not a
    checker's stops the walk, and is what we then look at)."""
    seen = set()
    while checker_of(fn) is not None and id(fn) not in seen:
        seen.add(id(fn))
        inner = getattr(fn, "__wrapped__", None)
        if inner is None:
            # typeguard 4 instruments the function in place: its checks are inside.
            return fn
        fn = inner
    return fn


def _generated(fn: Any, owner: type, name: str) -> bool:
    """Whether `fn` is the method `name` that `@dataclass` generated for `owner`.

    `dataclasses` compiles its methods from source with `exec` (filename
    `<string>`) and names them `Owner.name` on Python 3.10 to 3.13; a method written
    in the class body has the module's file, and one assigned later another name.
    """
    code = getattr(fn, "__code__", None)
    return (
        isinstance(fn, types.FunctionType)
        and code is not None
        and code.co_filename == "<string>"
        and code.co_name == name
        and fn.__qualname__ == f"{owner.__qualname__}.{name}"
    )


def _owner(cls: type, name: str) -> type | None:
    return next((k for k in cls.__mro__ if name in vars(k)), None)


def _params(cls: type) -> Any:
    return vars(cls).get("__dataclass_params__")


def _init_refusal(cls: type) -> str | None:
    owner = _owner(cls, "__init__")
    if owner is None or owner is object:
        return "it has no __init__ of its own"
    fn = _under_checkers(vars(owner)["__init__"])
    params = _params(owner)
    if (
        params is None
        or not params.init
        or not _generated(fn, owner, "__init__")
        # The same fields: not an `__init__` inherited from another dataclass.
        or getattr(owner, "__dataclass_fields__", None)
        is not getattr(cls, "__dataclass_fields__", None)
    ):
        return (
            f"its __init__ ({owner.__qualname__}.__init__) is not the one @dataclass "
            "generated (under typechecker wrappers only), and JAX's unflatten calls it"
        )
    code = fn.__code__
    names = code.co_varnames[1 : code.co_argcount + code.co_kwonlyargcount]
    init_fields = tuple(f.name for f in dataclasses.fields(cls) if f.init)
    # kw_only fields come last in the signature; JAX passes every field by name.
    if sorted(names) != sorted(init_fields):
        return (
            f"its __init__ takes {', '.join(names) or 'nothing'}, not its init fields"
            f" {', '.join(init_fields) or '(none)'}"
        )
    return None


def _does_nothing(fn: Any) -> bool:
    """Whether `fn`'s own body is empty: `pass`, `...` or a docstring."""
    code = getattr(fn, "__code__", None)
    if not isinstance(fn, types.FunctionType) or code is None:
        return False
    ops = [
        (i.opname, i.argval)
        for i in dis.get_instructions(code)
        if i.opname not in ("RESUME", "NOP", "CACHE")
    ]
    return ops in (
        [("RETURN_CONST", None)],
        [("LOAD_CONST", None), ("RETURN_VALUE", None)],
    )


def post_init_refusal(cls: type) -> str | None:
    if not hasattr(cls, "__post_init__"):
        return None
    owner = _owner(cls, "__post_init__")
    where = f"{owner.__qualname__}.__post_init__" if owner else "__post_init__"
    if owner is not None and _does_nothing(
        _under_checkers(vars(owner)["__post_init__"])
    ):
        return None
    return (
        f"it has a __post_init__ ({where}), which the library's unflatten runs and "
        "whose effect we can't prove is only a check"
    )


def _setattr_refusal(cls: type) -> str | None:
    owner = _owner(cls, "__setattr__")
    if owner is object:
        return None
    assert owner is not None
    init_owner = _owner(cls, "__init__")
    params = _params(init_owner) if init_owner is not None else None
    if params is not None and params.frozen:
        # A frozen dataclass's generated `__init__` writes its fields with
        # `object.__setattr__` (`dataclasses._field_assign`): whatever `__setattr__`
        # the class has (the frozen one, beartype's field check over it), the
        # `__init__` never runs it.
        return None
    return (
        f"it defines __setattr__ ({owner.__qualname__}.__setattr__), which its "
        "__init__ runs for every field"
    )


def _memo_refusal(cls: type, names: tuple[str, ...]) -> str | None:
    """A check that is not under a `@jaxtyped` of its own (beartype or typeguard on
    the class or the method) resolves jaxtyping dimensions in the memo of whatever
    `@jaxtyped` function is running: plain JAX's rebuild there binds them, and a
    later construction is checked against them. Building with `__new__` would skip
    that; the marked unflatten checks while such a memo is active."""
    for name in names:
        owner = _owner(cls, name)
        if owner is None or owner is object:
            continue
        checkers = peel(original_of(vars(owner)[name])).checkers
        if checkers and checkers[0] != "jaxtyping":
            return (
                f"its {owner.__qualname__}.{name} is checked by {checkers[0]} outside "
                "a @jaxtyped of its own, so the check binds dimensions in the memo of "
                "an enclosing @jaxtyped function, which JAX's unflatten there must "
                "bind too"
            )
    return None


def dataclass_refusal(
    cls: type, unrestorable: Iterable[tuple[str, str]] = ()
) -> str | None:
    """Why `install()` must leave `cls`, registered with
    `jax.tree_util.register_dataclass`, to JAX; `None` when our unflatten builds
    exactly what JAX's `cls(**fields)` builds.

    `unrestorable`: the fields that are not flattened and have no default, with
    why they are not flattened (`"init=False"`, `"in drop_fields"`).
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return "it is not a dataclass, and JAX's unflatten calls its __init__"
    for f in getattr(cls, "__dataclass_fields__", {}).values():
        if f._field_type is dataclasses._FIELD_INITVAR:  # type: ignore[attr-defined]
            return f"its InitVar {f.name!r} is passed to __init__ on every unflatten"
    for reason in (_init_refusal(cls), post_init_refusal(cls)):
        if reason is not None:
            return reason
    if cls.__new__ is not object.__new__:
        return "it defines __new__, which JAX's unflatten calls with the fields"
    if type(cls).__call__ is not type.__call__:
        return (
            f"its metaclass {type(cls).__qualname__} defines __call__, which runs on "
            "every unflatten"
        )
    if (reason := _setattr_refusal(cls)) is not None:
        return reason
    if (reason := _memo_refusal(cls, ("__init__", "__post_init__"))) is not None:
        return reason
    for name, why in unrestorable:
        return (
            f"field {name!r} ({why}) has no default, so only JAX's call of __init__ "
            "can rebuild it"
        )
    return None


def chex_refusal(cls: type) -> str | None:
    """Why `install()` must leave a `chex.dataclass` to chex's own unflatten."""
    return post_init_refusal(cls) or _memo_refusal(cls, ("__post_init__",))
