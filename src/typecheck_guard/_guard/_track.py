"""Following checks as they start and end: one `Tracker` per watched thread (the
profiler) or per watched call (the runtime guard's `Window`), fed by either backend
(a profile function on Python 3.11 and older, `sys.monitoring` on 3.12+).

A check is what a checker runs around one call: jaxtyping's `wrapped_fn` (argument
binding, its shape memo, the argument and return checks), beartype's generated
wrapper, typeguard's wrapper, `isinstance(x, PyTree[...])`. Its time is the
checker's own: the checked function's *body*, which the checker calls once the
arguments passed, is not part of it. Checks nest: a check that starts inside the
body of another is its own check, with its own time and its own window
(`_situation`); checker code entered anywhere else inside a check (beartype under
jaxtyping, the `PyTree` check under beartype) is part of it. So a tracker keeps a
stack of open checks; everything but the profile function's `event` runs only when
checker code or a body starts or returns.

A check *failed* when it raised from its own code (not from its body): JAX swallows
some of these (the placeholder leaves of a first call's key paths), and the time
the checker spent building its error message is real time.
"""

from __future__ import annotations

import dis
import weakref
from collections.abc import Sequence
from types import CodeType, FrameType
from typing import Any, Final

from . import _detect, _situation

__all__ = ["Open", "Tracker"]

# A frame that returned normally stopped on one of these (a profile function's
# "return" event does not say whether the frame raised).
_RETURNS: Final = frozenset(
    dis.opmap[name] for name in ("RETURN_VALUE", "RETURN_CONST") if name in dis.opmap
)


def raised(frame: FrameType) -> bool:
    """Whether `frame`, at its profile function's "return" event, is unwinding."""
    try:
        return frame.f_code.co_code[frame.f_lasti] not in _RETURNS
    except (IndexError, ValueError):
        return False


class Open:
    """A check in progress."""

    __slots__ = (
        "frame",
        "body",
        "in_body",
        "paused_at",
        "start",
        "checkers",
        "static",
        "pytree",
        "ignore",
        "body_raised",
        "fast",
        "known",
        "data",
        "body_fn",
        "handled",
        "unsure",
    )

    def __init__(
        self,
        frame: FrameType,
        checker: str,
        body: CodeType | None = None,
        static: bool = False,
        pytree: bool = False,
        ignore: bool = False,
        data: Any = None,
    ):
        self.frame = frame
        self.body = body
        """The code of the checked function, whose run is not the check's time."""
        self.in_body: Any = None
        """While the body runs: the frame whose return ends it."""
        self.paused_at = 0.0
        self.start = 0.0
        self.checkers = [checker]
        self.static = static
        """The checkers were read from the checked function's layers: don't add the
        ones entered inside."""
        self.pytree = pytree
        self.ignore = ignore
        """Follow it (its inner checker code is part of it) but report nothing."""
        self.body_raised = False
        self.fast = False
        """The profiler's 3.11 fast path runs this check without the profile
        function (`_profile/_engine.py`)."""
        self.known: set[int] = set()
        """Kinds of checker code entered inside it that can tell us nothing more
        (its name is in `checkers`, and for `isinstance`, `pytree` is set)."""
        self.data = data
        self.body_fn: Any = None
        """The checked function of a check seen through its checker's entry points
        (`_entries`), as its body's start and end name it."""
        self.handled: Any = None
        """The exception being handled where such a check started."""
        self.unsure = False
        """Whether jaxtyping checks could not be told when it started without
        running the program's code (`_detect._no_type_check`): it is a check if
        jaxtyping began it (`_detect.never_began`), read when it ends."""


def open_described(
    frame: FrameType, described: _detect.Described, code: CodeType | None, data: Any
) -> Open:
    """The `Open` of a check that starts at `frame` and checks `described`, whose
    body runs `code`."""
    check = Open(
        frame,
        described.checker,
        code,
        static=described.static,
        pytree=described.pytree,
        data=data,
    )
    check.unsure = described.unsure
    return check


