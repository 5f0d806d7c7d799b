"""Generating a flatten/unflatten pair per class, the way Equinox does.

We write the functions out as source with the field names hard-coded (no loop over
fields at unflatten time), `exec` them, name each code object after the class
(`<generated_unflatten_Node>`), keep the source on the function as `__source__`
and register it with `linecache`, so that a traceback or a debugger shows the line
that ran. See `equinox/_module/_flatten.py` for the design we follow.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import keyword
import linecache
import sys
import types
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from .._unflatten._own import own_codes

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
    """`object.__new__` and the fields written directly: no `__init__`."""
    marked_unflatten: Callable[[tuple[Any, ...], Iterable[Any]], Any]
    """`cls(**fields)` with JAX's mark set: `__init__` runs, its check does not."""
    plain_unflatten: Callable[[tuple[Any, ...], Iterable[Any]], Any]
    """`cls(**fields)`, as JAX's own unflatten: what `typecheck_guard.check` runs."""


# Two classes can share a qualname (classes made in a loop, or by a factory
# function): a number keeps their linecache entries apart.
_counter = itertools.count()


def _compile(name: str, cls: type, source: str, namespace: dict[str, Any]):
    filename = f"<generated_{name}_{cls.__qualname__}_{next(_counter)}>"
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


def _plain(name: str) -> bool:
    """Whether `node.<name>` in source reads the attribute literally named `name`.

    Not for keywords, and not for names Python would NFKC-normalise (`node.ﬁ` reads
    `fi`)."""
    return (
        name.isidentifier()
        and not keyword.iskeyword(name)
        and unicodedata.normalize("NFKC", name) == name
    )


def _new_for(cls: type) -> Callable[..., Any]:
    # `object.__new__` skips any custom `__new__` logic, like `__init__`; we only use
    # the class's own `__new__` when object's would be refused (e.g. builtin bases).
    return object.__new__ if cls.__new__ is object.__new__ else cls.__new__


