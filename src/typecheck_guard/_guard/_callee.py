"""What a frame is calling right now, read without running any of the program's code.

`with profile():` watches a program already under way: a jitted function made before
the block is no wrapper of ours, and JAX calls it from C++, which leaves no Python
frame. When such a call rebuilds its output through a checked constructor, the
constructor's caller is the program's own line, `state = step(state)`, exactly as
when the program builds the object itself, `state = State(...)`. What tells the two
apart is what that line calls. The call in flight is the instruction the caller's
frame stopped at; CPython keeps its source span (`co_positions`, 3.11+), and its
callee is an expression: a name, or attribute reads on one (`step`, `self.step`,
`trainer.steps.train`). We read those where Python would find them, without
`inspect.getattr_static` (which may call a program's metaclass), so that no
property, `__getattr__` or descriptor of the program runs (a slot, a
`NamedTuple` field, a `staticmethod` and `obj.__class__` are read; a property is
not).

What the line calls only tells where the call can't have run the program's code
first. A line that calls the class builds it; one that calls a function of its own
didn't (that function's frame would be the caller); but a line that calls C code
(`list(map(step, xs))`, `functools.reduce`), or is not at a call (`for s in
map(step, xs)`), or unpacks an iterator as it calls (`step(*map(State, xs))` builds
each `State` at the instruction that calls `step`) may have done either, and
`with profile():` says `unclear`. JAX's own frames between the check and the
program's line are read the same way: `jax.tree.map(step, xs)` calls `step` from
JAX's code (`_situation.jitted_call_below`).

We rejected watching every call for jitted callables: a profile function gets no
`c_call` event for a `PjitFunction` (only builtin functions and method descriptors
have them), and `sys.monitoring`'s `CALL` event on all code would cost every call
of the program, where this costs nothing until a check starts.
"""

from __future__ import annotations

import ast
import dis
import functools
import inspect
import linecache
import os
import types
from types import CodeType, FrameType
from typing import Any, Final

from . import _detect

__all__ = ["callee", "jitted_call", "made_at", "runs_python"]

# What a call site's callee is, by (code, instruction offset): the path of names
# and attributes to read (`("self", "step")`), or `None` for an expression we don't
# read (a call, a subscript, ...). Bounded: a program may make code without end.
# `(id(code), offset) -> (code, path)`: by the code object's identity (a code
# object hashes its whole contents, once per check), holding it so that the id
# stays its own.
_paths: dict[tuple[int, int], tuple[CodeType, Any]] = {}
_MAX_PATHS: Final = 10_000
_UNKNOWN: Final = object()


def _source(
    code: CodeType, offset: int
) -> tuple[str, tuple[int, int, int, int]] | None:
    """The source text of the instruction at `offset` of `code`, and its span."""
    try:
        positions = list(code.co_positions())[offset // 2]
    except (AttributeError, IndexError):  # Python 3.10: no positions
        return None
    start, end, column, end_column = positions
    if None in positions:
        return None
    # Files only: a module's own loader (`get_source`) is the program's code.
    lines = linecache.getlines(code.co_filename)
    if not lines or end > len(lines):  # pyright: ignore[reportOptionalOperand]
        return None
    # Columns count UTF-8 bytes.
    chunk = [line.encode() for line in lines[start - 1 : end]]  # pyright: ignore
    if len(chunk) == 1:
        text = chunk[0][column:end_column]
    else:
        chunk[0] = chunk[0][column:]
        chunk[-1] = chunk[-1][:end_column]
        text = b"".join(chunk)
    return text.decode(errors="replace"), positions  # pyright: ignore


def _path(node: ast.expr) -> tuple[str, ...] | None:
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Attribute):
        base = _path(node.value)
        return None if base is None else (*base, node.attr)
    return None


