"""Messages for misuse. Each names the user's class or argument and says what to
write instead (Equinox keeps its long messages as module constants the same way)."""

from __future__ import annotations

from typing import Final


class UnadaptedClassesWarning(UserWarning):
    """`install()` found registered classes that still run a typecheck on unflatten
    (at `install()`, for the classes registered before it; at a class's first
    rebuild, for a check a decorator that is not a checker keeps in place)."""


UnadaptedClassesWarning.__module__ = "typecheck_guard"

UNSKIPPABLE_CHECK: Final = (
    "typecheck_guard: JAX is rebuilding {cls}, and {method} runs its typecheck: "
    "a decorator that is not a checker wraps it above its checker ({checker}): "
    "{wrapper} (defined at {where}). install() leaves the check in place, since "
    "skipping it would skip that decorator too (so would unflatten_safe), and it runs "
    "on every rebuild of a {name}: every call of a jitted function that returns one, "
    "every tree operation over one. Apply that decorator below the checker, so that "
    "the checker is the outermost layer of {method} (`@jaxtyped(typechecker="
    "...)` above it){rebuild_fix}."
)

UNSKIPPABLE_REBUILD_FIX: Final = (
    "; or, if the decorator need not run when JAX rebuilds a {name}, build the "
    "instance with object.__new__ in {name}.tree_unflatten instead of calling "
    "{name}(...)"
)

NOT_A_CLASS: Final = (
    "typecheck_guard.register_dataclass expects a class, got {obj!r}. Write\n"
    "\n"
    "    @typecheck_guard.register_dataclass\n"
    "    @dataclasses.dataclass\n"
    "    class {name}:\n"
    "        ...\n"
)

NOT_A_DATACLASS: Final = (
    "typecheck_guard.register_dataclass: {cls} is not a dataclass, so its fields can't "
    "be inferred. Decorate it with @dataclasses.dataclass (under "
    "@typecheck_guard.register_dataclass), or pass both data_fields=[...] and "
    "meta_fields=[...]."
)

ONE_OF_FIELDS: Final = (
    "typecheck_guard.register_dataclass({cls}): data_fields and meta_fields must both "
    "be given, or neither (to infer them from the dataclass fields). Got "
    "data_fields={data_fields!r}, meta_fields={meta_fields!r}. Add {missing}=[...]."
)

NOT_NAMES: Final = (
    "typecheck_guard.register_dataclass({cls}): {arg} must be a sequence of field "
    "names, got {got}. Write {fix}."
)

FIELD_MISMATCH: Final = (
    "typecheck_guard.register_dataclass({cls}): data_fields and meta_fields must list "
    "every dataclass field with init=True, and only those.{details}"
)

UNKNOWN_DROP: Final = (
    "typecheck_guard.register_dataclass({cls}): drop_fields names {names}, which "
    "{verb} not a field of {cls}. Its fields are: {fields}."
)

OVERLAP: Final = (
    "typecheck_guard.register_dataclass({cls}): {names} {verb} listed in both "
    "data_fields and meta_fields; a field is one or the other."
)

NO_RESTORE: Final = (
    "typecheck_guard.register_dataclass({cls}): field {name!r} is not flattened "
    "({why}) and has no default, so unflattening through __new__ cannot restore it "
    "(JAX's own registration would call __init__ to rebuild it). Give it a default, "
    "e.g. `{name}: ... = dataclasses.field(init=False, default=...)`, or compute it "
    "lazily with functools.cached_property."
)

ALREADY_REGISTERED: Final = (
    "{cls} is already registered as a JAX pytree node ({by}), and JAX cannot "
    "register a class twice. Keep a single registration: {fix}"
)

ALREADY_ADAPTED_FIX: Final = (
    "it already unflattens without __init__, so remove the second "
    "@typecheck_guard.register_dataclass (or typecheck_guard.register_dataclass(...) "
    "call)."
)

ALREADY_DATACLASS_FIX: Final = (
    "remove @typecheck_guard.register_dataclass. A flax.struct / "
    "jax.tree_util.register_dataclass class is adapted by calling "
    "typecheck_guard.install() before the class is defined; for one defined earlier, "
    "wrap the jitted function that returns it in typecheck_guard.unflatten_safe(...)."
)

ALREADY_OTHER_FIX: Final = (
    "remove the other decorator (or register_pytree_node call) and keep "
    "@typecheck_guard.register_dataclass."
)

NOT_CALLABLE: Final = (
    "typecheck_guard.unflatten_safe expects a function or a jitted callable, got "
    "{obj!r} of type {type}. Write `with typecheck_guard.unflatten_safe(): ...`, "
    "`@typecheck_guard.unflatten_safe` above a function, or "
    "`typecheck_guard.unflatten_safe(jax.jit(step))`."
)


class Unsupported(RuntimeError):
    """An installed library is outside the supported range, or the private piece of
    it that one part of typecheck_guard relies on has changed. `install()` switches
    that part off (with one `PartsDisabledWarning`) rather than refuse."""


UNSUPPORTED_VERSION: Final = (
    "typecheck_guard supports {package} {supported}, but {package} {found} is "
    "installed. Install a supported version (pip install '{package}{supported}')."
)

PRIVATE_API_CHANGED: Final = (
    "typecheck_guard relies on {what}, which has changed in {package} {found} "
    "(supported: {package} {supported}). Refusing to patch it rather than risk "
    "checking nothing: pin '{package}{supported}', or report this at the "
    "typecheck_guard issue tracker."
)

PARTS_DISABLED: Final = (
    "typecheck_guard.install() switched off what this environment can't support, "
    "and installed the rest:\n{problems}"
)

INSTALL_REFUSED: Final = (
    "typecheck_guard.install() can't support any of its parts in this environment, "
    "so it installed nothing:\n{problems}"
)

PYTREE_CACHE_NOT_BOOL: Final = (
    "typecheck_guard.install expects pytree_cache=True or False, got {value!r}. "
    "Write `typecheck_guard.install(pytree_cache=False)` to leave PyTree[...] checks "
    "uncached."
)

PYTREE_CACHE_UNAVAILABLE: Final = (
    "{reason}\n"
    "The cache of PyTree[...] checks needs these internals; without it every PyTree "
    "check runs, as without typecheck_guard."
)

# The start-up hook (`TYPECHECK_GUARD=install`): one line on stderr each, never an
# exception, since the interpreter is still starting.
BAD_VARIABLE: Final = (
    "typecheck_guard: ignoring TYPECHECK_GUARD={value!r}: the value it takes is "
    "'install' (typecheck_guard.install() in every Python process it reaches); unset "
    "it, or set it to '', to turn that off."
)

STARTUP_FAILED: Final = (
    "typecheck_guard: TYPECHECK_GUARD=install, but install() failed in this process "
    "({error}); it runs without typecheck_guard."
)