def generate_dataclass_functions(
    cls: type,
    data_fields: Sequence[str],
    meta_fields: Sequence[str],
    restore: dict[str, Restore],
    order: Sequence[str] | None = None,
) -> GeneratedFunctions:
    """Write the flatten, flatten-with-keys and unflatten functions for `cls`.

    Flatten returns `(data values, meta values)`, in the order given, exactly like
    JAX's `register_dataclass`: the keypaths are one `GetAttrKey` per data field and
    the meta values form the treedef's auxiliary data, compared with `==`.
    Unflatten creates the instance with `object.__new__` and sets every field
    directly, in `order` (the dataclass field order): no `__init__`, no
    `__post_init__`, no typecheck.
    """
    from jax.tree_util import GetAttrKey

    namespace: dict[str, Any] = {
        "_cls": cls,
        "_new": _new_for(cls),
        "_getattr": getattr,
        "_setattr": object.__setattr__,
    }
    constants: dict[str, str] = {}

    def constant(name: str) -> str:
        # A field name that is not a plain identifier (JAX accepts "a-b", "class",
        # "x.real") is never pasted into the source: we refer to it by a constant.
        if name not in constants:
            constants[name] = f"_name{len(constants)}"
            namespace[constants[name]] = name
        return constants[name]

    def get(name: str) -> str:
        return f"node.{name}" if _plain(name) else f"_getattr(node, {constant(name)})"

    getters_data = "".join(f"{get(n)}, " for n in data_fields)
    getters_meta = "".join(f"{get(n)}, " for n in meta_fields)
    # Children as a list, as JAX's own dataclass node gives them
    # (`jax.tree_util.flatten_one_level`), aux data as a tuple of the meta values.
    flatten_src = f"def flatten(node):\n    return [{getters_data}], ({getters_meta})\n"
    keyed = []
    for i, name in enumerate(data_fields):
        namespace[f"_key{i}"] = GetAttrKey(name)
        keyed.append(f"(_key{i}, {get(name)}), ")
    flatten_with_keys_src = (
        "def flatten_with_keys(node):\n"
        f"    return [{''.join(keyed)}], ({getters_meta})\n"
    )

    # Each field's value, as an expression over the unflatten's locals.
    values: dict[str, str] = {}
    unpack = []
    for names, source, prefix in (
        (data_fields, "data", "_d"),
        (meta_fields, "meta", "_m"),
    ):
        if names:
            tmp = [f"{prefix}{i}" for i in range(len(names))]
            unpack.append(f"    {', '.join(tmp)}, = {source}")
            values.update(zip(names, tmp, strict=True))
    # What JAX's own unflatten does: `cls(**fields)`, meta fields then data fields
    # by name, in that order (an `__init__(**kwargs)` sees it, and so `vars()`).
    passed = [*meta_fields, *data_fields]
    plain_args = [f"{n}={values[n]}" for n in passed if _plain(n)]
    odd = [f"{constant(n)}: {values[n]}" for n in passed if not _plain(n)]
    if odd:
        plain_args.append("**{" + ", ".join(odd) + "}")
    call = f"_cls({', '.join(plain_args)})"
    for i, (name, how) in enumerate(restore.items()):
        if how.factory is not None:
            namespace[f"_factory{i}"] = how.factory
            values[name] = f"_factory{i}()"
        else:
            namespace[f"_default{i}"] = how.value
            values[name] = f"_default{i}"
    # The order the dataclass-generated `__init__` writes them in: it shows in
    # `vars()` (and so in pickles and reprs of `__dict__`).
    ordered = [n for n in (order or ()) if n in values]
    ordered += [n for n in values if n not in ordered]
    # Judged when `__init__` is what it was when we judged the class; `_slow` judges
    # it again (at the first unflatten, or once a decorator replaced `__init__`).
    lines = [
        "def unflatten(meta, data):",
        "    if _cls.__init__ is not _init:",
        "        return _slow(meta, data)",
        *unpack,
        "    node = _new(_cls)",
    ]
    through_dict = _writes_through_dict(cls, ordered)
    if through_dict and ordered:
        lines.append("    d = node.__dict__")
    for name in ordered:
        target = name if _plain(name) else None
        key = repr(name) if target is not None else constant(name)
        if through_dict:
            lines.append(f"    d[{key}] = {values[name]}")
        else:
            lines.append(f"    _setattr(node, {key}, {values[name]})")
    lines.append("    return node")
    unflatten_src = "\n".join(lines) + "\n"
    plain_src = (
        "\n".join(["def plain_unflatten(meta, data):", *unpack, f"    return {call}"])
        + "\n"
    )
    # JAX's own `cls(**fields)`, from a frame of ours: the guards of `cls` skip the
    # check of exactly the construction made here (`_unflatten/_guards.py`, row 1).
    marked_src = (
        "\n".join(
            [
                "def marked_unflatten(meta, data):",
                "    if _cls.__init__ is not _init:",
                "        _prepare()",
                *unpack,
                f"    return {call}",
            ]
        )
        + "\n"
    )
    namespace.update(_init=_UNSEEN, _slow=None, _prepare=None, _where=None)
    marked = _compile("marked_unflatten", cls, marked_src, dict(namespace))
    # It calls `cls(**fields)` itself: the hook's caller.
    marked.__globals__["_where"] = _where(marked, 1, {}, None, None)
    return GeneratedFunctions(
        _compile("flatten", cls, flatten_src, dict(namespace)),
        _compile("flatten_with_keys", cls, flatten_with_keys_src, dict(namespace)),
        _compile("unflatten", cls, unflatten_src, dict(namespace)),
        marked,
        _compile("plain_unflatten", cls, plain_src, dict(namespace)),
    )


class _Unseen:
    """What no `__init__` is: a class is judged at its first unflatten."""

    def __repr__(self) -> str:
        return "<not judged yet>"


_UNSEEN = _Unseen()


def generate_marked_unflatten(
    cls: type, fn: Callable[[Any, Any], Any], prepare: Callable[[], None]
) -> Callable[[Any, Any], Any]:
    """The unflatten `install()` registers for `cls` in place of its own `fn`: the
    same call, made from a frame of ours, which `cls`'s guards look for: they skip
    the check of exactly the constructions `fn`'s own code makes
    (`_unflatten/_guards.py`, row 1). `prepare()` runs at the first unflatten, and
    again whenever `cls.__init__` was replaced since.

    A checked `fn` (jaxtyping's import hook decorates every function of a package, a
    node's own `tree_unflatten` included) is called without its check, as the
    constructor is: JAX's registry calling it is the unflatten (`without_check`)."""
    call, checked_call, memo = without_check(fn)
    call, fn_token = _own_copy(call)
    lines = [
        "def unflatten(aux, children):",
        "    if _cls.__init__ is not _init:",
        "        _prepare()",
    ]
    if memo is not None:
        lines += [
            "    if _memo():",
            "        return _checked(aux, children)",
        ]
    lines.append("    return _fn(aux, children)")
    namespace = {
        "_cls": cls,
        "_fn": call,
        "_checked": checked_call,
        "_memo": memo,
        "_init": _UNSEEN,
        "_prepare": prepare,
        "_where": None,
    }
    source = "\n".join(lines) + "\n"
    out = _compile("unflatten", cls, source, namespace)
    # A class (or other callable that is no Python function) called here calls the
    # hook from this frame; a function calls it from its own, just below this one.
    inner = call
    while isinstance(inner, functools.partial):
        inner = inner.func
    inner = getattr(inner, "__func__", inner)
    namespace["_where"] = _where(
        out,
        1 if isinstance(inner, type) else 2,
        own_codes(call, cls),
        _calling_at(source, call),
        fn_token,
    )
    out.__wrapped__ = fn
    out.__typecheck_guard_plain__ = fn
    return out


