"""Running code once a module is imported: at once if it is already, otherwise right
after its code has run, before the `import` statement that loaded it returns.

This is how every patch of another library waits for that library: `install()` must
import nothing heavy, so that a program can still configure JAX and jaxtyping
through the environment after calling it (`JAX_ENABLE_X64`, `JAX_PLATFORMS`,
`JAXTYPING_DISABLE` are read when those libraries are imported), and the runtime
guard does the same for Equinox and Flax NNX.

- `after_import(names, on_import, stack)`: `on_import(module)` once for each module
  of `names`.
- `after_all_imported(names, call, stack)`: `call()` once every module of `names` is
  imported (a package and the submodule we patch, say, when either may come last).
- `imported(name)`: the module if its code has run to the end, else `None`.

Both registrations are undone when `stack` closes: a call still waiting is dropped.
A call that comes later runs in the thread that imports the module, with the import
lock of that module held: it must not wait for anything that thread may hold.

A module still to come is watched by one meta-path finder (the design of typeguard's
`_importhook.py`), which is on `sys.meta_path` only while something waits, and first
there. Being first changes nothing for the finders after it or for the module: for
a name that nothing waits for, it answers `None` at once, as if it were not there;
for a watched name, it asks the finders after it in order, as importlib would, and
returns the spec the first one finds, the very object: the same finder finds it, the
same loader loads it, and the module's `__spec__` and `__loader__` are theirs. Only
for that one execution, the loader's `exec_module` is shadowed by an instance
attribute of ours, which is gone before the module's code runs.

Rejected: wrapping the loader (as typeguard does) or the spec. The module would keep
our wrapper as its `__loader__` and `__spec__.loader`, visible to whoever inspects
it (`importlib.resources`, pkgutil, a debugger). Also rejected: placing the finder
after the others (the finder that finds a module is the one that loads it, so it
would see nothing) or just before `PathFinder` (a finder ahead of it that loads
JAX itself, as a frozen application's does, would bypass it).

What the finder can't see: a module that a finder inserted ahead of it later loads
(an import hook asked to instrument `chex`, say), and a module that another thread
was importing before the watch began. For the second, the caller can wait with
`settle()` once it holds no lock.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["after_all_imported", "after_import", "imported", "settle"]


class _Watch:
    __slots__ = ("names", "call")

    def __init__(self, names: frozenset[str], call: Callable[[], None]):
        self.names = names
        self.call = call


_lock = threading.RLock()
# Module name -> the watches waiting for it (a watch of several names is in each list).
_waiting: dict[str, list[_Watch]] = {}
# Module name -> (module, thread): its code has run in that thread, through our
# finder, and importlib has not yet marked it done (`__spec__._initializing`).
_ran: dict[str, tuple[Any, int]] = {}


def imported(name: str) -> Any:
    """The module `name` if it is imported, its code run to the end; else `None`
    (not imported, or still being executed)."""
    module = sys.modules.get(name)
    if module is None:
        return None
    ran = _ran.get(name)
    if ran is not None and ran[0] is module and ran[1] == threading.get_ident():
        return module
    if getattr(getattr(module, "__spec__", None), "_initializing", False):
        return None
    return module


def after_all_imported(
    names: Collection[str], call: Callable[[], None], stack: contextlib.ExitStack
) -> None:
    """Call `call()` once every module of `names` is imported: at once, in this
    thread, if they all are (then its exception propagates to the caller), else
    right after the last of them is executed. Until `stack` closes."""
    watch = _Watch(frozenset(names), call)
    with _lock:
        # Waiting for the modules still to come: the last of them starts it.
        missing = [name for name in watch.names if imported(name) is None]
        for name in missing:
            _waiting.setdefault(name, []).append(watch)
        if missing and _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)
    if not missing:
        call()
        return
    stack.callback(_forget, watch)


def after_import(
    names: Collection[str],
    on_import: Callable[[Any], None],
    stack: contextlib.ExitStack,
) -> None:
    """Call `on_import(module)` once for each module of `names`: at once for one that
    is imported, else right after it is executed. Until `stack` closes."""
    for name in names:
        after_all_imported(
            (name,), lambda name=name: on_import(sys.modules[name]), stack
        )


def settle() -> None:
    """Wait for the watched modules that other threads are importing right now, then
    run what waits for them. Call it holding no lock: the importing thread may run
    what waits, which may take it."""
    import importlib

    for name in list(_waiting):
        module = sys.modules.get(name)
        if module is not None and imported(name) is None:
            with contextlib.suppress(Exception):  # its importer reports its error
                importlib.import_module(name)  # returns once the other thread is done
    _run_due()


def _forget(watch: _Watch) -> None:
    with _lock:
        for name in watch.names:
            waiting = _waiting.get(name)
            if waiting is not None and watch in waiting:
                waiting.remove(watch)
                if not waiting:
                    del _waiting[name]
        if not _waiting and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)


def _run_due() -> None:
    """Run every waiting call whose modules are all imported now, each once."""
    with _lock:
        due: list[_Watch] = []
        for name in [name for name in _waiting if imported(name) is not None]:
            for watch in _waiting.get(name, ()):
                if watch not in due and all(
                    imported(n) is not None for n in watch.names
                ):
                    due.append(watch)
        for watch in due:
            _forget(watch)
    # Outside our lock: a call takes its own (install()'s), and another thread that
    # holds that one may be registering a watch.
    error: BaseException | None = None
    for watch in due:
        try:
            watch.call()
        except BaseException as e:  # the others still run; the first one is raised
            error = error or e
    if error is not None:
        raise error


class _PostImportHook:
    """typecheck_guard's finder: on `sys.meta_path` while a patch waits for a module
    (see `typecheck_guard/_compat/_importhook.py`)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _waiting:
            return None
        try:
            after = sys.meta_path[sys.meta_path.index(self) + 1 :]
        except ValueError:
            return None
        for finder in after:
            find = getattr(finder, "find_spec", None)
            if find is None:
                # A finder with only the legacy `find_module` (3.10, 3.11): importlib
                # asks it its own way after us, so we leave this import to it.
                return None
            spec = find(fullname, path, target)
            if spec is not None:
                _shadow(spec)
                return spec
        return None

    def __repr__(self) -> str:
        coming = sorted(name for name in list(_waiting) if imported(name) is None)
        return f"<typecheck_guard post-import hook, waiting for {', '.join(coming) or 'nothing'}>"


_FINDER = _PostImportHook()


def _shadow(spec: Any) -> None:
    """Run what waits for `spec.name` right after the loader executes the module."""
    loader = spec.loader
    if (
        loader is None
        or isinstance(loader, type)  # a class as loader (builtin, frozen): shared
        or not hasattr(loader, "__dict__")
        or "exec_module" in vars(loader)  # shadowed already, by us or someone else
        or not callable(getattr(loader, "exec_module", None))
    ):
        return
    original = loader.exec_module

    def exec_module(module: Any) -> None:
        if module.__spec__ is spec:
            # Gone before the module's code runs. (A loader object that serves other
            # modules too, a zipimporter, runs theirs through us until then.)
            with contextlib.suppress(AttributeError):
                del loader.exec_module
        original(module)
        name = module.__name__
        if name not in _waiting:
            return
        _ran[name] = (module, threading.get_ident())
        try:
            _run_due()
        finally:
            _ran.pop(name, None)

    exec_module.__typecheck_guard_original__ = original  # type: ignore[attr-defined]
    try:
        loader.exec_module = exec_module
    except (AttributeError, TypeError):  # a loader that refuses attributes
        pass
