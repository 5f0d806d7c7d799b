"""Watching one jitted call: the `_detect.Window` around it, who listens (the
`runtime_checks` level of the calling thread or task, and the pytest plugin's
sinks), and what they are told: a `Site` per thing checked, and
`RuntimeTypecheckError`.

`_jitwrap` calls `watch`; `_runtime` (the public `runtime_checks`) only sets the
level, so neither of them imports the other.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, Final, NamedTuple

from .._unflatten._frames import register_dispatch, register_through
from .._unflatten._guards import blocker
from . import _detect, _entries, _situation, _tracing
from ._detect import Check
from ._fixes import unflatten_safe_fix
from ._track import Window

__all__ = ["RuntimeTypecheckError", "Site", "Tally", "watch"]

RAN: Final = (
    "{checked} was typechecked by {checker} while {jitted} was called, outside "
    "tracing, so it runs on every call ({cost}), called at {call_site}."
)

RAN_CALLBACK: Final = (
    "{checked} was typechecked by {checker} inside a host callback, {jitted} "
    "(defined at {call_site}), so it runs each time JAX calls the callback ({cost})."
)

FIX_CALLBACK: Final = (
    "Host callbacks (jax.pure_callback, jax.experimental.io_callback, "
    "jax.debug.callback) run their Python on every call of the jitted function that "
    "contains them, by design, and a typecheck inside one runs with it. It is not "
    "an unflatten check and is often library code (a progress meter, say): "
    "typecheck_guard counts it but does not fail on it unless you opt in with "
    "--typecheck-guard-callbacks=strict or "
    'typecheck_guard.runtime_checks("disallow", callbacks=True).\n'
)

FIX_CONSTRUCTOR: Final = (
    "JAX rebuilds {cls} through its constructor when it unflattens the inputs or "
    "outputs of {jitted}, so its check runs again on every call. Call "
    "typecheck_guard.install() before {name} is defined (it then unflattens through "
    "__new__), or wrap the jitted function:\n"
    "\n"
    "    {wrap}\n"
)

FIX_UNSKIPPABLE: Final = (
    "JAX rebuilds {cls} through its constructor when it unflattens the inputs or "
    "outputs of {jitted}, and its check runs on every call: {why}. Neither install() "
    "nor unflatten_safe can skip it. Apply that decorator below the checker, so that "
    "the checker is the outermost layer (`@jaxtyped(typechecker=...)` above it).\n"
)

FIX_OTHER: Final = (
    "Code that JAX runs on every call of {jitted} (a pytree node's flatten or "
    "unflatten function, usually) runs this check. Move the check out of that code, "
    "or check the values once, outside the loop.\n"
)

FIX_IMPORT_HOOK: Final = (
    "{checked} is checked because jaxtyping's import hook instruments every function "
    "of {hook} (pytest --jaxtyping-packages={hook},..., or install_import_hook): it is "
    "that package's own code, run on every call of {jitted}, not a check you wrote. "
    "To keep checking your code without it, narrow --jaxtyping-packages to the "
    "modules you want checked.\n"
)

ALLOW: Final = (
    "If this check is intended, allow it: `with "
    'typecheck_guard.runtime_checks("allow"): ...` around the call, or '
    "@pytest.mark.allow_runtime_typechecks on the test."
)

_logger = logging.getLogger("typecheck_guard")


class Site(NamedTuple):
    """Where a runtime check ran: what, by which checker, in which jitted call."""

    checked: str
    checker: str
    kind: str
    jitted: str
    call_site: str
    hook: str | None = None
    """The packages of the jaxtyping import hook that added the check, if any."""
    made_at: str | None = None
    """`path:line` where the user's code made the jitted callable, if we saw it."""
    blocked: str | None = None
    """Why the constructor's check can't be skipped (a decorator that is not a
    checker above it), if so."""

    def describe(
        self, count: int, seconds: float, first_count: int = 0, first: float = 0.0
    ) -> str:
        return (RAN_CALLBACK if self.kind == "callback" else RAN).format(
            checked=self.checked,
            checker=self.checker,
            jitted=self.jitted,
            cost=cost(count, seconds, first_count, first),
            call_site=self.call_site,
        )

    def fix(self) -> str:
        if self.kind == "callback":
            return FIX_CALLBACK
        if self.hook is not None and self.kind != "constructor":
            return FIX_IMPORT_HOOK.format(
                checked=self.checked, hook=self.hook, jitted=self.jitted
            )
        if self.kind == "constructor" and self.blocked is not None:
            return FIX_UNSKIPPABLE.format(
                cls=self.checked.rsplit(".", 1)[0],
                jitted=self.jitted,
                why=self.blocked,
            )
        if self.kind == "constructor":
            cls = self.checked.rsplit(".", 1)[0]
            return FIX_CONSTRUCTOR.format(
                cls=cls,
                name=cls.rsplit(".", 1)[-1],
                jitted=self.jitted,
                wrap=unflatten_safe_fix(self.jitted, self.made_at),
            )
        return FIX_OTHER.format(jitted=self.jitted)


