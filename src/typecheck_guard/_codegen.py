"""Generating a flatten/unflatten pair per class, the way Equinox does.

We write the functions out as source with the field names hard-coded (no loop over
fields at unflatten time), `exec` them, name each code object after the class
(`<generated_unflatten_Node>`), keep the source on the function as `__source__`
and register it with `linecache`, so that a traceback or a debugger shows the line
that ran. See `equinox/_module/_flatten.py` for the design we follow.
"""

from __future__ import annotations

import linecache
import types
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

__all__ = ["GeneratedFunctions", "Restore", "generate_dataclass_functions"]


class Restore(NamedTuple):
    """How unflatten fills a field that is not flattened (a dropped field, or one
    with `init=False`): with `value`, or with `factory()` when `factory` is set."""

    value: Any = None
    factory: Callable[[], Any] | None = None


class GeneratedFunctions(NamedTuple):
    flatten: Callable[[Any], tuple[tuple[Any, ...], tuple[Any, ...]]]
    flatten_with_keys: Callable[[Any], tuple[tuple[Any, ...], tuple[Any, ...]]]
    unflatten: Callable[[tuple[Any, ...], Iterable[Any]], Any]


def _compile(name: str, cls: type, source: str, namespace: dict[str, Any]):
    filename = f"<generated_{name}_{cls.__qualname__}>"
    # Let tracebacks and pdb show the generated lines.
    lines = source.splitlines(keepends=True)
    linecache.cache[filename] = (len(source), None, lines, filename)
    exec(compile(source, filename, "exec"), namespace)
    fn = namespace[name]
    fn.__source__ = source
    fn.__qualname__ = f"{cls.__qualname__}.<generated {name}>"
    fn.__module__ = cls.__module__
    return fn


def _writes_through_dict(cls: type, names: Sequence[str]) -> bool:
    """Whether `obj.__dict__[name] = value` sets each of `names` on instances of cls.

    False for slotted classes and for names that are data descriptors (properties,
    slots) somewhere in the MRO: those need `object.__setattr__`.
    """
    if not getattr(cls, "__dictoffset__", 0):
        return False
    for name in names:
        for klass in cls.__mro__:
            attr = klass.__dict__.get(name)
            if attr is not None and hasattr(type(attr), "__set__"):
                return False
    return True


def _new_for(cls: type) -> Callable[..., Any]:
    # `object.__new__` skips any custom `__new__` logic, like `__init__`; we only use
    # the class's own `__new__` when object's would be refused (e.g. builtin bases).
    return object.__new__ if cls.__new__ is object.__new__ else cls.__new__


def generate_dataclass_functions(
    cls: type,
    data_fields: Sequence[str],
    meta_fields: Sequence[str],
    restore: dict[str, Restore],
) -> GeneratedFunctions:
    """Write the flatten, flatten-with-keys and unflatten functions for `cls`.

    Flatten returns `(data values, meta values)`, in the order given, exactly like
    JAX's `register_dataclass`: the keypaths are one `GetAttrKey` per data field and
    the meta values form the treedef's auxiliary data, compared with `==`.
    Unflatten creates the instance with `object.__new__` and sets every field
    directly: no `__init__`, no `__post_init__`, no typecheck.
    """
    from jax.tree_util import GetAttrKey

    namespace: dict[str, Any] = {"_cls": cls, "_new": _new_for(cls)}
    getters_data = "".join(f"node.{n}, " for n in data_fields)
    getters_meta = "".join(f"node.{n}, " for n in meta_fields)
    flatten_src = f"def flatten(node):\n    return ({getters_data}), ({getters_meta})\n"
    keyed = []
    for i, name in enumerate(data_fields):
        namespace[f"_key{i}"] = GetAttrKey(name)
        keyed.append(f"(_key{i}, node.{name}), ")
    flatten_with_keys_src = (
        "def flatten_with_keys(node):\n"
        f"    return ({''.join(keyed)}), ({getters_meta})\n"
    )

    all_names = [*data_fields, *meta_fields, *restore]
    lines = ["def unflatten(meta, data):", "    node = _new(_cls)"]
    if _writes_through_dict(cls, all_names):
        lines.append("    d = node.__dict__")

        def assign(targets: Sequence[str], source: str) -> None:
            if targets:
                lhs = ", ".join(f"d[{n!r}]" for n in targets)
                lines.append(f"    {lhs}, = {source}")

        def assign_one(name: str, expr: str) -> None:
            lines.append(f"    d[{name!r}] = {expr}")
    else:
        namespace["_setattr"] = object.__setattr__

        def assign(targets: Sequence[str], source: str) -> None:
            if targets:
                tmp = [f"_v{i}" for i in range(len(targets))]
                lines.append(f"    {', '.join(tmp)}, = {source}")
                for name, var in zip(targets, tmp, strict=True):
                    lines.append(f"    _setattr(node, {name!r}, {var})")

        def assign_one(name: str, expr: str) -> None:
            lines.append(f"    _setattr(node, {name!r}, {expr})")

    assign(data_fields, "data")
    assign(meta_fields, "meta")
    for i, (name, how) in enumerate(restore.items()):
        if how.factory is not None:
            namespace[f"_factory{i}"] = how.factory
            assign_one(name, f"_factory{i}()")
        else:
            namespace[f"_default{i}"] = how.value
            assign_one(name, f"_default{i}")
    lines.append("    return node")
    unflatten_src = "\n".join(lines) + "\n"

    return GeneratedFunctions(
        _compile("flatten", cls, flatten_src, dict(namespace)),
        _compile("flatten_with_keys", cls, flatten_with_keys_src, dict(namespace)),
        _compile("unflatten", cls, unflatten_src, dict(namespace)),
    )


def generate_dict_unflatten(
    cls: type,
) -> Callable[[tuple[str, ...], Iterable[Any]], Any]:
    """Unflatten for classes flattened as their sorted `__dict__` (chex dataclasses):
    the auxiliary data is the tuple of attribute names."""
    source = (
        "def unflatten(keys, values):\n"
        "    node = _new(_cls)\n"
        "    node.__dict__.update(zip(keys, values))\n"
        "    return node\n"
    )
    return _compile("unflatten", cls, source, {"_cls": cls, "_new": _new_for(cls)})


def is_generated(fn: Any) -> bool:
    code = getattr(fn, "__code__", None)
    return isinstance(code, types.CodeType) and code.co_filename.startswith(
        "<generated_"
    )
