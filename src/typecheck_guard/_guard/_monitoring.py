"""One `sys.monitoring` tool (Python 3.12+) that watches checker code: `PY_START` and
`PY_UNWIND` on all code (once it `listen`s), `PY_RETURN` switched on per checker
code object.

The runtime guard (`_detect`) and the profiler (`_profile`) each hold one, under
different tool ids, so the two compose. Their `PY_START` callbacks answer `DISABLE`
for code that is no checker, so that code never calls them again.

`PY_RETURN` is switched on per code object, and we remember which by identity: code
objects compare by value, and beartype's wrappers of two functions with one
signature are equal code objects, yet each needs its own events (a check whose
return event never comes never ends).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterable
from types import CodeType
from typing import Any, Final

__all__ = ["Monitor"]

# How many code objects a tool remembers answering `DISABLE` for before it starts
# over (`Monitor.disable`).
_MAX_DISABLED: Final = 100_000
# The tool ids we have claimed in this process.
_claimed: set[int] = set()


class Monitor:
    """A `sys.monitoring` tool id, claimed by `start` and given back by `stop`."""

    def __init__(self, name: str):
        self.name = name
        self.tool: int | None = None
        # Whether `PY_START` and `PY_UNWIND` are on for all code.
        self.listening = False
        self._returning: dict[int, CodeType] = {}
        # The code objects whose `PY_START` we answered `DISABLE`, by id, each with
        # a weak reference to it: an id is reused once its code object is gone, and
        # taking a new code object for a disabled one cost a needless
        # `restart_events()` (20 in Equinox's `tests/test_jit.py`, every one of them
        # such a mistake; each makes all code re-instrument itself and call us
        # again: 4.5% of that suite's CPU under the profiler).
        self._disabled: dict[int, Any] = {}

    def start(
        self,
        ids: Iterable[int],
        on_start: Callable[[CodeType, int], Any],
        on_exit: Callable[[CodeType, int, Any], Any],
        on_unwind: Callable[[CodeType, int, Any], Any] | None = None,
        *,
        listen: bool = True,
    ) -> bool:
        """Claim the first free id of `ids` and switch the events on (with
        `listen=False`: later, at `listen()`); `False` when there is no
        `sys.monitoring` or every id is taken. `on_exit` gets `PY_RETURN` and,
        without `on_unwind`, `PY_UNWIND` (a frame that raised)."""
        mon: Any = getattr(sys, "monitoring", None)
        if mon is None or self.tool is not None:
            return self.tool is not None
        for tool in ids:
            try:
                mon.use_tool_id(tool, self.name)
            except ValueError:  # taken by another tool
                continue
            break
        else:
            return False
        if tool in _claimed:
            # What this id's last holder answered `DISABLE` for stays off for this
            # id, in CPython, until events restart (each code object keeps its own
            # record): a body disabled in an earlier `profile()` would never be seen
            # to start in this one, and its time would count as its check's.
            mon.restart_events()
        _claimed.add(tool)
        events = mon.events
        mon.register_callback(tool, events.PY_START, on_start)
        mon.register_callback(tool, events.PY_RETURN, on_exit)
        mon.register_callback(tool, events.PY_UNWIND, on_unwind or on_exit)
        self.tool = tool
        if listen:
            self.listen()
        return True

    def listen(self) -> None:
        """Switch `PY_START` and `PY_UNWIND` on for all code (once)."""
        tool = self.tool
        if self.listening or tool is None:
            return
        mon: Any = sys.monitoring  # pyright: ignore[reportAttributeAccessIssue]
        try:
            mon.set_events(tool, mon.events.PY_START | mon.events.PY_UNWIND)
        except ValueError:  # stopped meanwhile
            return
        self.listening = True

    def instrument(self, code: CodeType) -> bool:
        """Switch `PY_RETURN` on for this very code object; `True` if it already was.
        `False` also when the tool was stopped meanwhile."""
        if self._returning.get(id(code)) is code:
            return True
        tool = self.tool
        if tool is None:
            return False
        mon: Any = sys.monitoring  # pyright: ignore[reportAttributeAccessIssue]
        try:
            mon.set_local_events(tool, code, mon.events.PY_RETURN)
        except (TypeError, ValueError):  # stopped meanwhile
            return False
        self._returning[id(code)] = code
        return False

    def disable(self, code: CodeType) -> Any:
        """What `PY_START` answers for code that is no checker: `DISABLE`, which
        switches this code's events off until `restart`; remembered for
        `restart_for`."""
        disabled = self._disabled
        if len(disabled) >= _MAX_DISABLED:
            # Forgetting one would lose a restart a body needs: start over instead.
            self.restart()
        try:
            disabled[id(code)] = weakref.ref(code)
        except TypeError:  # pragma: no cover - code objects take weak references
            pass
        return sys.monitoring.DISABLE  # pyright: ignore[reportAttributeAccessIssue]

    def restart_for(self, code: CodeType) -> None:
        """`code` is now followed (a checked function's body): if it answered
        `DISABLE` before, switch disabled events back on (all code's: CPython has
        no way to switch one code object's back on)."""
        ref = self._disabled.get(id(code))
        if ref is not None and ref() is code:
            self.restart()

    def restart(self) -> None:
        """`sys.monitoring.restart_events()`: every disabled event is on again."""
        self._disabled.clear()
        sys.monitoring.restart_events()  # pyright: ignore[reportAttributeAccessIssue]

    def stop(self) -> None:
        """Switch every event off, unregister the callbacks and free the id."""
        tool, self.tool = self.tool, None
        self.listening = False
        if tool is None:
            return
        mon: Any = sys.monitoring  # pyright: ignore[reportAttributeAccessIssue]
        mon.set_events(tool, 0)
        for code in self._returning.values():
            mon.set_local_events(tool, code, 0)
        self._returning.clear()
        self._disabled.clear()
        for event in (mon.events.PY_START, mon.events.PY_RETURN, mon.events.PY_UNWIND):
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)