class Tracker:
    """The open checks of one thread (or one watched call). Subclasses decide what a
    check is (`open`) and what to do with a finished one (`finish`)."""

    # Class-level defaults: a tracker that sees no check (the common case for a
    # window) is created without setting any attribute.
    _stack: list[Open] | tuple[()] = ()
    # The frame whose return the profile function waits for: the innermost open
    # check's body while it runs, else that check's frame.
    _waiting: Any = None

    def open(self, frame: FrameType, kind: int) -> Open | None:  # pragma: no cover
        raise NotImplementedError

    def finish(
        self, check: Open, seconds: float, failed: bool
    ) -> None:  # pragma: no cover
        raise NotImplementedError

    def event(
        self, frame: FrameType, event: str, arg: Any, _get: Any = _detect._kinds.get
    ) -> None:
        # The profile function (Python 3.11 and older): called for every Python and C
        # call and return while it is on, so it does as little as it can: one dict
        # lookup per call, one identity test per return
        # (`benchmarks/runtime_guard_overhead.py`).
        if event == "call":
            code = frame.f_code
            kind = _get(id(code))
            if kind is None:
                kind = _detect._classify(code)
            if kind:
                self.started(frame, kind)
        elif frame is self._waiting and event == "return":
            self.returned(frame, raised(frame))

    def started(self, frame: FrameType, kind: int) -> bool:
        """Checker code (or a body) of `kind` starts at `frame`. Returns whether a
        check opened (the caller must then see `frame` return)."""
        stack = self._stack
        top = stack[-1] if stack else None
        if kind == _detect._BODY:
            if (
                top is not None
                and top.in_body is None
                and frame.f_code is top.body
                and not top.fast
            ):
                top.paused_at = _detect._clock()
                top.in_body = self._waiting = frame
            return False
        if top is not None and top.in_body is None:
            self.inside(top, frame.f_code, kind)
            return False
        if (
            kind == _detect._TYPEGUARD
            and _detect._typeguard_suppression is not None
            and _detect._typeguard_suppression.type_checks_suppressed
        ):
            return False
        try:
            check = self.open(frame, kind)
        except Exception:  # never let the watching break the user's program
            check = Open(frame, "?", ignore=True)
        if check is None:
            return False
        if not stack:
            self._stack = stack = []
        stack.append(check)  # type: ignore[union-attr]
        self._waiting = frame
        _detect.returning(frame.f_code)
        self.opened(check)
        check.start = _detect._clock()
        return True

    def inside(self, top: Open, code: CodeType, kind: int) -> None:
        """Checker code (`code`, of `kind`, no body) starts inside the check `top`,
        not in its body: it is part of it."""
        if not top.static and not top.ignore:
            name = _detect._CHECKER_NAMES[kind]
            if name not in top.checkers:
                top.checkers.append(name)
        if kind == _detect._ISINSTANCE and not top.pytree:
            top.pytree = _detect.is_pytree_check(code)
        if kind != _detect._ISINSTANCE or top.pytree:
            top.known.add(kind)

    def opened(self, check: Open) -> None:
        """Called once a check is on the stack, before its clock starts."""

    def returned(self, frame: FrameType, failed: bool) -> None:
        stack = self._stack
        if not stack:
            return
        top = stack[-1]
        if frame is top.in_body:
            # The body ran from `paused_at` to now: not the check's time.
            top.start += _detect._clock() - top.paused_at
            top.in_body = None
            top.body_raised = failed
            self._waiting = top.frame
        elif frame is top.frame:
            self.close(top, failed and not top.body_raised)

    def close(self, top: Open, failed: bool, end: float | None = None) -> None:
        """End the innermost open check `top` (at `end`, by `_detect._clock`, or
        now)."""
        seconds = (_detect._clock() if end is None else end) - top.start
        stack = self._stack
        stack.pop()  # type: ignore[union-attr]
        self._waiting = (stack[-1].in_body or stack[-1].frame) if stack else None
        if not top.ignore and not (
            (failed or top.unsure) and _detect.never_began(top.frame)
        ):
            self.finish(top, seconds, failed)

    def pause(self, top: Open, frame: Any, at: float | None = None) -> None:
        """The body of `top` starts now, or `at` (called by hooks that see it start
        without a profile event); `frame` is what `resume` will be called with."""
        top.paused_at = _detect._clock() if at is None else at
        top.in_body = self._waiting = frame

    def resume(self, top: Open, failed: bool, at: float | None = None) -> None:
        top.start += (_detect._clock() if at is None else at) - top.paused_at
        top.in_body = None
        top.body_raised = failed
        self._waiting = top.frame


