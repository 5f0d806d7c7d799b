"""`runtime_checks(level)`: what to do when a typecheck runs while a jitted function
is called, outside tracing, and `RuntimeTypecheckError`.

The level lives in a `ContextVar` (like `decimal`'s context): calling
`runtime_checks(level)` sets it for the current thread or asyncio task at once, and
leaving a `with runtime_checks(level):` block puts back the level it found. Threads
and tasks are isolated; a new thread starts at `"allow"`. We rejected a process-wide
default set by the bare call: one object cannot then also scope a `with` block
without a moment in which every other thread sees the block's level.

`watch` runs one jitted call under a `_detect.Window` and reports what it saw to
the level and to the pytest plugin (`add_sink`), which keeps its own policy.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, Literal, NamedTuple

from . import _detect
from ._detect import Check
from ._frames import register_dispatch

__all__ = ["RuntimeTypecheckError", "runtime_checks"]

LEVELS: Final = ("allow", "log", "disallow")

UNKNOWN_LEVEL: Final = (
    "typecheck_guard.runtime_checks: unknown level {level!r}. The levels are "
    '"allow" (the default: checks run silently), "log" (log each site once) and '
    '"disallow" (raise typecheck_guard.RuntimeTypecheckError). Write, for example,\n'
    "\n"
    '    with typecheck_guard.runtime_checks("disallow"):\n'
    "        state = step(state)\n"
)

RAN: Final = (
    "{checked} was typechecked by {checker} while {jitted} was called, outside "
    "tracing, so it runs on every call ({count} check{s}, {ms:.3f} ms), called at "
    "{call_site}."
)

FIX_CONSTRUCTOR: Final = (
    "JAX rebuilds {cls} through its constructor when it unflattens the inputs or "
    "outputs of {jitted}, so its check runs again on every call. Call "
    "typecheck_guard.install() before {name} is defined (it then unflattens through "
    "__new__), or wrap the jitted function:\n"
    "\n"
    "    {short} = typecheck_guard.unflatten_safe({transform}({short}))\n"
)

FIX_OTHER: Final = (
    "Code that JAX runs on every call of {jitted} (a pytree node's flatten or "
    "unflatten function, usually) runs this check. Move the check out of that code, "
    "or check the values once, outside the loop.\n"
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

    def describe(self, count: int, seconds: float) -> str:
        return RAN.format(
            checked=self.checked,
            checker=self.checker,
            jitted=self.jitted,
            count=count,
            s="" if count == 1 else "s",
            ms=seconds * 1e3,
            call_site=self.call_site,
        )

    def fix(self) -> str:
        if self.kind == "constructor":
            cls = self.checked.rsplit(".", 1)[0]
            transform, _, fun = self.jitted.partition("(")
            short = fun.rstrip(")").rsplit(".", 1)[-1] or "step"
            return FIX_CONSTRUCTOR.format(
                cls=cls,
                name=cls.rsplit(".", 1)[-1],
                jitted=self.jitted,
                transform=transform,
                short=short if short.isidentifier() else "step",
            )
        return FIX_OTHER.format(jitted=self.jitted)


Tally = dict[Site, list[Any]]  # site -> [count, seconds]


def message(tally: Tally, why: str) -> str:
    """The text of a `RuntimeTypecheckError` / plugin failure for these sites."""
    lines = ["typecheck_guard: a typecheck ran at dispatch time, not at trace time."]
    fixes: list[str] = []
    for site, (count, seconds) in tally.items():
        lines.append("- " + site.describe(count, seconds))
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
    the call to `[count, seconds]`.
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
# The pytest plugin's sessions, innermost last (pytester nests sessions in one
# process). A sink records the sites and says whether to raise.
_sinks: list[Callable[[Tally], bool]] = []
_logged: set[Site] = set()
_lock = threading.Lock()
_pinned = False


def listening() -> bool:
    """Whether a jitted call made now should be watched. O(1)."""
    return bool(_sinks) or _level.get() != "allow"


def add_sink(sink: Callable[[Tally], bool]) -> None:
    _sinks.append(sink)


def remove_sink(sink: Callable[[Tally], bool]) -> None:
    if sink in _sinks:
        _sinks.remove(sink)


# The frame that calls a jitted function's C++ dispatch: a constructor it reaches
# directly is an unflatten of that call's inputs or outputs (`_frames.py`).
@register_dispatch
def watch(
    jitted: Any, caller: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Call `jitted` (a `_jitwrap.Jitted`) and report the checks that ran in it."""
    __tracebackhide__ = True
    call = jitted.__wrapped__
    is_tracing = _detect._is_tracing
    if (
        not (_sinks or _level.get() != "allow")  # nothing listens
        or is_tracing is None  # the guard was switched off after `jitted` was made
        or is_tracing()  # checks in traced code are trace-time checks
    ):
        return call(*args, **kwargs)
    if _detect.monitoring:
        if _detect._window.get() is not None:  # already watched
            return call(*args, **kwargs)
        window = _detect.Window()
        token = _detect._window.set(window)
        try:
            out = call(*args, **kwargs)
        except BaseException:
            _detect._window.reset(token)
            if window.checks:
                _report(jitted, caller, window.checks, failed=True)
            raise
        _detect._window.reset(token)
    else:
        previous = sys.getprofile()
        # Already watched, or another profiler runs; but `typecheck-guard profile`'s
        # profile function takes our window alongside (`_profile._Thread.event`).
        if previous is not None and not getattr(
            previous, "__typecheck_guard_composes__", False
        ):
            return call(*args, **kwargs)
        window = _detect.Window()
        sys.setprofile(
            window.event if previous is None else _compose(previous, window.event)
        )
        try:
            out = call(*args, **kwargs)
        except BaseException:
            sys.setprofile(previous)
            if window.checks:
                _report(jitted, caller, window.checks, failed=True)
            raise
        sys.setprofile(previous)
    if window.checks:
        _report(jitted, caller, window.checks, failed=False)
    return out


