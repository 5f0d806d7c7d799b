"""Patching a module right after it is imported, when it was not imported yet.

A meta-path finder in the design of typeguard's `_importhook.py`: for the module
names it watches, it asks the finders after it for the real spec, and makes that
spec's loader call `on_import(module)` right after the module's code ran. A
post-import patch of a module that is already imported needs no finder: callers
patch `sys.modules[name]` directly. Used by the chex adapter and by the runtime
guard (jax, the checkers, equinox, flax.nnx).

The imported module must look as it does without us: its `__loader__` and
`__spec__.loader` are the real loader (a program, or `importlib.util.find_spec`,
may read them: `pkgutil.get_data`, `importlib.resources`). So we don't wrap the
loader in one of ours: we give the real loader object an `exec_module` of its own
for this one import, which puts the loader's own back before the module runs. Only
a loader that can't take an attribute (a class used as its own loader, say) is
wrapped, and its module's `__loader__` and `__spec__.loader` are set back to it
once the module ran.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["after_import"]


class _Loader(importlib.abc.Loader):
    """The fallback: a loader that can't take an attribute, wrapped."""

    def __init__(self, inner: Any, on_import: Callable[[Any], None]):
        self._inner = inner
        self._on_import = on_import

    def create_module(self, spec):  # type: ignore[no-untyped-def]
        return self._inner.create_module(spec)

    def exec_module(self, module):  # type: ignore[no-untyped-def]
        # The module sees its real loader, as it would without us.
        module.__loader__ = self._inner
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self._inner
        self._inner.exec_module(module)
        self._on_import(module)


def _hook(spec: Any, on_import: Callable[[Any], None]) -> None:
    """Make `spec.loader` call `on_import(module)` once `spec.name` has run."""
    loader, name = spec.loader, spec.name
    own = getattr(loader, "__dict__", None)
    if not isinstance(own, dict) or isinstance(loader, type):
        spec.loader = _Loader(loader, on_import)
        return
    had = "exec_module" in own
    previous = own.get("exec_module")
    original = loader.exec_module

    def exec_module(module: Any) -> None:
        # Put back what we replaced first: the module, and the imports it makes
        # through the same loader, see the loader as it was.
        if loader.__dict__.get("exec_module") is exec_module:
            if had:
                loader.exec_module = previous
            else:
                del loader.exec_module
        original(module)
        if getattr(module, "__name__", None) == name:
            on_import(module)

    loader.exec_module = exec_module


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, names: Collection[str], on_import: Callable[[Any], None]):
        self._names = names
        self._on_import = on_import
        # Not handed to `on_import` yet. A finder inserted before us can load one
        # without asking us (pytest's assertion rewriter claims the packages of
        # its plugins, jaxtyping's import hook those it checks): we catch up on
        # such a module at the next import we are asked about.
        self._waiting = set(names)

    def _handle(self, module: Any) -> None:
        name = getattr(module, "__name__", None)
        if name in self._waiting and sys.modules.get(name) is module:
            self._waiting.discard(name)
            self._on_import(module)

    def _catch_up(self) -> None:
        for name in [n for n in self._waiting if n in sys.modules]:
            module = sys.modules[name]
            spec = getattr(module, "__spec__", None)
            if not getattr(spec, "_initializing", False):  # its code has run
                self._handle(module)

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if self._waiting:
            self._catch_up()
        if fullname not in self._names:
            return None
        # Ask the finders after us, then hook the loader they found.
        index = sys.meta_path.index(self) if self in sys.meta_path else -1
        for finder in sys.meta_path[index + 1 :]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find else None
            if spec is not None and spec.loader is not None:
                _hook(spec, self._handle)
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
    `stack` closes (the finder's removal is pushed onto it); once per module. A
    module another finder loaded without asking us is handed over at the next
    import after it."""
    finder = _Finder(frozenset(names), on_import)
    sys.meta_path.insert(0, finder)
    stack.callback(_remove, finder)
