"""One `sys.monitoring` tool (Python 3.12+) that watches checker code: `PY_START` and
`PY_UNWIND` on all code, `PY_RETURN` switched on per checker code object.

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
from collections.abc import Callable, Iterable
from types import CodeType
from typing import Any

__all__ = ["Monitor"]


class Monitor:
    """A `sys.monitoring` tool id, claimed by `start` and given back by `stop`."""

    def __init__(self, name: str):
        self.name = name
        self.tool: int | None = None
        self._returning: dict[int, CodeType] = {}

    def start(
        self,
        ids: Iterable[int],
        on_start: Callable[[CodeType, int], Any],
        on_exit: Callable[[CodeType, int, Any], Any],
        on_unwind: Callable[[CodeType, int, Any], Any] | None = None,
    ) -> bool:
        """Claim the first free id of `ids` and switch the events on; `False` when
        there is no `sys.monitoring` or every id is taken. `on_exit` gets `PY_RETURN`
        and, without `on_unwind`, `PY_UNWIND` (a frame that raised)."""
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
        events = mon.events
        mon.register_callback(tool, events.PY_START, on_start)
        mon.register_callback(tool, events.PY_RETURN, on_exit)
        mon.register_callback(tool, events.PY_UNWIND, on_unwind or on_exit)
        self.tool = tool
        mon.set_events(tool, events.PY_START | events.PY_UNWIND)
        return True

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

    def stop(self) -> None:
        """Switch every event off, unregister the callbacks and free the id."""
        tool, self.tool = self.tool, None
        if tool is None:
            return
        mon: Any = sys.monitoring  # pyright: ignore[reportAttributeAccessIssue]
        mon.set_events(tool, 0)
        for code in self._returning.values():
            mon.set_local_events(tool, code, 0)
        self._returning.clear()
        for event in (mon.events.PY_START, mon.events.PY_RETURN, mon.events.PY_UNWIND):
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)