def _compose(first: Any, second: Any) -> Any:
    def both(frame: Any, event: str, arg: Any) -> None:
        first(frame, event, arg)
        second(frame, event, arg)

    return both


def _report(jitted: Any, caller: Any, checks: Sequence[Check], failed: bool) -> None:
    __tracebackhide__ = True
    import jax

    if jax.config.jax_disable_jit:  # pyright: ignore[reportAttributeAccessIssue]
        # The jitted function ran eagerly, body included: its checks are not
        # dispatch-time checks. (Read here, on the rare path, not per call.)
        return
    where = _detect.call_site(caller)
    name = _detect.describe_jitted(
        jitted._typecheck_guard_transform, jitted._typecheck_guard_fun
    )
    tally: Tally = {}
    for check in checks:
        site = Site(check.checked, check.checker, check.kind, name, where)
        entry = tally.setdefault(site, [0, 0.0])
        entry[0] += 1
        entry[1] += check.seconds
    raise_for = None
    if _sinks and _sinks[-1](tally):
        raise_for = "the pytest plugin runs with --typecheck-guard=strict"
    level = _level.get()
    if level == "log":
        with _lock:
            new = [site for site in tally if site not in _logged]
            _logged.update(new)
        for site in new:
            count, seconds = tally[site]
            _logger.warning("%s\n%s", site.describe(count, seconds), site.fix())
    elif level == "disallow":
        raise_for = 'typecheck_guard.runtime_checks("disallow") is in effect'
    # A call that raised keeps its own exception: the user needs that one first.
    if raise_for is not None and not failed:
        raise RuntimeTypecheckError(message(tally, raise_for), tally)


def _pin() -> None:
    """Switch the guard's patches on for the rest of the process."""
    global _pinned
    if _pinned:
        return
    from . import _jitwrap

    with _lock:
        if _pinned:
            return
        _jitwrap.acquire()
        _pinned = True


class RuntimeChecks:
    """What `runtime_checks(level)` returns: the level, already in effect for the
    current thread or task; as a context manager, it is put back on exit."""

    __slots__ = ("level", "_token", "_previous")

    def __init__(self, level: str):
        self.level = level
        self._previous = _level.get()
        self._token = _level.set(level)

    def __enter__(self) -> RuntimeChecks:
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            _level.reset(self._token)
        except (ValueError, RuntimeError):  # left in another context, or twice
            _level.set(self._previous)

    def __repr__(self) -> str:
        return f"typecheck_guard.runtime_checks({self.level!r})"


def runtime_checks(level: Literal["allow", "log", "disallow"]) -> RuntimeChecks:
    """What to do when a typecheck runs while a jitted function is called, outside
    tracing.

    Modelled on `jax.transfer_guard`. A call of a `jax.jit`, `jax.pmap`,
    `equinox.filter_jit` or `flax.nnx.jit` function runs the function's body only
    when JAX traces it, so any typecheck that runs outside tracing — a jaxtyped or
    beartype/typeguard-checked `__init__` reached when JAX unflattens an output, a
    checked function or an `isinstance(x, PyTree[...])` in a pytree's unflatten —
    runs again on every call. The first call is watched too (the unflatten of its
    outputs runs outside tracing); checks while JAX traces are never flagged.

    - `"allow"` (the default): checks run, unwatched.
    - `"log"`: each site (what was checked, the checker, the jitted function and the
      call site) is logged once, on the `typecheck_guard` logger.
    - `"disallow"`: the call raises `typecheck_guard.RuntimeTypecheckError` (after
      it completed, unless it raised its own error).

    One object, two forms: `runtime_checks("log")` sets the level for the current
    thread (or asyncio task) from now on; `with runtime_checks("disallow"): ...`
    sets it for the block and puts back the previous level on exit, also when the
    block raises. Threads and tasks are isolated.

    The guard sees jitted callables created after a level other than `"allow"` was
    first set in the process (it wraps `jax.jit` & co from then on, for the rest of
    the process; a wrapped call costs under a microsecond while nothing is watched).
    Set a level at the top of your program, before your jitted functions are
    defined; the pytest plugin does this for you.

    **Arguments:**

    - `level`: `"allow"`, `"log"` or `"disallow"`.

    **Returns:**

    The setting, already in effect; use it in a `with` statement to scope it.

    **Raises:**

    `ValueError` for any other level.

    !!! Example

        ```python
        typecheck_guard.runtime_checks("log")  # top of the script
        step = jax.jit(step)
        with typecheck_guard.runtime_checks("disallow"):
            for batch in data:
                state = step(state, batch)  # raises if a check runs per call
        ```
    """
    if not isinstance(level, str) or level not in LEVELS:
        raise ValueError(UNKNOWN_LEVEL.format(level=level))
    if level != "allow":
        _pin()
    return RuntimeChecks(level)