_hooks: dict[str, str | None] = {}


def import_hook_of(module: str | None) -> str | None:
    """`"equinox"` when jaxtyping's import hook (`--jaxtyping-packages=equinox,...`)
    instrumented `module`, else `None`. Remembered per module."""
    if not module:
        return None
    try:
        return _hooks[module]
    except KeyError:
        pass
    from .._compat._jaxtyping import import_hook_packages

    packages = import_hook_packages(module)
    found = None if packages is None else ",".join(packages) or module
    if len(_hooks) < 10_000:
        _hooks[module] = found
    return found


# What a check in a host callback checked, by the jaxtyping decoration that checks
# it (the same every run): jaxtyping's new-style checks only, whose description
# depends on that decoration alone. A callback runs often (a progress meter), and
# watching it must not change timing a program can observe (`_entries`): after the
# first check of a function, its next ones cost a dictionary lookup. By the id of
# the decoration's `wrapped_fn_impl` closure (`_entries._key`; not of the checked
# function, which two decorations with two checkers share): `(weak reference to it,
# the description without the function or the frame's locals, the function's code
# if it is the body, the import hook that instrumented its module, the `data` and
# the `checkers` of each of its checks)`. Weakly: a value that held the closure
# would keep it alive.
_in_callbacks: dict[int, tuple[Any, ...]] = {}
_MAX_IN_CALLBACKS: Final = 10_000
# What `finish` finds in `Open.data[4]` when the import hook is not looked up yet.
_UNKNOWN: Final = object()


_IN_CALLBACK: Final = _situation.Situation("callback", None, False)


def _known_in_callback(key: Any) -> tuple[Any, ...] | None:
    """`_in_callbacks`'s entry for `key`, if it is `key`'s (not a dead one's)."""
    known = _in_callbacks.get(id(key))
    return known if known is not None and known[0]() is key else None


def _remember_in_callback(key: Any, fn: Any, described: _detect.Described) -> None:
    body = described.body
    try:
        ref = weakref.ref(key)
    except TypeError:
        return
    if len(_in_callbacks) >= _MAX_IN_CALLBACKS:
        _in_callbacks.clear()
    kept = described._replace(frame_locals={}, body=None)
    hook = import_hook_of(getattr(body, "__module__", None))
    _in_callbacks[id(key)] = (
        ref,
        kept,
        body.__code__ if body is fn else None,
        hook,
        # An `Open`'s `data` and `checkers` for each of its checks.
        (kept, _IN_CALLBACK, False, None, hook, False),
        (kept.checker,),
    )


def _seen_in_callback(frame: FrameType, known: tuple[Any, ...]) -> Open:
    """The check at `frame` of a function whose entry in `_in_callbacks` is
    `known`: not its first check (that one made the entry). Whether jaxtyping
    checks is its caller's to say (`Open.unsure`), not the first check's."""
    check = open_described(frame, known[1], known[2], known[4])
    check.unsure = False
    return check