# site -> [count, seconds, first_count, first_seconds]: `seconds` is the time of
# the checks after the first of each checked callable, `first_seconds` that of the
# first ones (`Check.first`), which carries the checker's one-time setup.
Tally = dict[Site, list[Any]]


def cost(count: int, seconds: float, first_count: int = 0, first: float = 0.0) -> str:
    """`7 checks, 0.700 ms; the first 14.757 ms with the checker's one-time setup`."""
    text = f"{count} check{'' if count == 1 else 's'}"
    steady = count - first_count
    if steady:
        text += f", {seconds * 1e3:.3f} ms"
        if first_count:
            text += " after the first"
    if first_count:
        text += (
            f"{'; ' if steady else ', '}the first {first * 1e3:.3f} ms with the "
            "checker's one-time setup"
        )
    return text


def add(tally: Tally, site: Site, check: Check) -> None:
    entry = tally.setdefault(site, [0, 0.0, 0, 0.0])
    entry[0] += 1
    if check.first:
        entry[2] += 1
        entry[3] += check.seconds
    else:
        entry[1] += check.seconds


def message(tally: Tally, why: str) -> str:
    """The text of a `RuntimeTypecheckError` / plugin failure for these sites."""
    lines = ["typecheck_guard: a typecheck ran at dispatch time, not at trace time."]
    fixes: list[str] = []
    for site, entry in tally.items():
        lines.append("- " + site.describe(*entry))
        fix = site.fix()
        if fix not in fixes:
            fixes.append(fix)
    return "\n".join([*lines, "", *fixes, ALLOW, f"({why})"])


class RuntimeTypecheckError(RuntimeError):
    """A typecheck ran while a jitted function was called, outside tracing,
    while `typecheck_guard.runtime_checks("disallow")` (or the pytest plugin's
    `--typecheck-guard=strict`) was in effect.

    The message names what was checked, the checker, the jitted function and the
    call site, and says how to fix it. The first site's parts are also attributes:
    `checked`, `checker`, `jitted`, `call_site`; `sites` maps every site seen in
    the call to `[count, seconds, first_count, first_seconds]`: `seconds` is the
    checks' own time (not the checked functions' bodies) after the first check of
    each checked callable seen in the process; those first checks, which carry the
    checker's one-time setup, are counted in `first_count` and `first_seconds`.
    """

    def __init__(self, message: str, sites: Tally | None = None):
        super().__init__(message)
        self.sites: Tally = dict(sites or {})
        first = next(iter(self.sites), None)
        self.checked = first.checked if first else None
        self.checker = first.checker if first else None
        self.jitted = first.jitted if first else None
        self.call_site = first.call_site if first else None


# Shown, and pickled, under its public name (jaxtyping does the same for its errors).
RuntimeTypecheckError.__module__ = "typecheck_guard"


