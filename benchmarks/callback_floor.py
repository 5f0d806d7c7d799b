"""What a checked host callback pays the runtime guard, part by part, and the floor
under it: how close to a plain run a guard that times each check exactly can get.

Each variant runs in a process of its own (the variants replace parts of the guard,
process-wide) and times the callbacks of `_callback_cost` (a progress meter's
refresh, checked once by jaxtyping, or twice, nested, as Diffrax's under the import
hook) in a run without the guard and under it, interleaved round by round
(`_callback_cost.guard_watching`): the callback's own time and the period from the
start of one run to the next (what tqdm's 0.1 s rule sees).

| variant | what the guard does |
| --- | --- |
| `guard` | what it ships |
| `nothing after` | its hooks write down the checks as shipped; nothing follows them once the callback returned |
| `window only` | its hooks are in place and only forward (marking, on 3.12+, the checks they enter, which the guard's `sys.monitoring` callback reads); nothing after |
| `leanest hooks` | each of its five hooks per check reads the clock and appends it to a list, and marks what `window only` marks; nothing after |
| `after, every 32 runs` | the checks of 32 runs are followed at once, not after each run (and not reported) |

Only `guard` is a guard. `leanest hooks` is the floor of timing each check from
Python-level hooks (jaxtyping's argument binding, `push_shape_memo`, the two stubs
around the body, `pop_shape_memo`): no bookkeeping at all, no identity, no frame.
`after, every 32 runs` keeps every checked frame, and the callback's arguments in
it, alive until then: what it would gain, not something to ship. The variants
replace the guard's private functions: a measurement, not a mode.

    python benchmarks/callback_floor.py [--rounds 9] [--calls 100] [--only VARIANT]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import subprocess
import sys
from typing import Any

VARIANTS = (
    "guard",
    "nothing after",
    "window only",
    "leanest hooks",
    "after, every 32 runs",
)


def _nothing_after(_entries: Any) -> None:
    _entries._replay = lambda window, events: None


def _lean(_entries: Any, record: bool) -> None:
    """Each hook forwards, and reads the clock into the window's list if `record`.
    The first check of a function in a round goes through the shipped
    `push_shape_memo` hook, which puts the stubs and the signature in its closure's
    cells (the guard takes them out when it goes off); `bind` then marks the
    window, and the next checks of it come here. On 3.12+ they also keep the
    window's `entered` (a mark per check open outside its body), which tells the
    guard's `sys.monitoring` callback to leave jaxtyping's checks to the hooks."""
    import time

    _nothing_after(_entries)
    clock = time.perf_counter
    local = _entries._local

    def call(self, /, *args, **kwargs):
        window = local.window
        if window is None:
            return self._typecheck_guard_stub(*args, **kwargs)
        entered = window.entered
        if self._typecheck_guard_returns:  # the body ended
            if record:
                window.events.append(clock())
            if entered and entered[-1] is None:
                entered.pop()
            return self._typecheck_guard_stub(*args, **kwargs)
        out = self._typecheck_guard_stub(*args, **kwargs)
        if entered is not None:  # the body starts
            entered.append(None)
        if record:
            window.events.append(clock())
        return out

    def bind(self, /, *args, **kwargs):
        window = local.window
        if window is not None:
            if record:
                window.events.append(clock())
            window.bound = True
        return self._bind(args, kwargs)

    shipped_push = _entries._make_push

    def make_push(forward):
        first = shipped_push(forward)

        def push(arguments):
            window = local.window
            if window is not None and window.bound is not True:
                return first(arguments)
            if window is not None:
                if record:
                    window.events.append(clock())
                if window.entered is not None:
                    window.entered.append(True)
            return forward(arguments)

        return push

    def make_pop(forward):
        def pop():
            out = forward()
            window = local.window
            if window is not None:
                if record:
                    window.events.append(clock())
                entered = window.entered
                if entered:
                    if entered[-1] is None and len(entered) > 1:
                        entered.pop()  # the body raised, or returned unchecked
                    entered.pop()
            return out

        return pop

    _entries._Stub.__call__ = call
    _entries._Bound.bind = bind
    _entries._make_push = make_push
    _entries._make_pop = make_pop


def _every_32(_entries: Any) -> None:
    replay = _entries._replay
    waiting: list[tuple[Any, Any]] = []

    def leave(window, previous):
        events = window.events
        _entries._local.window = previous
        window.events = window.entered = window.bound = None
        waiting.append((window, events))
        if len(waiting) >= 32:
            for window, events in waiting:
                replay(window, events)
                window.settle()
            waiting.clear()

    _entries.leave = leave


def _child(variant: str, rounds: int, calls: int) -> None:
    import logging

    from _callback_cost import callback_cost, guard_watching

    from typecheck_guard._guard import _entries

    {
        "guard": lambda _: None,
        "nothing after": _nothing_after,
        "window only": lambda entries: _lean(entries, False),
        "leanest hooks": lambda entries: _lean(entries, True),
        "after, every 32 runs": _every_32,
    }[variant](_entries)
    logging.getLogger("typecheck_guard").disabled = True

    def watched(on: bool) -> Any:
        return guard_watching() if on else contextlib.nullcontext()

    rows = callback_cost(watched, rounds, calls)
    print(json.dumps({name: row for name, row in rows.items() if "plain" not in name}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--only", choices=VARIANTS, action="append")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        _child(options.child, options.rounds, options.calls)
        return
    import jax

    print(
        f"Python {platform.python_version()}, jax {jax.__version__}; "
        f"{options.rounds} rounds x {options.calls} runs of the callback, "
        "medians against a run without the guard"
    )
    print(f"{'variant':22} {'callback':18} {'own time':>18} {'period':>18}")
    for variant in options.only or VARIANTS:
        out = subprocess.run(
            [sys.executable, __file__, "--child", variant]
            + ["--rounds", str(options.rounds), "--calls", str(options.calls)],
            check=True,
            capture_output=True,
            text=True,
        )
        rows = json.loads(out.stdout.strip().splitlines()[-1])
        for kind in ("jaxtyped", "jaxtyped, nested"):
            cells = []
            for figure in ("own time", "period"):
                plain, watched, ratio, low, high = rows[f"{figure}, {kind}"]
                shown = f"{ratio:.2f}x" if low > 1.0 or high < 1.0 else "noise"
                cells.append(f"{shown} {(watched - plain) * 1e6:+6.1f}us")
            label = "one check" if kind == "jaxtyped" else "two, nested"
            print(f"{variant:22} {label:18} {cells[0]:>18} {cells[1]:>18}")


if __name__ == "__main__":
    main()
