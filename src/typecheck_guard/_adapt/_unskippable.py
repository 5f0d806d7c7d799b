"""Saying so, once, when a class's rebuild runs a check that `install()` can't skip.

A decorator that is not a checker (a logging or counting wrapper) above a class's
checked `__init__` hides the check from the guard: skipping the check would skip the
wrapper too, so `install()` leaves both in place (`_unflatten/_guards.py`). Nothing
in the program's output says so, and its step is just slower: at the class's first
rebuild that runs such a check, we warn, with `UnadaptedClassesWarning`, naming the
wrapper and where it is defined, and the fix. Once per class and wrapper.
"""

from __future__ import annotations

import os
import sys
import warnings
import weakref
from typing import Any

from .._compat._checkers import INSTRUMENTED, peel
from .._errors import (
    UNSKIPPABLE_CHECK,
    UNSKIPPABLE_REBUILD_FIX,
    UnadaptedClassesWarning,
)
from .._unflatten._guards import blocking_layer, original_of

__all__ = ["warn_unskippable"]

# class -> the wrappers we warned about.
_warned: weakref.WeakKeyDictionary[type, set[int]] = weakref.WeakKeyDictionary()

_OURS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")


def warn_unskippable(cls: type, hooks: tuple[str, ...]) -> None:
    """Warn that `cls`'s rebuilds run a check a wrapper keeps in place, if one does
    and we haven't said so for that wrapper. (A check typeguard 4 instruments into
    the function is listed by `unadapted()` and `scan` instead: no wrapper to move.)"""
    found = blocking_layer(cls, hooks)
    if found is None or found[2] is INSTRUMENTED:
        return
    owner, attribute, wrapper = found
    seen = _warned.setdefault(cls, set())
    if id(wrapper) in seen:
        return
    seen.add(id(wrapper))
    code = getattr(wrapper, "__code__", None)
    # The code's name and file: `functools.wraps` gives the wrapper the wrapped
    # function's names and module.
    qualname = getattr(code, "co_qualname", None) or (  # Python 3.11+
        code.co_name
        if code is not None and hasattr(wrapper, "__wrapped__")
        else getattr(wrapper, "__qualname__", type(wrapper).__qualname__)
    )
    where = (
        f"{_relative(code.co_filename)}:{code.co_firstlineno}"
        if code is not None
        else "a place we can't tell"
    )
    checkers = peel(original_of(vars(owner)[attribute])).checkers
    rebuild_fix = ""
    if "tree_unflatten" in dir(cls):
        rebuild_fix = UNSKIPPABLE_REBUILD_FIX.format(name=cls.__name__)
    warnings.warn(
        UNSKIPPABLE_CHECK.format(
            cls=f"{cls.__module__}.{cls.__qualname__}",
            name=cls.__name__,
            method=f"{owner.__name__}.{attribute}",
            wrapper=qualname,
            where=where,
            checker=" with ".join(checkers),
            rebuild_fix=rebuild_fix,
        ),
        UnadaptedClassesWarning,
        stacklevel=_stacklevel(),
    )


def _relative(filename: str) -> str:
    try:
        relative = os.path.relpath(filename)
    except ValueError:  # another drive, on Windows
        return filename
    return filename if relative.startswith("..") else relative


def _stacklevel() -> int:
    """The `stacklevel` of the first frame of the program's own (or a library's)
    below us: not ours, not JAX's, not generated code."""
    jax = sys.modules.get("jax")
    skip = [_OURS]
    for module in (jax, sys.modules.get("jaxlib")):
        path = getattr(module, "__file__", None)
        if path:
            skip.append(os.path.join(os.path.dirname(path), ""))
    frame: Any = sys._getframe(2)  # the caller of `warn_unskippable`
    level = 2  # (`warnings.warn`'s count, from `warn_unskippable`)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (filename.startswith(tuple(skip)) or filename.startswith("<")):
            return level
        frame, level = frame.f_back, level + 1
    return 2