_level: contextvars.ContextVar[str] = contextvars.ContextVar(
    "typecheck_guard_runtime_checks", default="allow"
)
# `runtime_checks(..., callbacks=True)`: checks inside host callbacks count too.
_callbacks: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "typecheck_guard_runtime_checks_callbacks", default=False
)
# The pytest plugin's sessions, innermost last (pytester nests sessions in one
# process). A sink records the sites and says whether to raise.
_sinks: list[Callable[[Tally], bool]] = []
_logged: set[Site] = set()
_lock = threading.Lock()
# `(level, callbacks)` last set (`runtime_checks`) or called a watched jitted
# function at, on any thread of the program, if not "allow": the level of host
# callbacks that JAX runs on its runtime's own threads (`callback_level`).
_lent: tuple[str, bool] | None = None


class _Callbacks(threading.local):
    # How many host callbacks the guard watches on this thread right now: what a
    # callback's own code sets, or calls a jitted function at, is the callback's
    # (on JAX's threads, a fresh context's "allow" each run), not the program's
    # level to lend. A class-level default, read without an `AttributeError`.
    depth = 0


_in_callback = _Callbacks()


def listening() -> bool:
    """Whether a jitted call made now should be watched. O(1)."""
    return bool(_sinks) or _level.get() != "allow"


def lend(level: str, callbacks: bool) -> None:
    """A thread of the program set `level` or called a jitted function at it: what
    host callbacks that JAX runs on its own threads take from now on
    (`callback_level`). The last one wins, whichever thread it came from."""
    global _lent
    if _in_callback.depth:
        return
    if level == "allow":
        _lent = None
    elif _lent != (level, callbacks):
        _lent = (level, callbacks)


def callback_level(frame: FrameType) -> tuple[str, bool]:
    """The level (and `callbacks=`) a host callback running now, at `frame`, is
    watched at: this thread's or task's; on one of the threads JAX's runtime runs
    executables on (the thread's first frame is JAX's own entry for callbacks,
    `_wrapped_callback`: it came from the runtime's C++), which no `runtime_checks`
    reaches, the level the program last set or called a jitted function at on any
    of its threads (`lend`): that of the call whose executable it most likely
    belongs to."""
    level = _level.get()
    lent = _lent
    if level == "allow" and lent is not None:
        bottom = frame
        while bottom.f_back is not None:
            bottom = bottom.f_back
        code = bottom.f_code
        if code.co_name == "_wrapped_callback" and code.co_filename.startswith(
            _situation._dirs().jax
        ):
            return lent
    return level, _callbacks.get()


def add_sink(sink: Callable[[Tally], bool]) -> None:
    _sinks.append(sink)


def remove_sink(sink: Callable[[Tally], bool]) -> None:
    if sink in _sinks:
        _sinks.remove(sink)


