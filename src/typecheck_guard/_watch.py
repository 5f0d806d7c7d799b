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
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from . import _detect
from ._detect import Check

__all__ = ["RuntimeTypecheckError", "Site", "Tally", "watch"]

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


def listening() -> bool:
    """Whether a jitted call made now should be watched. O(1)."""
    return bool(_sinks) or _level.get() != "allow"


def add_sink(sink: Callable[[Tally], bool]) -> None:
    _sinks.append(sink)


def remove_sink(sink: Callable[[Tally], bool]) -> None:
    if sink in _sinks:
        _sinks.remove(sink)


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
        if sys.getprofile() is not None:  # already watched, or another profiler runs
            return call(*args, **kwargs)
        window = _detect.Window()
        sys.setprofile(window.event)
        try:
            out = call(*args, **kwargs)
        except BaseException:
            sys.setprofile(None)
            if window.checks:
                _report(jitted, caller, window.checks, failed=True)
            raise
        sys.setprofile(None)
    if window.checks:
        _report(jitted, caller, window.checks, failed=False)
    return out


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
