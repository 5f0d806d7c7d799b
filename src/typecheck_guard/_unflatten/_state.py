"""Where the calling thread stands: the state every guard reads first.

Both marks are in `marks.state`, a list per thread, `[unflattening, building]`:

- `unflattening` (`marks.state[UNFLATTENING]`): the class whose registered unflatten
  JAX is running right now,
  set by the wrapper `install()` registers in place of the class's own unflatten
  (`_adapt/_marked.py`). JAX's registry is the one place that knows a call is an
  unflatten, and only JAX calls what its registry holds (C++ dispatch, `tree_util`,
  `eval_shape`, AOT `lower`, ...): no user call can carry this mark.
- `building` (`marks.state[BUILDING]`): the instance whose construction a guard
  judged an unflatten, while
  its constructor runs: its own `__post_init__` and `__setattr__` are part of that
  unflatten, and nothing else is.
- `block`: inside `with unflatten_safe()` / an `@unflatten_safe` function, a context
  variable, so that a block spanning `await`s stays with its asyncio task.
- `dispatch.depth`: inside `unflatten_safe(jitted_fn)(...)`.

Marks are thread-local and saved and restored around each call, so an unflatten inside
an unflatten (a node inside a node) marks each level, and an exception restores the
state. An unflatten and a constructor are synchronous: no other task runs on the
thread meanwhile, and a thread-local costs ~50 ns where a context variable's set and
reset cost ~350 ns. One list per thread, read once per call, and its two items
written in place, costs half of two thread-local attributes: this runs on every node
JAX unflattens.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

__all__ = [
    "BUILDING",
    "UNFLATTENING",
    "block",
    "clean",
    "dispatch",
    "enter",
    "exit",
    "marks",
]

UNFLATTENING: Final = 0
BUILDING: Final = 1


class _Marks(threading.local):
    def __init__(self) -> None:
        self.state: list[Any] = [None, None]


marks = _Marks()


class _Dispatch(threading.local):
    depth = 0


dispatch = _Dispatch()


class Block(NamedTuple):
    parent: Block | None


block: contextvars.ContextVar[Block | None] = contextvars.ContextVar(
    "typecheck_guard_unflatten_safe", default=None
)


def enter() -> None:
    block.set(Block(block.get()))


def exit() -> None:
    current = block.get()
    block.set(None if current is None else current.parent)


@contextlib.contextmanager
def clean() -> Iterator[None]:
    """No mark, no block, no dispatch: every guard checks, as without us (what
    `typecheck_guard.check` runs its constructions in)."""
    state = marks.state
    saved = (*state, dispatch.depth)
    state[:] = [None, None]
    dispatch.depth = 0
    token = block.set(None)
    try:
        yield
    finally:
        block.reset(token)
        state[UNFLATTENING], state[BUILDING], dispatch.depth = saved
