"""Which registered pytree classes still run a typecheck when JAX unflattens them.

Read from JAX's registry on demand, so it also sees classes registered before
`install()`. After `install()`, every class registered through JAX's, flax's or
chex's registration unflattens without its check; what is left is:

- classes registered before `install()` (or through a registration function that
  was looked up before it and kept): `install()` can't change what JAX's registry
  already holds, and `unflatten_safe` guards them;
- classes whose check can't be skipped without skipping more: a decorator that is not
  a typechecker sits above the check of a hook the unflatten calls.

Each is judged as it is now, the decorators stacked above its registration included.
Used by `unadapted()`, `typecheck-guard scan` and the profiler's report.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._compat._checkers import INSTRUMENTED_WHY, peel
from .._unflatten._guards import blocker, original_of
from .._unflatten._records import (
    builds_with_new,
    hooks_of,
    is_dataclass_entry,
    is_ours,
    registration_of,
    unflatten_of,
)

__all__ = ["UnadaptedClass", "at_risk", "describe", "unadapted"]

BEFORE_INSTALL = "registered before typecheck_guard.install()"


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
    """Which methods carry them: `"__init__"`, `"__post_init__"`, `"__setattr__"`."""
    reason: str
    """Why its unflatten still runs the check."""

    @property
    def fix(self) -> str:
        """The one-line fix: what to do so that the class's unflatten stops running
        the check, the fixes that need no edit first."""
        name = self.cls.__qualname__
        if INSTRUMENTED_WHY in self.reason:
            return (
                "check it with beartype or typeguard 2.13.3 (for example "
                "@jaxtyped(typechecker=beartype)), which wrap the function: then "
                "typecheck_guard can skip exactly the check of the rebuild"
            )
        if "not a typechecker" in self.reason:
            return (
                "put the typechecker outermost, above the other decorator (then "
                "typecheck_guard can skip the check and still run the decorator)"
            )
        if "its metaclass" in self.reason and "__call__" in self.reason:
            return (
                f"build {name} without a metaclass __call__ (do its work in "
                "__post_init__, say): then typecheck_guard can skip exactly the "
                "check of the rebuild"
            )
        if self.reason.startswith(BEFORE_INSTALL):
            return (
                "run your program with `typecheck-guard run` (tests with `pytest "
                "--typecheck-guard-install`), or call typecheck_guard.install() "
                f"before {name} is defined; or wrap the jitted functions that return "
                "it: typecheck_guard.unflatten_safe(jax.jit(step))"
            )
        return (
            "wrap the jitted functions that return it in typecheck_guard.unflatten_safe"
        )

    def __str__(self) -> str:
        return (
            f"{self.cls.__module__}.{self.cls.__qualname__} ({self.registration}; "
            f"{'/'.join(self.checkers)} on {', '.join(self.checked)}): "
            f"{self.reason}; {self.fix}"
        )


def checked_methods(cls: type, names: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    out = {}
    for name in names:
        method = getattr(cls, name, None)
        if method is None or method in (object.__init__, object.__setattr__):
            continue
        layers = peel(original_of(method))
        if layers.checkers:
            out[name] = layers.checkers
    return out


def describe(cls: type, entry: Any = None) -> UnadaptedClass | None:
    """An `UnadaptedClass` record if unflattening `cls` runs a typecheck, else None."""
    from .._compat._jax import registry

    entry = registry().get(cls) if entry is None else entry
    if entry is None or builds_with_new(cls, getattr(entry, "from_iter", None)):
        return None
    fn = unflatten_of(entry)
    module = getattr(fn, "__module__", "") or ""
    if not is_ours(cls) and (
        # Our own classes; `typecheck-guard bench` defines its scenario classes under
        # `typecheck_guard._tools._bench`: they stand for user code and must be seen.
        module.startswith("typecheck_guard")
        and not module.startswith("typecheck_guard._tools._bench")
    ):
        return None
    hooks = hooks_of(cls, entry)
    checked = checked_methods(cls, hooks)
    if not checked:
        return None
    blocked = blocker(cls, hooks)
    if is_ours(cls):
        if blocked is None:
            blocked = _metaclass_call(cls, checked)
        if blocked is None:
            return None
        reason = blocked
    else:
        registration = registration_of(cls, entry)
        if not is_dataclass_entry(entry) and registration.startswith(
            "register_pytree_node"
        ):
            # A hand-written unflatten that builds with `__new__` calls no
            # constructor hook (a guess from its code's names, for this report only).
            code = getattr(fn, "__code__", None)
            if code is not None and "__new__" in code.co_names:
                return None
        reason = BEFORE_INSTALL + (f"; {blocked}" if blocked else "")
    checkers = tuple(dict.fromkeys(c for cs in checked.values() for c in cs))
    return UnadaptedClass(
        cls, registration_of(cls, entry), checkers, tuple(checked), reason
    )


METACLASS_CALL = "its metaclass {meta} defines __call__"


def _metaclass_call(cls: type, checked: dict[str, tuple[str, ...]]) -> str | None:
    """A class whose metaclass defines `__call__` is built through it: a frame of
    the user's runs between the unflatten and `__init__`, and may build other
    instances there, so the guards can't prove a construction is the rebuild's and
    check it (`_unflatten/_guards.py`, row 1)."""
    if not checked or type(cls).__call__ is type.__call__:
        return None
    return (
        METACLASS_CALL.format(meta=type(cls).__qualname__)
        + ", which runs between JAX's unflatten and __init__ and may build other "
        "instances there: every construction it makes is checked"
    )


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
    """The registered pytree classes whose unflatten still runs a typecheck, each
    with the reason and the one-line fix.

    After `install()`, every class registered after it unflattens without its check,
    so what is listed is: classes registered before `install()` (fix: call it first,
    with no code change through `typecheck-guard run` or `pytest
    --typecheck-guard-install`, or wrap the jitted functions that return them in
    `typecheck_guard.unflatten_safe`), and classes whose check sits under a decorator
    that is not a typechecker (fix: put the typechecker outermost).

    **Returns:**

    A tuple of `UnadaptedClass` records (`cls`, `registration`, `checkers`,
    `checked`, `reason`, `fix`); `str()` of one is a single line.

    !!! Example

        ```python
        for record in typecheck_guard.unadapted():
            print(record)
        ```
    """
    return tuple(at_risk())
