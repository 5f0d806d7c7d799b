"""Patching a module right after it is imported, when it was not imported yet.

A meta-path finder in the design of typeguard's `_importhook.py`: for the module
names it watches, it asks the finders after it for the real spec and wraps that
spec's loader so that `on_import(module)` runs right after the module's code. A
post-import patch of a module that is already imported needs no finder: callers
patch `sys.modules[name]` directly. Used by the chex adapter and by the runtime
guard (equinox, flax.nnx).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["after_import"]


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader, on_import: Callable[[Any], None]):
        self._inner = inner
        self._on_import = on_import

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self._inner.create_module(spec)

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        self._inner.exec_module(module)
        self._on_import(module)


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, names: Collection[str], on_import: Callable[[Any], None]):
        self._names = names
        self._on_import = on_import

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname not in self._names:
            return None
        # Ask the finders after us, then wrap the loader they found.
        index = sys.meta_path.index(self) if self in sys.meta_path else -1
        for finder in sys.meta_path[index + 1 :]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, self._on_import)
                return spec
        return None


def _remove(finder: _Finder) -> None:
    if finder in sys.meta_path:
        sys.meta_path.remove(finder)


def after_import(
    names: Collection[str],
    on_import: Callable[[Any], None],
    stack: contextlib.ExitStack,
) -> None:
    """Call `on_import(module)` right after any of `names` is first imported, until
    `stack` closes (the finder's removal is pushed onto it)."""
    finder = _Finder(frozenset(names), on_import)
    sys.meta_path.insert(0, finder)
    stack.callback(_remove, finder)