def _own_copy(call: Any) -> tuple[Any, str | None]:
    """`call` as a function object of our own when it is a Python function (or a
    method of one): the same code, globals, closure, defaults and attributes, only
    its `__module__` a string object of its own, which Python 3.12+ reads off its
    frame without making a frame object (`sys._getframemodulename`). Only our
    wrapper holds it, so a frame running it was called by our wrapper: the fast case
    of row 1 there. The wrapper's `__wrapped__` is still the registered function,
    and the copy runs the very same code, so nothing the user sees changes.
    `(call, None)` on Python 3.11 and for any other callable."""
    fn = _python_function(call)
    if fn is None or sys.version_info < (3, 12):
        return call, None
    copy = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__doc__ = fn.__doc__
    copy.__annotations__ = fn.__annotations__
    copy.__type_params__ = fn.__type_params__  # type: ignore[attr-defined]
    copy.__dict__.update(fn.__dict__)
    token = "".join([str(fn.__module__), ":", fn.__qualname__])
    copy.__module__ = token
    if fn is not call:  # a bound method: bound to the same object
        return types.MethodType(copy, call.__self__), token
    return copy, token


def _python_function(call: Any) -> types.FunctionType | None:
    """The Python function `call` runs when it is one, or a method of one (Python
    enters its frame straight from the caller's), else `None`."""
    fn = getattr(call, "__func__", call)
    if not isinstance(fn, types.FunctionType) or isinstance(call, functools.partial):
        return None
    return fn


def _calling_at(source: str, call: Any) -> int | None:
    """The `f_lasti` of the wrapper compiled from `source` while it calls `call`,
    when `call` is a Python function (or a method of one): then Python enters its
    frame from that instruction with no code of anyone's in between, and a frame
    right above the wrapper's with that `f_lasti` is `call`'s own (the fast case of
    row 1, one frame object instead of two). `None` for any other callable (a
    `functools.partial`, an object with `__call__`), which runs C code that may run
    Python (a `gc` callback, a profile function) on top of the wrapper's frame.
    Measured once per wrapper shape on this Python, with a probe in place of
    `call`: the same source compiles to the same code."""
    if _python_function(call) is None:
        return None
    return _lasti_while_calling(source)


@functools.cache
def _lasti_while_calling(source: str) -> int:
    """What `_calling_at` measures, once per wrapper source (one per shape)."""
    probe_ns: dict[str, Any] = {}

    class _Probe:
        pass

    probe_ns.update(
        _cls=_Probe,
        _init=_Probe.__init__,
        _memo=lambda: False,
        _fn=lambda aux, children: sys._getframe(1).f_lasti,
    )
    exec(compile(source, "<probe>", "exec"), probe_ns)
    return probe_ns["unflatten"](None, None)


def _where(
    wrapper: Any,
    depth: int,
    codes: dict[int, Any],
    at: int | None,
    fn_token: str | None,
) -> tuple[Any, int, str, dict[int, Any], int | None, str | None]:
    """Where the guards find `wrapper`'s frame above a hook (`_unflatten/_guards.py`,
    row 1): its code, the depth, a `__module__` that is a string object of its own,
    which Python 3.12+ reads off a frame without making a frame object
    (`sys._getframemodulename`), and `codes`, those of the registered unflatten's
    own functions by `id`, the only frames allowed between the hook and `wrapper`,
    `at` (`_calling_at`) and `fn_token` (`_own_copy`). (Equal strings are not the
    same object: a function of the user's with an equal `__module__` is not taken
    for ours.)"""
    token = "".join([wrapper.__module__, ":", wrapper.__qualname__])
    wrapper.__module__ = token
    return (wrapper.__code__, depth, token, codes, at, fn_token)