# The instructions that call (their names across Python 3.11-3.13, instrumented
# or not). At any other instruction (`LIST_EXTEND` unpacking `f(a, *it)`,
# `FOR_ITER` over `map(step, xs)`) the frame may be running the program's code
# without being in a call we can read.
_CALLS: Final = frozenset(
    name for name in dis.opname if name.startswith(("CALL", "INSTRUMENTED_CALL"))
)
_STAR_CALL: Final = frozenset({"CALL_FUNCTION_EX", "INSTRUMENTED_CALL_FUNCTION_EX"})


_CACHE: Final = dis.opmap.get("CACHE", -1)


def _opname(code: CodeType, offset: int) -> str:
    """The instruction at `offset` (a frame's `f_lasti`): on 3.11+ it may be one of
    the inline cache entries after the instruction (a call into Python code leaves
    it at the call's last), which belong to that instruction."""
    raw = code.co_code
    try:
        while offset > 0 and raw[offset] == _CACHE:
            offset -= 2
        return dis.opname[raw[offset]]
    except IndexError:
        return ""


def _callee_path(
    frame: FrameType,
) -> tuple[tuple[str, ...], tuple[tuple[str, ...] | None, ...], bool] | None:
    """What the call `frame` is making calls (a path of names and attributes), and,
    at an instruction that unpacks `*args` or `**kwargs` as it calls, what each of
    those is (a path, or `None`: an expression we don't read), and whether every
    argument is inert (`_inert`). `None` where we can't tell: the callee is no
    such path, or an argument assigns its name (`f(x, f := g)`), or the source on
    disk is not the code that runs (edited since, or another file's name)."""
    code, offset = frame.f_code, frame.f_lasti
    key = (id(code), offset)
    known = _paths.get(key)
    if known is not None and known[0] is code:
        return known[1]
    found = None
    name = _opname(code, offset)
    source = _source(code, offset) if name in _CALLS else None
    if source is not None:
        text, span = source
        try:
            tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError:
            tree = None
        path = _path(tree.func) if isinstance(tree, ast.Call) else None
        if path is not None and (text[:1].isspace() or _assigns(tree, path[0])):
            path = None
        if path is not None:
            assert isinstance(tree, ast.Call)
            arguments = [*tree.args, *(keyword.value for keyword in tree.keywords)]
            unpacked: tuple[tuple[str, ...] | None, ...] = ()
            if name in _STAR_CALL:
                unpacked = tuple(
                    _path(arg.value)
                    for arg in tree.args
                    if isinstance(arg, ast.Starred)
                ) + tuple(
                    _path(keyword.value)
                    for keyword in tree.keywords
                    if keyword.arg is None
                )
            if _compiled_from(code, path, span):
                found = (path, unpacked, all(map(_inert, arguments)))
    if len(_paths) >= _MAX_PATHS:
        _paths.clear()
    _paths[key] = (code, found)
    return found


def _assigns(call: ast.Call, name: str) -> bool:
    """Whether an argument of `call` assigns `name` (`f(x, f := g)`)."""
    return any(
        isinstance(node, ast.NamedExpr) and node.target.id == name
        for node in ast.walk(call)
    )


def _inert(node: ast.expr) -> bool:
    """Whether evaluating the argument `node` runs none of the program's code: a
    name, a constant, a lambda, or one of those unpacked."""
    if isinstance(node, ast.Starred):
        node = node.value
    return isinstance(node, (ast.Name, ast.Constant, ast.Lambda))


def _compiled_from(
    code: CodeType, path: tuple[str, ...], span: tuple[int, int, int, int]
) -> bool:
    """Whether the call at `span` of `code` loads `path`, as its source says: the
    instruction that loads the callee's first name starts where the call starts,
    and each attribute is loaded inside the call. (A file edited since it was
    imported, or code compiled under another file's name, has source that says
    something else.)"""
    start, end, column, end_column = span
    first, *attributes = path
    names: set[str] = set()
    loaded = False
    for instruction in _instructions(code):
        where = instruction.positions
        if (
            where is None
            or where.lineno is None
            or where.end_lineno is None
            or where.col_offset is None
            or where.end_col_offset is None
            or not instruction.opname.startswith("LOAD")
            or (where.lineno, where.col_offset) < (start, column)
            or (where.end_lineno, where.end_col_offset) > (end, end_column)
        ):
            continue  # not a load inside the call
        value = instruction.argval
        values = value if isinstance(value, tuple) else (value,)
        if where.lineno == start and where.col_offset == column and first in values:
            loaded = True
        if instruction.opname.startswith(("LOAD_ATTR", "LOAD_METHOD")):
            names.add(value)
    return loaded and names.issuperset(attributes)


