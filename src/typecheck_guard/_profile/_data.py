"""What the profiler records: one `Record` per check as it finishes, one `Site` per
row of the report, and the `Totals` a recorder keeps. Data only: the engine
(`_engine.py`) fills them, the report (`_report.py`) formats them, and neither of
those two imports the other."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

__all__ = ["WHENS", "Record", "Site", "Totals"]

# `_guard._situation.WHENS`, `unclear`: what `with profile():` cannot tell apart
# (a construction, or JAX's C++ rebuilding the output of a jitted call made before
# the block), and `verdict`: a check `unflatten_safe` runs on purpose and that
# passed, the first time its verdict cache saw its signature.
WHENS: Final = (
    "dispatch",
    "compile",
    "tree",
    "callback",
    "unclear",
    "verdict",
    "trace",
    "construction",
    "eager",
)


class Record(NamedTuple):
    """One check, as it finished."""

    checked: str
    checker: str
    kind: str  # "constructor", "function" or "isinstance" (`_detect._kind_of`)
    when: str
    jitted: str | None
    cls: type | None
    pytree: bool  # a `PyTree[...]` check ran inside it
    thread: str
    seconds: float
    failed: bool = False
    rebuild: bool = False
    hook: str | None = None
    made_at: str | None = None
    error: Any = None
    """A failed check's error, when the engine saw it (a weak reference): is it
    the one that ended the run?"""
    frame: tuple[int, Any] | None = None
    """A failed check's frame, by (id, code): is it on the traceback of the error
    that ended the run?"""


class Site:
    """One row of a profile: every check of one thing, by one checker, reached the
    same way.

    `Profile.sites` lists them, the most time first. The time of a check is the
    checker's own (binding and checking the arguments and the return value,
    jaxtyping's shape memo, building the error message of a check that failed); the
    checked function's body is not in it, and a check that runs inside that body is
    a row of its own.

    !!! Example

        ```python
        with typecheck_guard.profile() as prof:
            ...
        for site in prof.sites:
            print(site.when, site.name, site.count, site.seconds)
        ```
    """

    __slots__ = (
        "checked",
        "checker",
        "kind",
        "when",
        "jitted",
        "cls",
        "count",
        "seconds",
        "first_calls",
        "setup_seconds",
        "failed",
        "fatal",
        "rebuild",
        "hook",
        "made_at",
        "pytree",
        "threads",
        "tests",
    )

    def __init__(self, record: Record):
        self.checked = record.checked
        """`module.Class.__init__`, `module.function`, or `isinstance(..., PyTree)
        in module.function`."""
        self.checker = record.checker
        """`"jaxtyping with beartype"`, `"typeguard"`, ..."""
        self.kind = record.kind
        """`"constructor"`, `"function"` or `"isinstance"`."""
        self.when = record.when
        """The window the checks ran in: `"dispatch"` (a call of a jitted function,
        outside tracing: every call), `"compile"` (JAX rebuilding a tree while it
        traced or compiled a jitted call: once per compilation), `"tree"` (JAX
        rebuilding a tree in a tree operation), `"callback"` (a host callback),
        `"unclear"` (a construction, or JAX's C++ rebuilding the output of a jitted
        call that `profile()` could not tell from one), `"verdict"` (a check that
        `unflatten_safe` runs on purpose and that passed: once per signature),
        `"trace"` (your code, while JAX traced it), `"construction"` or
        `"eager"`."""
        self.jitted = record.jitted
        """The jitted function (`jax.jit(module.step)`) in `dispatch`, `compile`
        and `trace`; the callback (`jax.pure_callback(module.f)`) in `callback`."""
        self.cls = record.cls
        """The class a constructor check built, if known."""
        self.count = 0
        """Every check, the first call's included."""
        self.seconds = 0.0
        """All their time, the first call's included."""
        self.first_calls = 0
        """How many of them were the first check of their function in the run, or
        its first failed check."""
        self.setup_seconds = 0.0
        """The time of those first checks (they include the checker's one-time
        setup and cold caches, and its first error message's)."""
        self.failed = 0
        """How many of them raised (in `compile`, JAX swallows the error)."""
        self.fatal = 0
        """How many of those raised the error that ended the profiled run."""
        self.rebuild = record.rebuild
        """JAX rebuilding a tree (an unflatten) ran these checks."""
        self.hook = record.hook
        """The packages of the jaxtyping import hook that added the check
        (`--jaxtyping-packages=...`), if one did."""
        self.made_at = record.made_at
        """`path:line` where your code made the jitted function, if the profile
        saw it made."""
        self.pytree = False
        """A `PyTree[...]` annotation was checked."""
        self.threads: set[str] = set()
        """The names of the threads the checks ran in."""
        self.tests: dict[str, float] = {}
        """Under `pytest --typecheck-guard-profile`: seconds per test id."""

    @property
    def steady_seconds(self) -> float:
        """The time of the checks after the first of each checked function."""
        return self.seconds - self.setup_seconds

    @property
    def per_check(self) -> float:
        """Seconds per check in the steady state (first calls left out)."""
        steady = self.count - self.first_calls
        if steady:
            return self.steady_seconds / steady
        return self.setup_seconds / self.count if self.count else 0.0

    @property
    def name(self) -> str:
        """The checked class for a constructor, else what was checked."""
        if self.kind == "constructor":
            return self.checked.rsplit(".", 1)[0]
        return self.checked

    @property
    def callback(self) -> bool:
        """The checks ran inside a host callback."""
        return self.when == "callback"

    @property
    def key(self) -> tuple[str, str, str, str | None]:
        return (self.checked, self.checker, self.when, self.jitted)

    def __repr__(self) -> str:
        return (
            f"<Site {self.checked} ({self.checker}) {self.when}"
            f"{' in ' + self.jitted if self.jitted else ''}: {self.count} checks, "
            f"{self.seconds * 1e3:.3f} ms>"
        )


