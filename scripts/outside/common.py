"""Shared harness for the round-1 differential programs.

Import this module FIRST in every program.  The mode comes from the env var
TG_MODE (or argv[1] if it is one of the modes):

  plain    nothing from typecheck_guard
  install  typecheck_guard.install() before jax is imported
  block    the program's main() runs inside `with typecheck_guard.unflatten_safe():`
  wrap     common.jit(f) is typecheck_guard.unflatten_safe(jax.jit(f))

Programs print canonical lines with show()/out().  Lines starting with "COUNT"
are check counts at constructions; the runner compares them in every mode except
`block` (where the documented verdict cache, row 7, may legitimately lower them).
"""
import os
import re
import sys
import functools
import contextlib
import traceback

MODES = ("plain", "install", "block", "wrap", "guard")
MODE = os.environ.get("TG_MODE", "plain")
if len(sys.argv) > 1 and sys.argv[1] in MODES:
    MODE = sys.argv[1]

if MODE == "install":
    import typecheck_guard

    typecheck_guard.install()
if MODE == "guard":
    import typecheck_guard

    typecheck_guard.runtime_checks("log")

import warnings

warnings.simplefilter("ignore")

import jax  # noqa: E402

jax.config.update("jax_platforms", "cpu")

CHECKS = {"n": 0}


def _count():
    CHECKS["n"] += 1


def counting(checker):
    """A typechecker for jaxtyped(typechecker=...) that counts each check."""

    def deco(fn):
        checked = checker(fn)

        @functools.wraps(checked)
        def counted(*args, **kwargs):
            _count()
            return checked(*args, **kwargs)

        return counted

    return deco


from beartype import beartype  # noqa: E402

cbeartype = counting(beartype)
try:
    from typeguard import typechecked

    ctypechecked = counting(typechecked)
except Exception:  # pragma: no cover
    typechecked = ctypechecked = None


class _CountMeta(type):
    def __instancecheck__(cls, obj):
        _count()
        return isinstance(obj, cls.__target__)


def Counted(target, name=None):
    """An annotation that counts every isinstance check made on it (works for
    @beartype / @typechecked directly on a class, where a counting wrapper would
    hide the checker)."""
    return _CountMeta(name or ("Counted_" + getattr(target, "__name__", "x")), (), {"__target__": target})


_ADDR = re.compile(r"0x[0-9a-fA-F]+")
_TG = re.compile(r"typecheck_guard[\w.]*")


def canon(x):
    s = _ADDR.sub("0xADDR", x if isinstance(x, str) else repr(x))
    return s.replace("\n", "\\n")


def out(label, value=""):
    print(f"{label}: {canon(value)}", flush=True)


def exc_text(e):
    msg = str(e).strip().splitlines()
    first = msg[0] if msg else ""
    return f"EXC {type(e).__name__}: {canon(first)[:300]}"


def show(label, thunk, count=True):
    """Run thunk; print its result (or exception) and how many checks it ran."""
    before = CHECKS["n"]
    try:
        r = thunk()
        res = "OK " + canon(r if isinstance(r, str) else _val(r))
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        res = exc_text(e)
    print(f"{label}: {res}", flush=True)
    if count:
        print(f"COUNT {label}: {CHECKS['n'] - before}", flush=True)
    return res


def _val(r):
    import numpy as np

    try:
        leaves, treedef = jax.tree_util.tree_flatten(r)
        if leaves and all(hasattr(l, "shape") for l in leaves):
            return f"{type(r).__name__} leaves={[np.asarray(l).tolist() for l in leaves]}"
    except Exception:
        pass
    return repr(r)


def checks():
    return CHECKS["n"]


def jit(f, **kw):
    j = jax.jit(f, **kw)
    if MODE == "wrap":
        import typecheck_guard

        return typecheck_guard.unflatten_safe(j)
    return j


def region():
    if MODE == "block":
        import typecheck_guard

        return typecheck_guard.unflatten_safe()
    return contextlib.nullcontext()


def main(fn):
    """Decorator: run fn now, inside region() (block mode)."""
    with region():
        fn()
    return fn