@functools.lru_cache(maxsize=256)
def _instructions(code: CodeType) -> tuple[dis.Instruction, ...]:
    return tuple(dis.get_instructions(code))


# `object.__class__`, which `obj.__class__(...)` reads (`dataclasses.replace`,
# flax.struct's `replace`): `type(obj)`.
_OBJECT_CLASS: Final = object.__dict__["__class__"]


def _tuplegetter() -> Any:
    import collections

    return type(collections.namedtuple("_T", "a").a)  # noqa: PYI024


# A `NamedTuple` field's descriptor: like a slot's (`types.MemberDescriptorType`),
# its `__get__` is C code that runs none of the program's.
_TUPLEGETTER: Final = _tuplegetter()


_CO_OPTIMIZED: Final = inspect.CO_OPTIMIZED
# What Python itself reads a class's namespace and MRO with.
_CLASS_DICT: Final = type.__dict__["__dict__"]
_CLASS_MRO: Final = type.__dict__["__mro__"]


def _variable(frame: FrameType, name: str) -> Any:
    """The value of the variable `name` in `frame`, read without running the
    program's code; `_UNKNOWN` where it can't be. A class body's names are not
    read (a metaclass's namespace is the program's mapping, and a comprehension in
    it skips them), nor code `exec` runs with locals of their own. (A function's
    local variable is read through `f_locals`, which before Python 3.13 also
    refreshes the dictionary the function's `locals()` returns.)"""
    code = frame.f_code
    globals_ = frame.f_globals
    if type(globals_) is not dict:
        return _UNKNOWN
    local = name in code.co_varnames or name in code.co_cellvars
    local = local or name in code.co_freevars
    if code.co_flags & _CO_OPTIMIZED:
        if local:
            try:
                return frame.f_locals[name]
            except KeyError:
                return _UNKNOWN
    elif local or code.co_name != "<module>":
        # (3.12+ runs a module's comprehensions in its frame, with variables of
        # their own, which are not the module's.)
        return _UNKNOWN
    elif not code.co_nlocals and frame.f_locals is not globals_:
        return _UNKNOWN  # `exec(code, globals, locals)`
    value = dict.get(globals_, name, _UNKNOWN)
    if value is _UNKNOWN:
        builtins_ = frame.f_builtins
        if type(builtins_) is not dict:
            return _UNKNOWN
        value = dict.get(builtins_, name, _UNKNOWN)
    return value


def _in_class(cls: type, name: str) -> Any:
    """`name` in the namespace of `cls` or of a class of its MRO, as Python finds
    it; `_UNKNOWN` if none has it."""
    for entry in _CLASS_MRO.__get__(cls):
        namespace = _CLASS_DICT.__get__(entry)
        if name in namespace:
            return namespace[name]
    return _UNKNOWN


