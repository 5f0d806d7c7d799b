"""The code a registered unflatten function is made of: what `install()`'s evidence
("JAX's registry is running this class's unflatten") lets stand between the wrapper
it registers and a constructor hook (`_adapt._codegen`), and what the runtime guard
and the profiler look through to call a node its unflatten builds through a helper
a rebuild (`_guard._situation`)."""

from __future__ import annotations

import functools
import types
from typing import Any, Final

from ._records import CONSTRUCTOR_NAMES

__all__ = ["own_codes"]


def own_codes(fn: Any, cls: type | None = None) -> dict[int, Any]:
    """The code objects of the Python functions the unflatten `fn` of `cls` is made
    of, and of those it names, which its frames may call to build the instance:
    `fn` itself (a function, the function of a bound method or `classmethod`, the
    `__call__` of a callable object), what a `functools.partial` calls and what
    `__wrapped__` names, the functions nested in its code, and the functions its
    code names through its globals, its closure or attributes of `cls`, all the way
    down (at most `_MAX_CODES`).

    A frame running any other code between a constructor hook and our wrapper was
    not called by the unflatten: a signal handler, a finalizer, a `gc` callback, a
    profile or audit hook runs on top of whatever frame it interrupts, and a
    metaclass's `__call__` is a constructor of its own (the unflatten calls the
    class, not it). Their constructions are checked."""
    codes: set[Any] = set()
    seen: set[int] = set()
    todo = [fn]
    while todo and len(codes) < _MAX_CODES:
        f = todo.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        if isinstance(f, functools.partial):
            todo += [f.func, *(a for a in f.args if isinstance(a, _FUNCTIONS))]
            continue
        if isinstance(f, (classmethod, staticmethod)):
            todo.append(f.__func__)
            continue
        f = getattr(f, "__func__", f)
        if isinstance(f, type):
            continue  # a class: calling it runs its constructor hooks
        code = getattr(f, "__code__", None)
        if isinstance(code, types.CodeType):
            _named(f, code, cls, codes, todo)
        elif callable(f) and not isinstance(f, types.BuiltinFunctionType):
            todo.append(vars(type(f)).get("__call__") or type(f).__call__)
        try:
            todo.append(vars(f).get("__wrapped__"))
        except TypeError:  # no `__dict__`
            pass
    # A metaclass's `__call__` is a constructor of its own, even under another name.
    for meta in type(cls).__mro__ if cls is not None else ():
        codes.discard(getattr(vars(meta).get("__call__"), "__code__", None))
    # By identity: a code object's hash is computed from its contents on every call.
    return {id(code): code for code in codes}


# Enough for an unflatten and its helpers; past it, a helper's constructions are
# checked, as without us.
_MAX_CODES: Final = 256


def _named(
    f: Any, code: types.CodeType, cls: type | None, codes: set[Any], todo: list[Any]
) -> None:
    """Add `code` and the codes nested in it; queue what it names."""
    scope = getattr(f, "__globals__", {})
    cells = getattr(f, "__closure__", None) or ()
    nested = [code]
    while nested:
        c = nested.pop()
        if c in codes or c.co_name in CONSTRUCTOR_NAMES:
            continue  # a constructor hook's body builds an object of its own
        codes.add(c)
        nested += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        for name in c.co_names:
            if isinstance(scope, dict) and isinstance(scope.get(name), _FUNCTIONS):
                todo.append(scope[name])
            for klass in getattr(cls, "__mro__", ()):  # all: `super().name(...)`
                if isinstance(vars(klass).get(name), _FUNCTIONS):
                    todo.append(vars(klass)[name])
    for cell in cells:
        try:
            content = cell.cell_contents
        except ValueError:  # empty
            continue
        if isinstance(content, _FUNCTIONS):
            todo.append(content)


_FUNCTIONS: Final = (
    types.FunctionType,
    types.MethodType,
    functools.partial,
    classmethod,
    staticmethod,
)
