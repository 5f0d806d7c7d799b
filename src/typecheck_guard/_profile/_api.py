"""`typecheck_guard.profile()`: the public recorder, a `Totals` that starts and stops
the engine (`_engine.py`) and prints its report (`_report.py`)."""

from __future__ import annotations

import sys
import time
from typing import Any

from ._data import Totals
from ._engine import attach, detach

__all__ = ["Profile", "profile"]


class Profile(Totals):
    """What `typecheck_guard.profile()` returns: a context manager that records
    every typecheck run inside it (in every thread), then `report()`s them."""

    # Set by `typecheck-guard profile` and the pytest option, which start before the
    # program makes any jitted callable (`_engine.attach`).
    _before_program = False
    _hook: tuple[Any, Any] = (None, None)

    def __init__(self, every_checker: bool = False):
        super().__init__()
        self.every_checker = every_checker

    def start(self) -> Profile:
        """Start recording (what entering the `with` block does)."""
        if self._running:
            return self
        attach(
            self, before_program=self._before_program, every_checker=self.every_checker
        )
        self._running = True
        # An error that ends the program reaches `sys.excepthook` (the command line
        # hands it there too): its traceback says which failed checks stopped it.
        previous = sys.excepthook

        def excepthook(kind: Any, error: Any, tb: Any) -> None:
            if isinstance(error, BaseException):
                self._ended(error)
            previous(kind, error, tb)

        self._hook = (previous, excepthook)
        sys.excepthook = excepthook
        self._start = time.perf_counter()
        return self

    def stop(self) -> Profile:
        """Stop recording (what leaving the `with` block does)."""
        if self._running:
            self._wall += time.perf_counter() - self._start
            self._running = False
            detach(self)
            previous, ours = self._hook
            if sys.excepthook is ours:
                sys.excepthook = previous
        return self

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        if isinstance(exc[1], BaseException):
            self._ended(exc[1])
        self.stop()

    def report(self, top: int | None = 20, file: Any = None) -> None:
        """Print the table: the headline, then each site (the most time first) with
        its count, time, time per check, share of the wall time (less the
        profiler's own, `unprofiled_seconds`) and fix.

        **Arguments:**

        - `top`: how many sites to list; `0` or `None`: all of them (as the command
          line's `--top 0`).
        - `file`: where to print (default: `sys.stdout`).

        **Raises:**

        `TypeError` if `top` is not a whole number, `ValueError` if it is negative.
        """
        from ._report import format_text, validate_top

        top = validate_top(top)
        print(format_text(self, top=top), file=file if file is not None else sys.stdout)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data: `wall_seconds` (as measured),
        `profiler_seconds` (the profiler's own part of it, an estimate),
        `unprofiled_seconds` (the difference, which the shares are of), `overhead`,
        `check_seconds`,
        `removable_seconds` and `sites` (each with `site`, `checker`, `when`,
        `count`, `seconds`, `fix`, ...)."""
        from ._report import to_dict

        return to_dict(self)


def profile(*, every_checker: bool = False) -> Profile:
    """Record every typecheck that runs in a block, where it was reached from, what
    it cost, and how to remove it.

    Each check (a jaxtyped, beartype or typeguard function or `__init__`, an
    `isinstance(x, PyTree[...])`) is counted once, with the checkers it calls, in
    whichever thread it runs, and sorted by how it was reached:

    - `"dispatch"`: a call of a jitted function, outside tracing: JAX rebuilding
      its output through a checked constructor (or a library's dispatch code runs
      the check); it runs again on every call;
    - `"compile"`: JAX rebuilding a tree while it traced or compiled a jitted call
      (once per compilation; a check that fails there on JAX's placeholder leaves
      is counted as failed: JAX swallows the error);
    - `"tree"`: JAX rebuilding a tree in a tree operation (`jax.tree.map`, ...);
    - `"callback"`: inside a host callback (`jax.pure_callback`, ...);
    - `"verdict"`: a check that `unflatten_safe` runs on purpose and that passed,
      the first time its verdict cache saw the call's signature (once per
      signature);
    - `"trace"`: your code, while JAX traced it (once per compilation);
    - `"construction"`: your code built a checked object;
    - `"eager"`: a checked function or `isinstance` check outside tracing;
    - `"unclear"`: a construction, or JAX's C++ rebuilding the output of a call of
      a jitted function made *before* the block, on a line whose call the profile
      can't read without running code (`steps[i](state)`): it can't tell the two
      apart, and says so.

    A check's time is the checker's own: the checked function's body is not in
    it, and a check inside that body is its own row. Jitted functions made inside
    the block are seen as they are called (it switches on the factory patches of
    the runtime guard); for one made before the block, JAX's C++ dispatch leaves no
    Python frame, and the profile reads what the line that JAX was called from
    calls (`state = step(state)`, `self.step(state)`): a jitted function, and its
    rebuilds are `"dispatch"` as the command line labels them.
    `typecheck-guard profile script.py` covers the whole program and sees every
    call.

    What watching costs: on Python 3.12+ (`sys.monitoring`), only checker code
    calls the profiler. On 3.11 it sees checks where their checker enters them, with
    no profile function, so the rest of the program runs at full speed: every
    jaxtyping check (`@jaxtyped` functions and dataclasses, jaxtyping's import hook)
    and `isinstance(x, PyTree[...])`, also under beartype or typeguard alone; not a
    check by beartype or typeguard alone of other annotations, which the report
    says. `every_checker=True` sees those too, with a profile function on every
    call, which makes Python code about 1.3x slower there.

    **Arguments:**

    - `every_checker`: on Python 3.11, also watch checks by beartype or typeguard
      alone (with a profile function). No effect on 3.12+, which sees them all.

    **Returns:**

    A `Profile`: use it in a `with` statement, then `report()` (print the table),
    `sites` (the rows, each a `typecheck_guard.Site`, the most time first),
    `to_dict()` (the same with each site's fix), `wall_seconds`, `check_seconds`,
    and the profiler's own cost: `profiler_seconds` (an estimate), `overhead` and
    `unprofiled_seconds` (the wall time less the profiler's own, which the report's
    shares are of; above 1.1x, the report says how much slower profiling made the
    run).

    !!! Example

        ```python
        with typecheck_guard.profile() as prof:
            step = jax.jit(step)
            for batch in data:
                state = step(state, batch)
        prof.report()
        ```
    """
    if not isinstance(every_checker, bool):
        raise TypeError(
            "typecheck_guard.profile: `every_checker` must be True or False, got "
            f"{every_checker!r}."
        )
    return Profile(every_checker)