def _attribute(value: Any, name: str) -> tuple[Any, bool]:
    """`value.name` as Python finds it, before any descriptor's `__get__` (what
    `inspect.getattr_static` answers, without calling a program's metaclass as it
    may: `__getattribute__`, or `__hash__` and `__eq__` on 3.12+). Every read is
    of a class's namespace, by `type`'s own descriptors. `_UNKNOWN` where the
    program may have a say (a `__getattribute__` of its own, or its metaclass's
    for an attribute of a class, a `__dict__` of its own) or the attribute isn't
    found without `__getattr__`. And whether it was found in a class's
    namespace, where a descriptor's `__get__` applies to it (not in a module's or
    an instance's own)."""
    cls = type(value)
    if cls is types.ModuleType:
        namespace = object.__getattribute__(value, "__dict__")
        return dict.get(namespace, name, _UNKNOWN), False
    if not _plain_getattribute(_in_class(cls, "__getattribute__")):
        return _UNKNOWN, False
    if issubclass(cls, type):  # a class: its namespace, then its metaclass's
        if _in_class(cls, "__getattribute__") is not _TYPE_GETATTRIBUTE:
            return _UNKNOWN, False
        meta = _in_class(cls, name)
        if meta is not _UNKNOWN and _is_data_descriptor(meta):
            return _UNKNOWN, False
        found = _in_class(value, name)
        return (found, True) if found is not _UNKNOWN else (meta, True)
    found = _in_class(cls, name)
    if found is not _UNKNOWN and _is_data_descriptor(found):
        return found, True  # before the instance's namespace
    slot = _in_class(cls, "__dict__")
    if slot is not _UNKNOWN:
        if type(slot) is not types.GetSetDescriptorType or slot.__name__ != "__dict__":
            return _UNKNOWN, False
        namespace = slot.__get__(value, cls)
        own = dict.get(namespace, name, _UNKNOWN)
        if own is not _UNKNOWN:
            return own, False  # an instance's own: no descriptor applies
    return found, True


_TYPE_GETATTRIBUTE: Final = type.__dict__["__getattribute__"]


def _plain_getattribute(method: Any) -> bool:
    """Whether the `__getattribute__` `method` finds attributes as Python's own
    does: a C type's (`object`'s, `tuple`'s, ...), or Equinox's `Module`'s (which
    looks up as `object` does, then wraps a bound method of the module's own);
    not a program's."""
    if type(method) is types.WrapperDescriptorType:
        return True
    return (
        type(method) is types.FunctionType
        and method.__module__.startswith("equinox._module")
        and method.__qualname__ == "Module.__getattribute__"
    )


def _is_data_descriptor(obj: Any) -> bool:
    kind = type(obj)
    return (
        _in_class(kind, "__set__") is not _UNKNOWN
        or _in_class(kind, "__delete__") is not _UNKNOWN
    )


def _read(frame: FrameType, path: tuple[str, ...]) -> Any:
    """The value of `path` in `frame`, read without running the program's code;
    `_UNKNOWN` where it can't be."""
    first, *rest = path
    value = _variable(frame, first)
    if value is _UNKNOWN:
        return _UNKNOWN
    for name in rest:
        found, in_class = _attribute(value, name)
        if found is _UNKNOWN:
            return _UNKNOWN
        if not in_class:
            pass
        elif found is _OBJECT_CLASS:
            found = type(value)
        elif _is(found, staticmethod):
            found = found.__func__
        elif _is(found, (_TUPLEGETTER, types.MemberDescriptorType)):
            if _is(value, type):
                return _UNKNOWN
            try:
                found = found.__get__(value, type(value))
            except (AttributeError, TypeError, IndexError):
                return _UNKNOWN
        elif _is(found, (property, classmethod)) or (
            not _is(found, (types.FunctionType, type)) and _python_get(found)
        ):
            # Reading it runs code (a property, a descriptor of the program's).
            return _UNKNOWN
        value = found
    return value


def _is(obj: Any, types_: Any) -> bool:
    """`isinstance`, by the object's type alone: `isinstance` falls back to reading
    `obj.__class__`, which a program's property may answer."""
    return issubclass(type(obj), types_)


def _python_get(obj: Any) -> bool:
    """Whether `obj` may be a descriptor whose `__get__` is Python code."""
    return _is(_in_class(type(obj), "__get__"), types.FunctionType)