# The frame that calls a jitted function's C++ dispatch: a constructor it reaches
# directly is an unflatten of that call's inputs or outputs (`_unflatten/_frames.py`).
@register_through
@register_dispatch
def watch(
    jitted: Any, caller: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Call `jitted` (a `_jitwrap.Jitted`) and report the checks that ran in it."""
    __tracebackhide__ = True
    call = jitted._typecheck_guard_jitted
    is_tracing = _detect._is_tracing
    level = _level.get()
    if level != "allow" or _lent is not None:
        # Host callbacks in this call that JAX runs on a thread of its own are
        # watched at this call's level (`callback_level`).
        lend(level, _callbacks.get())
    if (
        not (_sinks or level != "allow")  # nothing listens
        or is_tracing is None  # the guard was switched off after `jitted` was made
        or is_tracing()  # checks in traced code are trace-time checks
        # Called inside a host callback that runs on this thread, maybe in a
        # context of the callback's own (`contextvars.Context().run`), where
        # `_detect._window` is unset: its checks are the callback's (`_entries`).
        or _entries._local.window is not None
    ):
        return call(*args, **kwargs)
    if _detect.monitoring:
        if _detect._window.get() is not None:  # already watched
            return call(*args, **kwargs)
        window = Window()
        _detect.listen()
        token = _detect._window.set(window)
        try:
            out = call(*args, **kwargs)
        except BaseException:
            _detect._window.reset(token)
            if window.checks or window.callback_tally:
                _report(jitted, caller, window, failed=True)
            raise
        _detect._window.reset(token)
    else:
        if _detect._window.get() is not None:
            # Called inside a host callback's window: its checks are the
            # callback's, written down by `_entries` (as on 3.12+, above), and none
            # is raised from inside the callback.
            return call(*args, **kwargs)
        previous = sys.getprofile()
        # Already watched, or another profiler runs; but `typecheck-guard profile`'s
        # profile function takes our window alongside (`_profile._Thread.event`).
        if previous is not None and not getattr(
            previous, "__typecheck_guard_composes__", False
        ):
            return call(*args, **kwargs)
        window = Window()
        sys.setprofile(
            window.event if previous is None else _compose(previous, window.event)
        )
        try:
            out = call(*args, **kwargs)
        except BaseException:
            sys.setprofile(previous)
            if window.checks or window.callback_tally:
                _report(jitted, caller, window, failed=True)
            raise
        sys.setprofile(previous)
    if window.checks or window.callback_tally:
        _report(jitted, caller, window, failed=False)
    return out


def _compose(first: Any, second: Any) -> Any:
    def both(frame: Any, event: str, arg: Any) -> None:
        first(frame, event, arg)
        second(frame, event, arg)

    both.__typecheck_guard_parts__ = (first, second)  # type: ignore[attr-defined]
    return both


def _log(tally: Tally) -> None:
    if _logged.issuperset(tally):
        return  # each site logged already: a host callback's every later run
    with _lock:
        new = [site for site in tally if site not in _logged]
        _logged.update(new)
    for site in new:
        _logger.warning("%s\n%s", site.describe(*tally[site]), site.fix())


def _report(jitted: Any, caller: Any, window: Window, failed: bool) -> None:
    __tracebackhide__ = True
    import jax

    if jax.config.jax_disable_jit:  # pyright: ignore[reportAttributeAccessIssue]
        # The jitted function ran eagerly, body included: its checks are not
        # dispatch-time checks. (Read here, on the rare path, not per call.)
        return
    tally: Tally = {}
    if window.checks:
        where = _detect.call_site(caller)
        name = _detect.describe_jitted(
            jitted._typecheck_guard_transform, jitted._typecheck_guard_fun, caller
        )
        made_at = getattr(jitted, "_typecheck_guard_made_at", None)
        for check in window.checks:
            site = Site(
                check.checked,
                check.checker,
                check.kind,
                name,
                where,
                check.hook,
                made_at,
                blocker(check.cls) if check.cls is not None else None,
            )
            add(tally, site, check)
    raise_for = None
    if tally and _sinks and _sinks[-1](tally):
        raise_for = "the pytest plugin runs with --typecheck-guard=strict"
    level = _level.get()
    if level == "log":
        _log(tally)
    elif level == "disallow":
        raise_for = 'typecheck_guard.runtime_checks("disallow") is in effect'
    # Host callbacks that ran in this call, under `callbacks=True` (the sinks and
    # the log have had them already, from `watch_callback`).
    tally.update(window.callback_tally or {})
    # A call that raised keeps its own exception: the user needs that one first.
    if raise_for is not None and not failed:
        raise RuntimeTypecheckError(message(tally, raise_for), tally)


def watch_callback(
    primitive: str,
    callback: Any,
    call: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """Run one host callback (`_callbacks` patches JAX's callback trampolines to
    come here) and report the checks in it as `"callback"` sites.

    JAX may run a callback on the calling thread inside the jitted call, on another
    thread, or after the call returned (asynchronous dispatch): so we watch the
    callback itself, wherever and whenever it runs, and its sites name the callback,
    not the jitted call that happened to be in flight. A check inside a callback is
    never raised from inside it (JAX would turn the error into a failed
    computation); `callbacks=True` raises it from the watched call that ran the
    callback on this thread, if any.
    """
    level, callbacks_too = callback_level(sys._getframe())
    if not (_sinks or level != "allow") or _detect._is_tracing is None:
        return call(*args, **kwargs)
    depth = _in_callback
    depth.depth += 1
    try:
        window = Window()
        window.callback = True
        if _detect.monitoring:
            outer = _detect._window.get()
            # jaxtyping's checks tell us themselves (`_entries`), at a smaller cost
            # to the callback's own time than following their checker code; what
            # they wrote down is followed once the window's events are off.
            recording = _entries.active()
            _detect.listen()
            try:
                previous = _entries.enter(window) if recording else None
                try:
                    token = _detect._window.set(window)
                    try:
                        return call(*args, **kwargs)
                    finally:
                        _detect._window.reset(token)
                finally:
                    if recording:
                        _entries.leave(window, previous)
            finally:
                window.settle()
                if window.checks:
                    _report_callback(
                        primitive, callback, window.checks, outer, level, callbacks_too
                    )
        previous = sys.getprofile()
        # Inside a watched call, `previous` is its window's profile function,
        # maybe composed with `typecheck-guard profile`'s; the profiler's, we keep.
        base, watching = getattr(
            previous, "__typecheck_guard_parts__", (None, previous)
        )
        if getattr(watching, "__typecheck_guard_composes__", False):
            base, watching = watching, None
        outer = getattr(watching, "__self__", None)
        if watching is not None and not isinstance(outer, Window):
            return call(*args, **kwargs)  # another profiler runs: we step aside
        if outer is None:
            outer = _tracing.paused()  # a watched call that runs its executable
        if _entries.active():
            # The callback's own Python runs with no profile function of ours (a
            # program may time it: `_entries`); jaxtyping's checks tell us
            # themselves.
            sys.setprofile(base)
            # A jitted call inside is the callback's.
            token = _detect._window.set(window)
            try:
                before = _entries.enter(window)
                try:
                    return call(*args, **kwargs)
                finally:
                    _entries.leave(window, before)
            finally:
                _detect._window.reset(token)
                sys.setprofile(previous)
                window.settle()
                if window.checks:
                    _report_callback(
                        primitive, callback, window.checks, outer, level, callbacks_too
                    )
        sys.setprofile(window.event if base is None else _compose(base, window.event))
        try:
            return call(*args, **kwargs)
        finally:
            sys.setprofile(previous)
            window.settle()
            if window.checks:
                _report_callback(
                    primitive, callback, window.checks, outer, level, callbacks_too
                )
    finally:
        depth.depth -= 1


# `id(fn)` -> (a weak reference to a callback's function, its code, where it is
# defined): a callback runs often (a progress meter), and the same one each time.
# Weakly: a callback the program drops (and what it closes over) is not kept alive
# by us.
_callbacks_defined_at: dict[int, tuple[Any, Any, str]] = {}


def _callback_name(primitive: str, callback: Any) -> tuple[str, str]:
    """The callback's name, read at each run as the profile reads it (a callback
    may change its `__qualname__` while it lives), and where it is defined."""
    fn = _situation.function_of_callback(callback)
    name = _situation.callback_label(primitive, fn)
    code = getattr(fn, "__code__", None)
    known = _callbacks_defined_at.get(id(fn))
    if known is not None and known[0]() is fn and known[1] is code:
        return name, known[2]
    where = _detect.defined_at(fn)
    try:
        ref = weakref.ref(fn)
    except TypeError:
        return name, where
    if len(_callbacks_defined_at) >= 10_000:
        _callbacks_defined_at.clear()
    _callbacks_defined_at[id(fn)] = (ref, code, where)
    return name, where


def _report_callback(
    primitive: str,
    callback: Any,
    checks: Sequence[Check],
    outer: Window | None,
    level: str,
    callbacks_too: bool,
) -> None:
    name, where = _callback_name(primitive, callback)
    tally: Tally = {}
    for check in checks:
        site = Site(check.checked, check.checker, "callback", name, where, check.hook)
        add(tally, site, check)
    if _sinks:
        _sinks[-1](tally)  # the plugin flags them per --typecheck-guard-callbacks
    if level == "log":
        _log(tally)
    elif level == "disallow" and callbacks_too:
        if outer is not None and not outer.callback:
            # A watched call on this thread ran the callback: it raises once the
            # call has returned.
            merged = outer.callback_tally or {}
            for site, entry in tally.items():
                into = merged.setdefault(site, [0, 0.0, 0, 0.0])
                for i, value in enumerate(entry):
                    into[i] += value
            outer.callback_tally = merged
        else:  # no call to raise from (another thread, or after it returned)
            _log(tally)


_situation.register_callback(watch_callback.__code__)
