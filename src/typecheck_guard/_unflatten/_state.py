"""Where the calling thread stands: the state the guards read.

- `building` (`marks.state[BUILDING]`, a list per thread): the instance whose
  construction a guard judged an unflatten, while its constructor runs: its own
  `__post_init__` and `__setattr__` (and a base class's `__init__`) are part of that
  unflatten, and nothing else is.
- `block`: inside `with unflatten_safe()` / an `@unflatten_safe` function, a context
  variable, so that a block spanning `await`s stays with its asyncio task, naming
  the frame it covers: a `with` block in a generator's body leaves the variable set
  in its caller while the generator is suspended, and the caller is not in it.
- `dispatch.depth`: inside `unflatten_safe(jitted_fn)(...)`.

"JAX is unflattening class C" (`install()`'s evidence) is no state of ours: it is the
frame of the wrapper `install()` registers in place of C's unflatten
(`_adapt/_marked.py`), on this thread's stack, which the guards look for
(`_guards.py`, row 1). Only JAX calls what its registry holds, and a frame can't
outlive its call, be left set by an exception or leak into another thread.

`building` is thread-local and saved and restored around each call, so a
construction inside a construction names each level, and an exception restores the
state. A constructor is synchronous: no other task runs on the thread meanwhile, and
a thread-local costs ~50 ns where a context variable's set and reset cost ~350 ns.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any, Final, NamedTuple

__all__ = [
    "BUILDING",
    "block",
    "clean",
    "dispatch",
    "enter",
    "exit",
    "marks",
]

BUILDING: Final = 0


class _Marks(threading.local):
    def __init__(self) -> None:
        self.state: list[Any] = [None]

    def __reduce__(self) -> str:
        # The guards we put on a class hold this object. A class defined in
        # `__main__` is pickled by value by cloudpickle (Ray, Dask, joblib), its
        # guards with it: they must find the receiving process's marks, by name.
        return "marks"


marks = _Marks()


class _Dispatch(threading.local):
    depth = 0

    def __reduce__(self) -> str:
        return "dispatch"


dispatch = _Dispatch()


class Block(NamedTuple):
    parent: Block | None
    frame: FrameType
    """The frame whose code the block covers (a `with` statement's, or our
    wrapper's): a context variable set in a generator's body stays set in its
    caller while the generator is suspended, and the caller's code is not in the
    block. `inside` asks whether this frame is on the stack."""


block: contextvars.ContextVar[Block | None] = contextvars.ContextVar(
    "typecheck_guard_unflatten_safe", default=None
)


def enter(depth: int = 1) -> None:
    """Enter a block covering the code of the frame `depth` levels above this call
    (1: the caller's own code)."""
    block.set(Block(block.get(), sys._getframe(depth)))


def inside(current: Block, frame: FrameType | None) -> bool:
    """Whether code running at `frame` is in `current` (or a block it is nested
    in): one of their frames is on the stack at or above `frame`."""
    frames = set()
    b: Block | None = current
    while b is not None:
        frames.add(id(b.frame))
        b = b.parent
    while frame is not None:
        if id(frame) in frames:
            return True
        frame = frame.f_back
    return False


def exit() -> None:
    current = block.get()
    block.set(None if current is None else current.parent)


@contextlib.contextmanager
def clean() -> Iterator[None]:
    """Nothing being built, no block, no dispatch: every guard checks, as without us
    (what `typecheck_guard.check` runs its constructions in; it calls the plain
    unflatten, not `install()`'s wrapper)."""
    state = marks.state
    saved = (list(state), dispatch.depth)
    state[:] = [None]
    dispatch.depth = 0
    token = block.set(None)
    try:
        yield
    finally:
        block.reset(token)
        state[:], dispatch.depth = saved