def callee(frame: FrameType) -> Any:
    """The object the call `frame` is making calls, or `None` when we can't read it
    without running code, or the frame is not at a call, or the call may still be
    running the program's code to unpack its arguments (`f(*gen)`, `f(**mapping)`
    of anything but a tuple, list or dict: `step(*map(State, xs))` builds each
    `State` at the instruction that calls `step`), or its arguments may have
    changed what it called."""
    found = _callee_path(frame)
    if found is None:
        return None
    path, unpacked, inert = found
    for star in unpacked:
        if star is None or type(_read(frame, star)) not in (tuple, list, dict):
            return None
    if len(path) > 1 and not inert:
        # An argument runs code before the call, after the callee was read: it
        # may have rebound the attribute we read now (`r.fn(s, r.lr())`, `lr`
        # setting `r.fn`). A module's functions we take as they stand.
        base = _variable(frame, path[0])
        if type(base) is not types.ModuleType:
            return None
    value = _read(frame, path)
    if value is _UNKNOWN:
        return None
    while type(value) is functools.partial:
        value = value.func
    return value


def runs_python(obj: Any) -> bool:
    """Whether calling `obj` runs Python code of its own first (a function, a method,
    an object whose `__call__` is one), so that what it builds has its frame as the
    caller: a check whose caller is the frame calling `obj` was not made by it.
    A class, a builtin and other C callables (`list`, `map`, `functools.reduce`,
    a tree definition's `unflatten`) may call back into any Python."""
    if _is(obj, (types.FunctionType, types.MethodType)):
        return _is(getattr(obj, "__func__", obj), types.FunctionType)
    if _is(obj, type):
        return False
    return _is(_in_class(type(obj), "__call__"), types.FunctionType)


def jitted_call(obj: Any) -> tuple[str, Any] | None:
    """`(factory, the user's function)` where `obj` is a jitted callable made
    without our factory patches: what `jax.jit`, `jax.pmap`, `equinox.filter_jit`
    and `flax.nnx.jit` return, named as the command line names it, or an
    ahead-of-time compiled call (`jax.stages.Compiled`, no function); else
    `None`."""
    cls = type(obj)
    module = getattr(cls, "__module__", "")  # (jaxlib 0.4's `PmapFunction` has none)
    try:
        if module == "jax._src.stages" and cls.__name__ == "Compiled":
            # `jax.jit(f).lower(...).compile()`: it keeps no trace of `f`.
            return "jax.stages.Compiled", None
        if cls in _detect.jitted_types:
            return obj._typecheck_guard_transform, obj._typecheck_guard_fun
        if module.startswith("jaxlib") and hasattr(cls, "lower"):
            # (JAX's, Equinox's and Flax's own attributes, read as they are.)
            # `_fun`: the function `jax.jit` was given, whatever `__wrapped__` a
            # decorator wrote over it since (`functools.update_wrapper`).
            fun = getattr(obj, "_fun", None)
            return "jax.jit", fun if fun is not None else getattr(
                obj, "__wrapped__", obj
            )
        if _detect.is_filter_jit_wrapper(obj):
            # What Equinox's own `__wrapped__` property gives: the function, put
            # back together from its dynamic and static parts (without running
            # Equinox's code, which jaxtyping's import hook may check).
            return "equinox.filter_jit", _detect.filter_jit_function(obj)
        if module.startswith("flax.nnx") and cls.__name__ == "JitWrapped":
            return "flax.nnx.jit", obj.__wrapped__
        if _is(obj, types.FunctionType):
            code = obj.__code__
            if code.co_name == "wrapped" and code.co_filename.endswith(
                os.path.join("jax", "_src", "pmap.py")
            ):
                return "jax.pmap", obj.__dict__.get("__wrapped__", obj)
    except Exception:  # a name is no place to fail
        return None
    return None


def made_at(fun: Any) -> str | None:
    """`path:line` where the jitted function of `fun` was most likely made, for a
    jitted function we did not see made: `fun`'s first line, when it jits
    (`@jax.jit` above it, or `step = jax.jit(lambda ...)`); else `None`."""
    code = getattr(fun, "__code__", None)
    if code is None:
        return None
    line = linecache.getline(code.co_filename, code.co_firstlineno)
    if "jit" not in line:
        return None
    return f"{_detect.relative(code.co_filename)}:{code.co_firstlineno}"