def without_check(fn: Any) -> tuple[Any, Any, Any]:
    """`(fn without its check, fn, memo probe)`: the registered function below its
    checker layers (jaxtyping, beartype, typeguard 2), keeping its binding (a bound
    method, a `functools.partial`); `fn` itself where it has no check we can peel.

    The memo probe is `None` where the check is jaxtyping's (it pushes its own shape
    memo), else a function telling whether an enclosing `@jaxtyped` memo is active,
    while which the check runs (it binds dimensions there, as without us)."""
    from .._compat._checkers import peel

    if isinstance(fn, functools.partial):
        inner, _, memo = without_check(fn.func)
        if inner is fn.func:
            return fn, fn, None
        return functools.partial(inner, *fn.args, **fn.keywords), fn, memo
    if isinstance(fn, types.MethodType):
        inner, _, memo = without_check(fn.__func__)
        if inner is fn.__func__:
            return fn, fn, None
        return types.MethodType(inner, fn.__self__), fn, memo
    layers = peel(fn)
    if not layers.checkers or layers.unchecked is None:
        return fn, fn, None
    if layers.checkers[0] == "jaxtyping":
        return layers.unchecked, fn, None
    try:
        from jaxtyping._storage import _has_shape_memo
    except ImportError:  # not the jaxtyping we know: keep the check
        return fn, fn, None
    return layers.unchecked, fn, _has_shape_memo


def generate_unchecked_flatten(cls: type, flatten: Any) -> Any:
    """What `install()` registers in place of `cls`'s own flatten (or flatten with
    keys) when that function is checked: the same function without its check, as
    `generate_marked_unflatten` does for the unflatten. `None` when there is nothing
    to take off (the usual case: an unchecked flatten is registered as it is).

    `register_pytree_node_class` registers `operator.methodcaller("tree_flatten")`,
    which looks the method up on each call: so do we, and a method replaced since is
    called as JAX would call it."""
    import operator

    name = None
    if isinstance(flatten, operator.methodcaller):
        try:
            _, (name, *rest) = flatten.__reduce__()[:2]
        except (TypeError, ValueError):
            return None
        if rest or not isinstance(name, str) or not _plain(name):
            return None
        target = inspect.getattr_static(cls, name, None)
        if not isinstance(target, types.FunctionType):
            return None
    else:
        target = flatten
    call, checked, memo = without_check(target)
    if call is target:
        return None
    if name is None:
        source = (
            "def flatten(node):\n"
            "    if _memo is not None and _memo():\n"
            "        return _checked(node)\n"
            "    return _fn(node)\n"
        )
    else:
        source = (
            "def flatten(node):\n"
            f"    if _cls.{name} is not _checked or (_memo is not None and _memo()):\n"
            f"        return node.{name}()\n"
            "    return _fn(node)\n"
        )
    namespace = {"_cls": cls, "_fn": call, "_checked": checked, "_memo": memo}
    out = _compile("flatten", cls, source, namespace)
    out.__wrapped__ = flatten
    return out


def generate_dict_unflatten(
    cls: type,
) -> Callable[[tuple[str, ...], Iterable[Any]], Any]:
    """Unflatten for classes flattened as their sorted `__dict__` (chex dataclasses):
    the auxiliary data is the tuple of attribute names.

    What chex's own `_dataclass_unflatten` does, less the call of `__post_init__`:
    `cls.__new__(cls)`, then every attribute that is a dataclass field (looked up at
    unflatten time, as chex does), in field order, with `object.__setattr__`.
    """
    source = (
        "def unflatten(keys, values):\n"
        # Judged while `__post_init__` is the one we judged (`_slow` judges again).
        "    if getattr(_cls, '__post_init__', None) is not _post:\n"
        "        return _slow(keys, values)\n"
        "    node = _cls.__new__(_cls)\n"
        "    attributes = dict(zip(keys, values))\n"
        "    for name in _cls.__dataclass_fields__:\n"
        "        if name in attributes:\n"
        "            _setattr(node, name, attributes[name])\n"
        "    return node\n"
    )
    namespace = {
        "_cls": cls,
        "_setattr": object.__setattr__,
        "_post": _UNSEEN,
        "_slow": None,
    }
    return _compile("unflatten", cls, source, namespace)


def is_generated(fn: Any) -> bool:
    code = getattr(fn, "__code__", None)
    return isinstance(code, types.CodeType) and code.co_filename.startswith(
        "<generated_"
    )
