"""The `unflatten_safe` fix for a jitted call, written on the user's own line.

A fix that rebuilds the jitted call from the names in its description breaks the
program as soon as the user's object is not `jax.jit(fun)` of a plain function:
for `step = jax.jit(functools.partial(train_step, config))`,
`train_step = typecheck_guard.unflatten_safe(jax.jit(train_step))` would drop
`config` and rebind the user's function. So our factory wrappers record where each
jitted object is made (`_jitwrap`), and the fix wraps that very expression, on that
line, in `typecheck_guard.unflatten_safe(...)`; when the line is not one we can
rewrite (a call spread over several lines), it names the line and says what to wrap.
"""

from __future__ import annotations

import linecache
import re
from typing import Final

__all__ = ["unflatten_safe_fix"]

_ASSIGNMENT: Final = re.compile(r"^(?P<target>[A-Za-z_][\w.]*)\s*=\s*(?P<value>.+)$")


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def _code(line: str) -> str:
    """`line` without its trailing comment (a `#` outside quotes)."""
    quote = None
    for i, char in enumerate(line):
        if quote is not None:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#":
            return line[:i].rstrip()
    return line


def _line(made_at: str) -> str:
    path, _, number = made_at.rpartition(":")
    try:
        return linecache.getline(path, int(number)).strip()
    except (ValueError, OSError):
        return ""


def _decorator_above(made_at: str) -> tuple[str, str]:
    """The line of the jit decorator above the `def` at `made_at`: Python 3.10 reports
    a decorator's call on the line of the `def` it decorates (3.11+ on its own line).
    The decorator nearest the `def` that names a transform and its place, else
    `("", made_at)`."""
    path, _, number = made_at.rpartition(":")
    try:
        at = int(number)
    except ValueError:
        return "", made_at
    found = "", made_at
    above = at - 1
    while above > 0:
        line = linecache.getline(path, above).strip()
        if not line.startswith("@"):
            break
        if (
            not found[0]
            and _balanced(line)
            and any(word in line for word in ("jit", "pmap"))
        ):
            found = line, f"{path}:{above}"
        above -= 1
    return found


def unflatten_safe_fix(jitted: str, made_at: str | None) -> str:
    """How to wrap the jitted object described as `jitted` (`jax.jit(mod.step)`),
    made at `made_at` (`train.py:12`, or `None` if we did not see it made), in
    `typecheck_guard.unflatten_safe`: one line of code, or a sentence."""
    if made_at:
        line = _line(made_at)
        if line.startswith(("def ", "async def ")):
            decorator, where = _decorator_above(made_at)
            if decorator:
                line, made_at = decorator, where
        if line.startswith("@") and _balanced(line):
            return f"put @typecheck_guard.unflatten_safe above {line} ({made_at})"
        match = _ASSIGNMENT.match(_code(line))
        if (
            match
            and _balanced(match["value"])
            and "#" not in match["value"]
            # Not `n = 3; step = jax.jit(f)`: two statements.
            and ";" not in match["value"]
        ):
            return (
                f"{match['target']} = typecheck_guard.unflatten_safe("
                f"{match['value']})  ({made_at})"
            )
        return (
            f"wrap the jitted function made at {made_at} in "
            "typecheck_guard.unflatten_safe(...)"
        )
    transform, _, fun = jitted.partition("(")
    short = fun[:-1].rsplit(".", 1)[-1] if fun.endswith(")") else ""
    if transform and short.isidentifier() and "(" not in fun:
        return f"{short} = typecheck_guard.unflatten_safe({transform}({short}))"
    return f"wrap {jitted} in typecheck_guard.unflatten_safe(...) where you make it"