class Totals:
    """What a recorder keeps: its sites and totals. `Profile` adds starting,
    stopping and reporting; the report reads only this."""

    def __init__(self) -> None:
        self._sites: dict[tuple[str, str, str, str | None], Site] = {}
        self._seen: set[str] = set()
        self._seen_failing: set[str] = set()
        self._lock = threading.Lock()
        self._start = 0.0
        self._wall = 0.0
        self._running = False
        # The profiler's own time (`_engine.own_seconds`): what earlier runs
        # added, and while attached, the engine's meter and its reading then.
        self._profiler = 0.0
        self._meter: tuple[Any, Any] | None = None
        self.setup_probes = 0
        """Checks a checker ran on its own hints while decorating (not counted in
        the sites, nor timed)."""
        self.setup_probe_seconds = 0.0
        self.label: str | None = None
        """Attributed to each site's `tests` (the pytest option sets the test id)."""
        self.program: str | None = None
        """What ran (`train.py`, `-m pkg.train`), for the fixes' wording."""
        self.unwatched: str | None = None
        """What the engine did not watch (Python 3.11 without `every_checker`:
        checks by beartype or typeguard alone), for the report to say so."""
        # Failed checks' errors: id -> (weak reference, site key).
        self._failed_with: dict[int, tuple[Any, tuple[str, str, str, str | None]]] = {}
        # And their frames: (id, code) -> site key.
        self._failed_at: dict[tuple[int, Any], tuple[str, str, str, str | None]] = {}

    def _ended(self, error: BaseException) -> None:
        """The run ended with `error`: the failed checks it passed through stopped
        the program."""
        # JAX re-raises the checker's error itself (with its own frames filtered
        # out of the traceback); a library may wrap it: read the chain.
        seen: set[int] = set()
        keys = []
        frames: set[tuple[int, Any]] = set()
        chained: BaseException | None = error
        while chained is not None and id(chained) not in seen and len(seen) < 8:
            seen.add(id(chained))
            found = self._failed_with.get(id(chained))
            if found is not None and found[0]() is chained:
                keys.append(found[1])
            tb = chained.__traceback__
            while tb is not None:
                # The check's own frame, or one of its checker's frames under it.
                f, depth = tb.tb_frame, 0
                while f is not None and depth < 4:
                    frames.add((id(f), f.f_code))
                    f, depth = f.f_back, depth + 1
                tb = tb.tb_next
            chained = chained.__cause__ or chained.__context__
        if not keys:
            keys = list(
                dict.fromkeys(
                    self._failed_at[f] for f in frames if f in self._failed_at
                )
            )
        with self._lock:
            for key in keys:
                site = self._sites.get(key)
                if site is not None and site.fatal < site.failed:
                    site.fatal += 1

    def _add(self, record: Record) -> None:
        key = (record.checked, record.checker, record.when, record.jitted)
        with self._lock:
            if record.when == "setup":
                self.setup_probes += 1
                self.setup_probe_seconds += record.seconds
                return
            site = self._sites.get(key)
            if site is None:
                site = self._sites[key] = Site(record)
            site.count += 1
            site.seconds += record.seconds
            if record.failed:
                site.failed += 1
                if len(self._failed_with) < 10_000:
                    if record.error is not None:
                        self._failed_with[id(record.error())] = (record.error, key)
                    if record.frame is not None:
                        self._failed_at[record.frame] = key
            if record.checked not in self._seen:
                self._seen.add(record.checked)
                site.first_calls += 1
                site.setup_seconds += record.seconds
            elif record.failed and record.checked not in self._seen_failing:
                # A function's first failed check builds the checker's first error
                # message (beartype's and jaxtyping's one-time imports and caches:
                # 0.7 s where the next ones take milliseconds): setup too.
                site.first_calls += 1
                site.setup_seconds += record.seconds
            if record.failed:
                self._seen_failing.add(record.checked)
            if record.pytree:
                site.pytree = True
            if site.cls is None:
                site.cls = record.cls
            site.threads.add(record.thread)
            if self.label is not None:
                site.tests[self.label] = site.tests.get(self.label, 0.0) + (
                    record.seconds
                )

    @property
    def wall_seconds(self) -> float:
        """The time the profile ran for (so far, while it runs), as measured: the
        profiler's own time included."""
        if self._running:
            return self._wall + time.perf_counter() - self._start
        return self._wall

    @property
    def estimated_profiler_seconds(self) -> float:
        """The profiler's own time, as estimated: the time spent in its own work
        (measured where a check starts and ends) and in the calls the interpreter
        makes to it (counted, times a cost per call measured when it starts)."""
        seconds = self._profiler
        meter = self._meter
        if meter is not None:
            seconds += meter[0](meter[1])
        return max(seconds, 0.0)

    @property
    def profiler_seconds(self) -> float:
        """The profiler's own share of `wall_seconds` the report takes off:
        `estimated_profiler_seconds`, or 0.0 when that estimate is not below the
        time the run spent outside checks (`wall_seconds - check_seconds`), where it
        can't be told apart from the run's own (a block a few microseconds long,
        or a loop of nothing but checks): the report then says so and its
        percentages are of the measured wall time."""
        estimate = self.estimated_profiler_seconds
        return estimate if estimate < self.wall_seconds - self.check_seconds else 0.0

    @property
    def unprofiled_seconds(self) -> float:
        """An estimate of the wall time the run would have taken without the
        profiler: `wall_seconds - profiler_seconds`, more than `check_seconds`
        whenever a profiler's cost is taken off. The report's shares and its
        headline percentage are of this."""
        return self.wall_seconds - self.profiler_seconds

    @property
    def overhead(self) -> float:
        """How much slower profiling made the run, by the estimate:
        `wall_seconds / unprofiled_seconds` (1.0: no slower, or not told apart)."""
        base = self.unprofiled_seconds
        return self.wall_seconds / base if base > 0 else 1.0

    @property
    def sites(self) -> tuple[Site, ...]:
        """Every site, the most time first."""
        with self._lock:
            sites = list(self._sites.values())
        return tuple(sorted(sites, key=lambda s: (-s.seconds, -s.count, s.checked)))

    @property
    def check_seconds(self) -> float:
        """The time of all the checks."""
        return sum(s.seconds for s in self.sites)

    def __iter__(self) -> Iterator[Site]:
        return iter(self.sites)

    def __repr__(self) -> str:
        return (
            f"<typecheck_guard.profile: {sum(s.count for s in self.sites)} checks, "
            f"{self.check_seconds:.3f} s of {self.wall_seconds:.3f} s>"
        )
