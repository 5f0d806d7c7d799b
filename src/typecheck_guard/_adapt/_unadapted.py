"""Which registered pytree classes would run a typecheck when they are unflattened.

Read from JAX's registry on demand, so it also sees classes registered before
`install()` and by `register_pytree_node(_class)`. Used by `unadapted()`, by
`unflatten_safe` (to know which classes to guard) and by `typecheck-guard scan`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._compat._checkers import peel
from ._records import (
    CHEX,
    adapted_how,
    is_dataclass_entry,
    refused_why,
    registration_of,
    unflatten_of,
)
from ._rule import would_refuse

__all__ = ["UnadaptedClass", "at_risk", "describe", "unadapted"]

# Libraries whose registered unflatten builds instances with `__new__` and calls no
# constructor hook: classes registered by them never re-run a check on unflatten.
_NEW_BASED = ("equinox.", "flax.nnx.")


class UnadaptedClass(NamedTuple):
    """A registered pytree class whose unflatten still runs a typecheck."""

    cls: type
    """The class itself."""
    registration: str
    """How it is registered, worded as `typecheck-guard scan` words it:
    `"flax.struct.dataclass"`, `"flax.struct.PyTreeNode subclass"`,
    `"jax.tree_util.register_dataclass"`, `"chex.dataclass"`,
    `"register_pytree_node (unflatten: ...)"`, ..."""
    checkers: tuple[str, ...]
    """The checkers found on the methods that unflatten calls."""
    checked: tuple[str, ...]
    """Which methods carry them: `"__init__"`, `"__post_init__"`."""
    reason: str
    """Why `install()` did not adapt it."""

    @property
    def fix(self) -> str:
        """The one-line fix: what to write so that the class's unflatten stops
        running the check."""
        return (
            f"wrap the jitted function that returns {self.cls.__qualname__} with "
            "typecheck_guard.unflatten_safe(...), or define the class after "
            "typecheck_guard.install()"
            if self.reason.startswith("registered before")
            else "wrap the jitted function that returns it with "
            "typecheck_guard.unflatten_safe(...)"
        )

    def __str__(self) -> str:
        return (
            f"{self.cls.__module__}.{self.cls.__qualname__} ({self.registration}; "
            f"{'/'.join(self.checkers)} on {', '.join(self.checked)}): "
            f"{self.reason}; {self.fix}"
        )


def calls_on_unflatten(registration: str) -> tuple[str, ...]:
    """The constructor hooks a registration's unflatten runs."""
    if registration == CHEX:
        return ("__post_init__",)
    # register_dataclass calls `cls(**fields)`; a hand-written unflatten that does not
    # use `__new__` almost always calls the constructor.
    return ("__init__", "__post_init__")


def checked_methods(cls: type, names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    out = {}
    for name in names:
        method = getattr(cls, name, None)
        if method is None or method is object.__init__:
            continue
        layers = peel(method)
        if layers.checkers:
            out[name] = layers.checkers
    return out


def describe(cls: type, entry: Any = None) -> UnadaptedClass | None:
    """An `UnadaptedClass` record if unflattening `cls` runs a typecheck, else None."""
    from .._compat._jax import registry

    if adapted_how(cls) is not None:
        return None
    entry = registry().get(cls) if entry is None else entry
    if entry is None:
        return None
    fn = unflatten_of(entry)
    module = getattr(fn, "__module__", "") or ""
    if module.startswith(_NEW_BASED) or (
        # `typecheck-guard bench` defines its scenario classes under
        # `typecheck_guard._tools._bench`; they stand for user code and must be seen.
        module.startswith("typecheck_guard")
        and not module.startswith("typecheck_guard._tools._bench")
    ):
        return None
    registration = registration_of(cls, entry)
    checked = checked_methods(cls, calls_on_unflatten(registration))
    if not is_dataclass_entry(entry) and registration.startswith(
        "register_pytree_node"
    ):
        code = getattr(fn, "__code__", None)
        if code is not None and "__new__" in code.co_names:
            return None
    if not checked:
        return None
    checkers = tuple(dict.fromkeys(c for cs in checked.values() for c in cs))
    reason = refused_why(cls)
    if reason is None:
        if registration.startswith("register_pytree_node"):
            reason = "its hand-written unflatten calls the constructor"
        else:
            # Registered before install(): say whether install() would adapt it.
            reason = would_refuse(cls, entry) or (
                "registered before typecheck_guard.install()"
            )
    return UnadaptedClass(cls, registration, checkers, tuple(checked), reason)


def at_risk() -> list[UnadaptedClass]:
    """Every registered class whose unflatten would run a typecheck."""
    from .._compat._jax import registry_items

    out = []
    for cls, entry in registry_items():
        record = describe(cls, entry)
        if record is not None:
            out.append(record)
    return out


def unadapted() -> tuple[UnadaptedClass, ...]:
    """The registered pytree classes that `install()` could not adapt and whose
    unflatten still runs a typecheck, each with the one-line fix.

    **Returns:**

    A tuple of `UnadaptedClass` records (`cls`, `registration`, `checkers`,
    `checked`, `reason`, `fix`); `str()` of one is a single line. Classes listed here
    are covered by `typecheck_guard.unflatten_safe`.

    !!! Example

        ```python
        for record in typecheck_guard.unadapted():
            print(record)
        ```
    """
    return tuple(at_risk())
