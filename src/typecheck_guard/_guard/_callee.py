"""What a frame is calling right now, read without running any of the program's code.

`with profile():` watches a program already under way: a jitted function made before
the block is no wrapper of ours, and JAX calls it from C++, which leaves no Python
frame. When such a call rebuilds its output through a checked constructor, the
constructor's caller is the program's own line, `state = step(state)`, exactly as
when the program builds the object itself, `state = State(...)`. What tells the two
apart is what that line calls. The call in flight is the instruction the caller's
frame stopped at; CPython keeps its source span (`co_positions`, 3.11+), and its
callee is an expression: a name, or attribute reads on one (`step`, `self.step`,
`trainer.steps.train`). We read those the way `inspect.getattr_static` does, so
that no property, `__getattr__` or descriptor of the program runs.

We rejected watching every call for jitted callables: a profile function gets no
`c_call` event for a `PjitFunction` (only builtin functions and method descriptors
have them), and `sys.monitoring`'s `CALL` event on all code would cost every call
of the program, where this costs nothing until a check starts.
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import linecache
from types import CodeType, FrameType
from typing import Any, Final

from . import _detect

__all__ = ["callee", "is_jitted", "made_at"]

# What a call site's callee is, by (code, instruction offset): the path of names
# and attributes to read (`("self", "step")`), or `None` for an expression we don't
# read (a call, a subscript, ...). Bounded: a program may make code without end.
# `(id(code), offset) -> (code, path)`: by the code object's identity (a code
# object hashes its whole contents, once per check), holding it so that the id
# stays its own.
_paths: dict[tuple[int, int], tuple[CodeType, tuple[str, ...] | None]] = {}
_MAX_PATHS: Final = 10_000
_UNKNOWN: Final = object()


def _source(code: CodeType, offset: int, frame: FrameType) -> str | None:
    """The source text of the instruction at `offset` of `code`."""
    try:
        positions = list(code.co_positions())[offset // 2]
    except (AttributeError, IndexError):  # Python 3.10: no positions
        return None
    start, end, column, end_column = positions
    if None in positions:
        return None
    lines = linecache.getlines(code.co_filename, frame.f_globals)
    if not lines or end > len(lines):  # pyright: ignore[reportOptionalOperand]
        return None
    # Columns count UTF-8 bytes.
    chunk = [line.encode() for line in lines[start - 1 : end]]  # pyright: ignore
    if len(chunk) == 1:
        return chunk[0][column:end_column].decode(errors="replace")
    chunk[0] = chunk[0][column:]
    chunk[-1] = chunk[-1][:end_column]
    return b"".join(chunk).decode(errors="replace")


def _path(node: ast.expr) -> tuple[str, ...] | None:
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Attribute):
        base = _path(node.value)
        return None if base is None else (*base, node.attr)
    return None


def _callee_path(frame: FrameType) -> tuple[str, ...] | None:
    code, offset = frame.f_code, frame.f_lasti
    key = (id(code), offset)
    known = _paths.get(key)
    if known is not None and known[0] is code:
        return known[1]
    path = None
    text = _source(code, offset, frame)
    if text is not None:
        try:
            tree = ast.parse(text.strip(), mode="eval").body
        except SyntaxError:
            tree = None
        if isinstance(tree, ast.Call):
            path = _path(tree.func)
    if len(_paths) >= _MAX_PATHS:
        _paths.clear()
    _paths[key] = (code, path)
    return path


def callee(frame: FrameType) -> Any:
    """The object the call `frame` is making calls, or `None` when we can't read it
    without running code (or the frame is not at a call)."""
    path = _callee_path(frame)
    if path is None:
        return None
    first, *rest = path
    value = frame.f_locals.get(first, _UNKNOWN)
    if value is _UNKNOWN:
        value = frame.f_globals.get(first, _UNKNOWN)
    if value is _UNKNOWN:
        value = getattr(builtins, first, None)
    for name in rest:
        try:
            value = inspect.getattr_static(value, name)
        except AttributeError:
            return None
    while isinstance(value, functools.partial):
        value = value.func
    return value


def is_jitted(obj: Any) -> bool:
    """Whether `obj` is a function JAX compiled: what `jax.jit` returns (and JAX's
    other C++ jitted callables, which have `lower`)."""
    cls = type(obj)
    return cls.__module__.startswith("jaxlib") and hasattr(cls, "lower")


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
