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

    def start(self) -> Profile:
        if self._running:
            return self
        attach(self)
        self._running = True
        self._start = time.perf_counter()
        return self

    def stop(self) -> Profile:
        if self._running:
            self._wall += time.perf_counter() - self._start
            self._running = False
            detach(self)
        return self

    def __enter__(self) -> Profile:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def report(self, top: int | None = 20, file: Any = None) -> None:
        """Print the table: the headline, then each site (the most time first) with
        its count, time, time per check, share of the wall time and fix.

        **Arguments:**

        - `top`: how many sites to list (`None`: all).
        - `file`: where to print (default: `sys.stdout`).
        """
        from ._report import format_text

        print(format_text(self, top=top), file=file if file is not None else sys.stdout)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data: `wall_seconds`, `check_seconds`,
        `removable_seconds` and `sites` (each with `site`, `checker`, `when`,
        `count`, `seconds`, `fix`, ...)."""
        from ._report import to_dict

        return to_dict(self)


def profile() -> Profile:
    """Record every typecheck that runs in a block, where it was reached from, what
    it cost, and how to remove it.

    Each check (a jaxtyped, beartype or typeguard function or `__init__`, an
    `isinstance(x, PyTree[...])`) is counted once, with the checkers it calls, in
    whichever thread it runs, and sorted by how it was reached:

    - `"dispatch"`: JAX unflattened an input or output of a jitted call (outside
      tracing): it runs again on every call;
    - `"tree"`: an unflatten in a tree operation (`jax.tree.map`, ...);
    - `"construction"`: your code built a checked object;
    - `"eager"`: a checked function or `isinstance` check outside tracing;
    - `"trace"`: while JAX traced a function (once per compilation).

    Jitted calls are recognised for jitted functions created inside the block (it
    switches on the factory patches of the runtime guard);
    `typecheck-guard profile script.py` covers the whole program.

    **Returns:**

    A `Profile`: use it in a `with` statement, then `report()` (print the table),
    `sites` (the rows, the most time first), `to_dict()`, `wall_seconds`.

    !!! Example

        ```python
        with typecheck_guard.profile() as prof:
            step = jax.jit(step)
            for batch in data:
                state = step(state, batch)
        prof.report()
        ```
    """
    return Profile()