class Window(Tracker):
    """Watches one call of a jitted function (or one host callback), on the calling
    thread or task: the runtime guard's tracker.

    `event` is the profile function of the `sys.setprofile` backend; the
    `sys.monitoring` backend calls `started` and `returned` itself. It keeps the
    checks of the windows the guard flags, `dispatch` and `callback`
    (`_situation`); a check while JAX traces or compiles is followed (what it calls
    is part of it) but not kept, and so is a check that `unflatten_safe` runs on
    purpose, the first time its verdict cache sees a signature.
    """

    checks: tuple[_detect.Check, ...] | list[_detect.Check] = ()
    # Set on the window of a host callback: every check it sees is a "callback".
    callback = False
    # Callback sites to raise for after the call (`_watch`): `{site: [...]}`.
    callback_tally: dict[Any, list[Any]] | None = None
    # The locals of the frame a check is about to open at, when the caller read
    # them already (`_entries._push`): `open` takes them instead of reading again.
    locals: dict[str, Any] | None = None
    # A host callback's finished checks, until `settle`: `(frame, data, checkers,
    # seconds, failed)`, of the check's `Open` (`finish`) or of its record
    # (`_entries._replay_known`).
    pending: list[tuple[FrameType, Any, Sequence[str], float, bool]] | None = None
    # What jaxtyping's entry points saw in a host callback, while it runs
    # (`_entries`): replayed through `started`/`push_known`, `pause`, `resume` and
    # `close` once it returned.
    events: list[tuple[Any, ...]] | None = None
    # While a host callback runs: what `_entries._Bound.bind` bound last, with its
    # closure's checked function, its time and itself, until `_entries._push`
    # takes it: `(BoundArguments, fn, start, signature)`.
    bound: tuple[Any, ...] | None = None
    # While `_entries` replays `events`: JAX wasn't tracing and jaxtyping checks
    # (it called `push_shape_memo`), so `open` doesn't ask again.
    recorded = False
    # With `sys.monitoring` (3.12+), also: per jaxtyping check `_entries` follows
    # and per body of one, innermost last, its wrapper's frame or `None` for a body.
    # While the last is a frame, the checker code that starts is part of that check
    # (`_detect._on_start` leaves it to `_entries`).
    entered: list[Any] | None = None

    def open(self, frame: FrameType, kind: int) -> Open | None:
        is_tracing = _detect._is_tracing
        if not self.recorded and is_tracing is not None and is_tracing():
            return None  # never flagged: everything below is traced too
        if kind == _detect._ISINSTANCE and _detect.no_check_of_the_programs(frame):
            return Open(frame, "", ignore=True)
        if self.callback:
            # Every check in a host callback is a "callback" check: nothing to look
            # up around it, and a callback may run often (a progress meter). What
            # needs the stack (`_deliberate`) is read once it returned (`settle`).
            return self._open_in_callback(frame, kind)
        # A check `unflatten_safe` runs on purpose, to fill its verdict cache: a
        # pass stands for every later call with its key and is no check to flag; a
        # failure is not cached and runs each time (`_found`).
        deliberate = _detect._deliberate(frame)
        described = _detect.describe(frame, kind)
        if described is None:
            return None
        # The class too, so that `install()`'s mark decides as it does for the
        # profile.
        cls = _situation.built_class(frame, described.what)
        situation, _ = _situation.situation(frame, described.what, cls, described.body)
        if situation.when in ("compile", "trace"):
            return Open(frame, "", ignore=True)
        return self._opened(frame, described, situation, cls, deliberate)

    def _opened(
        self,
        frame: FrameType,
        described: _detect.Described,
        situation: _situation.Situation,
        cls: type | None,
        deliberate: bool = False,
    ) -> Open:
        body = described.body
        code = body.__code__ if body is not None else None
        if code is not None and _detect.kind_of(code) != _detect._BODY:
            if _detect.body_code(code):
                _detect._watch_body(code)
            else:  # a checker's own code: what runs in it is part of the check
                code = None
        first = _detect._first(described.checked, body, described.checker)
        return open_described(
            frame,
            described,
            code,
            (described, situation, first, cls, _UNKNOWN, deliberate),
        )

    def push_known(
        self,
        frame: FrameType,
        local: dict[str, Any] | None,
        body: Any,
        handled: Any,
        start: float,
        key: Any,
    ) -> bool:
        """What `started` does for jaxtyping's wrapper of a function already checked
        in a callback (`_in_callbacks`), seen at `frame` (its locals `local`, or
        `None`; the checked function `body`; `key`, its decoration's `_entries._key`)
        by `_entries`, with no check open or in
        the body of one: opens its check, begun at `start` where `handled` was the
        exception being handled, and returns `True`. `False` leaves every other case
        to `started`. (`_entries` saw that jaxtyping checks and JAX wasn't tracing:
        jaxtyping's wrapper tells it only once it tested its off-switches.)"""
        stack = self._stack
        if not self.callback or (stack and stack[-1].in_body is None):
            return False
        if local is not None and "wrapped_fn_impl" not in local:
            return False
        known = _known_in_callback(key)
        if known is None:
            return False
        code = known[2]
        if code is not None and _detect._kinds.get(id(code)) != _detect._BODY:
            return False
        check = _seen_in_callback(frame, known)
        check.body_fn = body
        check.handled = handled
        if not stack:
            self._stack = stack = []
        stack.append(check)  # type: ignore[union-attr]
        self._waiting = frame
        check.start = start
        return True

    def _open_in_callback(self, frame: FrameType, kind: int) -> Open | None:
        local = self.locals
        recorded = self.recorded
        if local is None:
            local = frame.f_locals
        else:  # read by `_entries._push` for this very frame
            self.locals = None
        fn = local.get("fn") if kind == _detect._JAXTYPING else None
        if fn is None or "wrapped_fn_impl" not in local:
            described = _detect.describe(frame, kind, checks=recorded)
            if described is None:
                return None
            return self._opened(frame, described, _IN_CALLBACK, None)
        off = False if recorded else _detect._jaxtyping_switched_off(local)
        if off:
            return None
        key = local["wrapped_fn_impl"]
        known = _known_in_callback(key)
        if known is not None:
            code = known[2]
            if code is not None and _detect.kind_of(code) != _detect._BODY:
                _detect._watch_body(code)  # the guard restarted meanwhile
            check = _seen_in_callback(frame, known)
            check.unsure = off is None
            return check
        described = _detect.describe(frame, kind, checks=recorded)
        if described is None:
            return None
        check = self._opened(frame, described, _IN_CALLBACK, None)
        _remember_in_callback(key, fn, described)
        return check

    def finish(self, check: Open, seconds: float, failed: bool) -> None:
        if self.callback:
            # Inside the callback's own time: keep what `settle` needs, no more.
            pending = self.pending
            if pending is None:
                self.pending = pending = []
            pending.append((check.frame, check.data, check.checkers, seconds, failed))
            return
        self._found(check.data, check.checkers, seconds, failed)

    def settle(self) -> None:
        """Turn the checks a host callback's window kept (`finish`) into `checks`,
        once the callback returned: the stack walk (`_deliberate`: a check that
        `unflatten_safe` runs on purpose and that passed is no check of the
        callback's; a check in the first run of a function jitted inside the
        callback is that function's compile, never flagged) and the records happen
        outside the callback's own time. The frames are those of checks that
        returned, whose callers are linked as they were."""
        pending, self.pending = self.pending, None
        for frame, data, checkers, seconds, failed in pending or ():
            if _situation.compiled_in_callback(frame):
                continue  # the first run of a function jitted in the callback
            if failed or not _detect._deliberate(frame):
                self._found(data, checkers, seconds, failed)

    def _found(
        self, data: Any, checkers: Sequence[str], seconds: float, failed: bool
    ) -> None:
        """Keep the check whose `Open` had `data` and `checkers`, if it is one to
        flag."""
        described, situation, first, cls, hook, deliberate = data
        if deliberate and not failed:
            return
        if hook is _UNKNOWN:
            hook = import_hook_of(getattr(described.body, "__module__", None))
        found = _detect.Check(
            described.checked,
            " with ".join(checkers),
            "callback" if self.callback else described.what,
            seconds,
            first,
            failed=failed,
            rebuild=situation.rebuild,
            hook=hook,
            cls=cls,
        )
        if not self.checks:
            self.checks = []
        self.checks.append(found)  # type: ignore[union-attr]
