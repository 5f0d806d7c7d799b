"""Ctrl-C, taken where it is safe to stop.

Python raises `KeyboardInterrupt` at whatever bytecode runs when SIGINT arrives:
in `bench`, that is often JAX's own Python code while it traces or compiles, or a
callback from XLA's C++, and an interrupt there can leave JAX's state torn (the
process then dies of a segfault at exit, which we saw twice in fourteen tries).
So, while a command measures or imports, the first Ctrl-C only sets a flag and says
so; the command looks at the flag at its safe points (between two timed blocks,
between two modules), raises `KeyboardInterrupt` there itself, and reports what it
has. A second Ctrl-C raises at once, for a step that would take too long to reach
its safe point (a module that hangs at import).

The handler is installed only in the main thread, and only when SIGINT has
Python's default handler: a program that handles SIGINT itself keeps its own.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["checkpoint", "deferred"]

_pending = False
_command = ""


def _handler(signum: int, frame: Any) -> None:
    global _pending
    if _pending:
        _pending = False
        raise KeyboardInterrupt
    _pending = True
    newline = "\n" if sys.stderr.isatty() else ""
    sys.stderr.write(
        f"{newline}{_command}: interrupted, stopping at the next safe point (Ctrl-C "
        "again to stop now)\n"
    )
    sys.stderr.flush()


def checkpoint() -> None:
    """A safe point: raise `KeyboardInterrupt` if Ctrl-C was pressed since the last
    one raised. What catches it may go on (`scan` lists the classes of the modules
    it imported): the next Ctrl-C is taken at a safe point again."""
    global _pending
    if _pending:
        _pending = False
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred(command: str) -> Iterator[None]:
    """While the block runs, Ctrl-C is taken at the block's `checkpoint()`s (one
    after the last of them is dropped: end the block with one where that matters).
    `command` names us in the message."""
    global _pending, _command
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    _pending, _command = False, command
    signal.signal(signal.SIGINT, _handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _pending = False
