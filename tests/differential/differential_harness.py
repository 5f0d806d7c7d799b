"""What runs inside each interpreter of the differential suite: one process per mode
runs a batch of generated programs (`differential_programs.py`) one after the other
and prints one JSON record per program.

    python -c 'import differential_harness as h; h.main()' MODE BATCH.json

(with this folder on `PYTHONPATH`; `differential_runner.py` does this). A program
is also runnable alone: `PYTHONPATH=tests/differential python prog.py MODE`, where
`prog.py` is a source that `scripts/differential.py --dump DIR` wrote.

Modes:

- `plain`: no plugin (the oracle);
- `install`: `typecheck_guard.install()` before anything else is imported, so every
  class of every program is registered after it;
- `block`: the program's classes are defined, then its `main()` runs inside
  `with typecheck_guard.unflatten_safe():`;
- `wrapper`: every jitted function a program makes through `jit(...)` is
  `typecheck_guard.unflatten_safe(jax.jit(...))`, and every function it wraps with
  `safe(...)` is `typecheck_guard.unflatten_safe(fn)` (the identity elsewhere);
- `nocheck`: no plugin, and the checkers decorate nothing (`beartype`,
  `typeguard.typechecked` and jaxtyping's typechecker are made the identity before
  any program runs): what JAX returns when no check runs, the reference for the
  programs labelled `relaxed` (placeholder trees, the Equinox trade-off).

Counting checks. We count a check each time the interpreter enters code that a
checker generated or owns: a function beartype generated (`<@beartype(...)>`, not
its internal `__beartype_checker_N` nor the generator expressions nested in it),
typeguard 2.13.3's `typechecked` wrapper, and beartype's PEP 557 field-assignment
check. We count from a trace function (`sys.settrace`, and `threading.settrace` for
threads started later), not by wrapping the checker: a counting wrapper is an object
the plugin can see, and the plugin's decision depends on which layers a constructor
has, so the counted class would not be the user's class. Each check is attributed to
the class of its first argument (`self`; or the class a program named with
`attribute(fn, name)`, for a registered function whose first argument is no
instance), to the program's current phase, and to a level, from the first of these
frames found walking up the stack: `nested` under a constructor body of another
object (`__init__`, `__post_init__`, `__new__`, a `default_factory`), `unflatten`
under one of the program's own unflatten functions (those that call `hit(...)`),
else `own`.

A program whose batch entry says `"repeat": 2` runs its `main()` twice in the
same interpreter, and its record holds the values of both runs (the second run's
keys end in `@again`): the second run makes every construction again after the
first run's unflattens, where the plugin has put its guards in place.

Phases are set by the program (`with phase("tree"): ...`): `construct` for the
constructions the program makes itself (eagerly or while JAX traces its function),
`tree` for tree operations outside a jitted call, `aot` for lowering and compiling,
`jit1` for the first call of a jitted function and `jitN` for the calls after it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
import traceback
import types
import warnings
from typing import Any

MODES = ("plain", "install", "block", "wrapper", "nocheck")
RECORD = "@@DIFF "  # the prefix of each record line on stdout
START = "@@START "  # printed before a program runs: the runner knows who died

MODE = "plain"
PHASE = "define"
# The phase an exception that ended the program left (`phase.__exit__`).
RAISED_IN: str | None = None
COUNTS: dict[tuple[str, str, str], int] = {}
HITS: dict[tuple[str, str], int] = {}
# `block`: the verdict cache's hits, per phase and class: a construction whose
# signature passed its check before is not checked again (row 7 of the decision
# table, exact by design), so fewer checks there are no lost check.
CACHED: dict[tuple[str, str], int] = {}
EVENTS: list[str] = []
_TRACING = False  # `main()` counts checks with a trace function
_BODY_CODES: set[Any] = set()
_IS_CHECK: dict[Any, bool] = {}
_CHECK_CODES: set[Any] = set()
_UNFLATTEN_CODES: set[Any] = set()
# Checks counted for a class other than their first argument's (`attribute`), by
# the module and qualname of the function checked.
_ATTRIBUTED: dict[tuple[str, str], str] = {}
# DIFFERENTIAL_SHOW="jit1|C,tree|Outer": print the stack of each such check (stderr).
_SHOW = set(filter(None, os.environ.get("DIFFERENTIAL_SHOW", "").split(",")))


class Skip(Exception):
    """Raised by a program that cannot run on the installed versions (the same in
    every mode)."""


# --- what programs import -----------------------------------------------------------


class phase:  # noqa: N801 -- used as `with phase("tree"):` in program sources
    """Set the phase that checks are counted in, for the `with` block."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.saved = "define"

    def __enter__(self) -> None:
        global PHASE
        self.saved, PHASE = PHASE, self.name

    def __exit__(self, *exc: object) -> None:
        global PHASE, RAISED_IN
        if exc[0] is not None and RAISED_IN is None:
            RAISED_IN = self.name
        PHASE = self.saved


def jit(fn: Any, **kwargs: Any) -> Any:
    """`jax.jit(fn, **kwargs)`; in the `wrapper` mode, wrapped in
    `typecheck_guard.unflatten_safe`."""
    import jax

    jitted = jax.jit(fn, **kwargs)
    if MODE == "wrapper":
        import typecheck_guard

        jitted = typecheck_guard.unflatten_safe(jitted)
    return jitted


def safe(fn: Any) -> Any:
    """`fn`; in the `wrapper` mode, `typecheck_guard.unflatten_safe(fn)` (a
    program's function decorated as a user would: `@safe`)."""
    if MODE == "wrapper":
        import typecheck_guard

        return typecheck_guard.unflatten_safe(fn)
    return fn


def hit(name: str) -> None:
    """Called first thing by a program's own unflatten function: one unflatten of
    `name` in the current phase. The calling function becomes known as an
    unflatten: a check made under it (and not nested in a constructor body) is
    counted at the level `unflatten`."""
    key = (PHASE, name)
    HITS[key] = HITS.get(key, 0) + 1
    _UNFLATTEN_CODES.add(sys._getframe(1).f_code)


def attribute(fn: Any, owner: str) -> None:
    """Count the checks of `fn` for the class named `owner`: a registered flatten or
    unflatten function whose first argument is not the instance (`unflatten(aux,
    children)`) checks on behalf of its class."""
    if isinstance(fn, (staticmethod, classmethod)):
        fn = fn.__func__
    fn = getattr(fn, "__func__", fn)  # a bound method
    _ATTRIBUTED[(fn.__module__, fn.__qualname__)] = owner


def note(text: str) -> None:
    """Something the program wants in its record (the same in every mode)."""
    EVENTS.append(f"{PHASE}: {text}")


def require(condition: bool, why: str) -> None:
    if not condition:
        raise Skip(why)


def track(*classes: type) -> None:
    """Make the constructor bodies of `classes` known (the harness does it for the
    classes a program defines at its top level; a program calls it for classes it
    makes later). A body is the innermost function under a constructor's
    decorators (its `__wrapped__` chain), and each `default_factory`."""
    for cls in classes:
        for klass in getattr(cls, "__mro__", (cls,)):
            if klass is object:
                continue
            for name in ("__init__", "__post_init__", "__new__"):
                fn = klass.__dict__.get(name)
                if isinstance(fn, (staticmethod, classmethod)):
                    fn = fn.__func__
                while getattr(fn, "__wrapped__", None) is not None:
                    fn = fn.__wrapped__  # pyright: ignore[reportOptionalMemberAccess]
                code = getattr(fn, "__code__", None)
                if code is not None and not _is_check(code):
                    _BODY_CODES.add(code)
            for field in getattr(klass, "__dataclass_fields__", {}).values():
                factory = getattr(field, "default_factory", None)
                code = getattr(factory, "__code__", None)
                if code is not None:
                    _BODY_CODES.add(code)


class Raised:
    """What `attempt` returns when its call raised: compared across modes as the
    exception type and who raised it (not the message)."""

    def __init__(self, error: BaseException) -> None:
        described = describe_error(error)
        described.pop("message")
        self.described = described

    def __repr__(self) -> str:
        return f"Raised({self.described})"


def attempt(fn: Any) -> Any:
    """`fn()`, or a `Raised` when it raises: a program checks that a construction
    fails and goes on."""
    try:
        return fn()
    except Exception as e:
        _rearm()
        return Raised(e)


def _rearm() -> None:
    """Put the counting trace function back where an exception took it off (a
    `RecursionError` raised in it turns tracing off for the thread)."""
    if _TRACING and sys.gettrace() is None:
        sys.settrace(_trace)


def jax_version() -> tuple[int, int, int]:
    import jax

    return tuple(int(p) for p in re.findall(r"\d+", jax.__version__)[:3])  # type: ignore[return-value]


def aot_attr(obj: Any, name: str) -> Any:
    """`obj.name` where the installed JAX has it, else a marker (so that a program
    asks for every AOT attribute and still runs on an older JAX)."""
    # `unflatten_safe(jitted).lower(...)` returns JAX's object behind a proxy.
    jax_object = getattr(obj, "__wrapped__", obj)
    if not hasattr(type(jax_object), name) and name not in dir(jax_object):
        return f"<no {type(jax_object).__name__}.{name}>"
    return getattr(obj, name)


# --- counting -----------------------------------------------------------------------


def _typeguard_codes() -> set[Any]:
    try:
        import typeguard
    except ImportError:
        return set()

    def probe(x: int) -> int:
        return x

    checked = typeguard.typechecked(probe)
    code = getattr(checked, "__code__", None)
    return set() if code is None or checked is probe else {code}


def _is_check(code: Any) -> bool:
    known = _IS_CHECK.get(code)
    if known is None:
        filename = code.co_filename
        name = code.co_name
        known = (
            filename.startswith("<@beartype(")
            # Not the code nested in a check (a generator expression over
            # `**kwargs`' values is its own code object, run by the check).
            and not name.startswith(("<", "__beartype"))
        ) or code in _CHECK_CODES
        if not known and name == "check_pep557_dataclass_field":
            known = "beartype" in filename
        _IS_CHECK[code] = known
    return known


def _owner(obj: Any) -> str:
    if obj is None:
        return "?"
    cls = obj if isinstance(obj, type) else type(obj)
    return cls.__qualname__


def _attributed(frame: Any) -> str | None:
    # The function the checker checks (or jaxtyping's stand-in for it, with its
    # name): beartype passes it to its generated wrapper as a default argument,
    # typeguard 2.13.3's wrapper closes over it.
    f_locals = frame.f_locals
    inner = f_locals.get("__beartype_func") or f_locals.get("python_func")
    if inner is None:
        return None
    key = (getattr(inner, "__module__", None), getattr(inner, "__qualname__", None))
    return _ATTRIBUTED.get(key)  # type: ignore[arg-type]


def _count(frame: Any) -> None:
    f_locals = frame.f_locals
    args = f_locals.get("args")
    if isinstance(args, tuple):
        first = args[0] if args else None
    else:
        code = frame.f_code
        first = f_locals.get(code.co_varnames[0]) if code.co_argcount else None
    owner = _attributed(frame) if _ATTRIBUTED else None
    level = "own"
    up = frame.f_back
    while up is not None:
        code = up.f_code
        if code in _BODY_CODES:
            name = code.co_varnames[0] if code.co_argcount else None
            if name is None or up.f_locals.get(name) is not first:
                level = "nested"
                break
        elif code in _UNFLATTEN_CODES:
            level = "unflatten"
            break
        up = up.f_back
    key = (PHASE, owner or _owner(first), level)
    COUNTS[key] = COUNTS.get(key, 0) + 1
    if _SHOW and f"{key[0]}|{key[1]}" in _SHOW:
        sys.stderr.write(f"--- check {key}\n" + "".join(traceback.format_stack(frame)))


def _trace(frame: Any, event: str, arg: Any) -> None:
    if event == "call":
        code = frame.f_code
        known = _IS_CHECK.get(code)
        if known is None:
            known = _is_check(code)
        if known:
            _count(frame)
    return None


# --- digests ------------------------------------------------------------------------

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


def scrub(text: str) -> str:
    """`text` without memory addresses (they differ from process to process)."""
    return _ADDRESS.sub("0x?", text)


def _describe(x: Any, depth: int = 0) -> Any:
    import jax
    import numpy as np

    if depth > 8:
        return ["deep", type(x).__qualname__]
    if isinstance(x, Raised):
        return ["raised", x.described]
    if isinstance(x, (bool, int, float, complex, str, bytes, type(None))):
        return [type(x).__name__, repr(x)]
    if isinstance(x, jax.ShapeDtypeStruct):
        return ["sds", list(x.shape), str(x.dtype), bool(getattr(x, "weak_type", 0))]
    if isinstance(x, (jax.Array, np.ndarray, np.generic)):
        if isinstance(x, jax.Array) and x.is_deleted():
            return ["deleted array", type(x).__name__]
        a = np.asarray(x)
        return [
            "array",
            "jax" if isinstance(x, jax.Array) else type(x).__name__,
            str(a.dtype),
            list(a.shape),
            bool(getattr(x, "weak_type", False)),
            hashlib.sha256(a.tobytes()).hexdigest()[:16],
        ]
    if isinstance(x, (list, tuple)):
        return [type(x).__qualname__, [_describe(v, depth + 1) for v in x]]
    if isinstance(x, dict):
        return [
            type(x).__qualname__,
            [[_describe(k, depth + 1), _describe(v, depth + 1)] for k, v in x.items()],
        ]
    if isinstance(x, (types.FunctionType, types.BuiltinFunctionType, type)):
        return ["callable", getattr(x, "__qualname__", repr(x))]
    # The module too, for a program's own classes: jax 0.10's jit caches can return an
    # instance of another program's class with the same fields (their treedefs
    # compare equal), which must show as a difference, not pass for the same value.
    module = type(x).__module__
    name = type(x).__qualname__
    out: list[Any] = [
        "object",
        f"{module}.{name}" if module.startswith("dprog_") else name,
    ]
    described = False
    if hasattr(x, "__dict__") and not isinstance(x, types.ModuleType):
        try:
            items = list(vars(x).items())
        except TypeError:
            items = []
        out.append([[k, _describe(v, depth + 1)] for k, v in items])
        described = True
    for klass in type(x).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        for name in slots:
            if name in ("__dict__", "__weakref__"):
                continue
            described = True
            try:
                out.append(["slot " + name, _describe(getattr(x, name), depth + 1)])
            except AttributeError:
                out.append(["slot " + name, "<unset>"])
    if not described:
        out.append(scrub(repr(x))[:200])
    return out


def _observe(fn: Any) -> Any:
    """`fn()`, or what it raised (its type: the same in every process)."""
    try:
        return fn()
    except Exception as e:
        return ["raised", f"{type(e).__module__}.{type(e).__qualname__}"]


def one_level_function(name: str) -> Any:
    """`jax.tree_util.flatten_one_level` (or `_with_keys`): public from jax 0.7, in
    `jax._src.tree_util` before (`_with_keys` from jax 0.5); `None` where missing."""
    import jax
    import jax._src.tree_util

    return getattr(jax.tree_util, name, None) or getattr(jax._src.tree_util, name, None)


def _one_level(value: Any, with_keys: bool) -> Any:
    """What `jax.tree_util.flatten_one_level(value)` (or its `_with_keys` form)
    returns: the children's container type, each child, and the auxiliary data."""
    if with_keys:
        fn = one_level_function("flatten_one_level_with_keys")
        if fn is None:
            return "<no flatten_one_level_with_keys>"
        children, aux = fn(value)
        described = [
            [scrub(repr(k)), _describe(v, 6)]
            for k, v in children  # (key, child) pairs
        ]
    else:
        children, aux = one_level_function("flatten_one_level")(value)
        described = [_describe(v, 6) for v in children]
    return [type(children).__qualname__, described, _describe(aux, 6)]


def _node_data(value: Any) -> Any:
    import jax

    treedef = jax.tree.structure(value)
    data = treedef.node_data() if hasattr(treedef, "node_data") else "<no node_data>"
    return _describe(data, 6)


def _pickled(value: Any) -> str:
    """The bytes `pickle.dumps(value)` writes (a fixed protocol), hashed: a class
    pickles by reference, so they are the same in every process."""
    import pickle

    return hashlib.sha256(pickle.dumps(value, protocol=4)).hexdigest()[:16]


# The types whose extra observables (repr, pickle bytes, one level of flattening)
# say nothing their description does not.
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def digest(value: Any) -> Any:
    """A JSON description of `value`: its type's qualname, `vars()`/slot values (in
    order), treedef, keypaths, and each leaf's type, dtype, shape and bytes; for an
    object, also its `repr`, the hash of its pickle's bytes, what
    `flatten_one_level` (and `_with_keys`) returns (the children's container type
    and the auxiliary data), and `treedef.node_data()`."""
    import jax

    entry: dict[str, Any] = {"value": _describe(value)}
    try:
        with_path, treedef = jax.tree_util.tree_flatten_with_path(value)
        entry["treedef"] = scrub(str(treedef))
        entry["paths"] = [jax.tree_util.keystr(p) for p, _ in with_path]
        entry["leaves"] = [_describe(leaf) for _, leaf in with_path]
    except Exception as e:  # a value JAX can't flatten: say so, in every mode alike
        entry["treedef"] = f"<unflattenable: {type(e).__name__}>"
    if not isinstance(value, (_PLAIN, Raised, jax.Array)):
        entry["repr"] = _observe(lambda: scrub(repr(value))[:600])
        entry["pickle"] = _observe(lambda: _pickled(value))
        entry["one_level"] = _observe(lambda: _one_level(value, False))
        entry["one_level_keys"] = _observe(lambda: _one_level(value, True))
        entry["node_data"] = _observe(lambda: _node_data(value))
    return entry


def _raiser(tb: Any) -> str:
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    if last is None:
        return "?"
    frame = last.tb_frame
    name = frame.f_globals.get("__name__")
    filename = frame.f_code.co_filename
    if filename.startswith("<@beartype("):
        return "beartype"
    if not isinstance(name, str):
        return filename if filename.startswith("<") else "?"
    if name.startswith("dprog_"):
        return "program"
    return name.split(".")[0]


def describe_error(e: BaseException) -> dict[str, Any]:
    """The exception type, the package that raised it (the innermost frame), and the
    same for its cause: for a jaxtyping error, the checker under it."""
    out: dict[str, Any] = {
        "error": f"{type(e).__module__}.{type(e).__qualname__}",
        "raiser": _raiser(e.__traceback__),
        "message": scrub(str(e))[:400],
    }
    cause = e.__cause__
    if cause is not None:
        out["cause"] = f"{type(cause).__module__}.{type(cause).__qualname__}"
        out["cause_raiser"] = _raiser(cause.__traceback__)
    return out


# --- running a batch ----------------------------------------------------------------


def _identity(fn: Any = None, **_: Any) -> Any:
    if fn is None:
        return _identity
    return fn


def _switch_checks_off() -> None:
    """`nocheck`: the checkers decorate nothing, from now on."""
    import beartype
    import jaxtyping

    beartype.beartype = _identity  # type: ignore[assignment]
    try:
        import typeguard

        typeguard.typechecked = _identity  # type: ignore[assignment]
    except ImportError:
        pass
    real = jaxtyping.jaxtyped

    def jaxtyped(fn: Any = None, **kwargs: Any) -> Any:
        if "typechecker" in kwargs and kwargs["typechecker"] is not None:
            kwargs["typechecker"] = _identity
        if fn is None:
            return real(**kwargs)
        return real(fn, **kwargs)

    jaxtyping.jaxtyped = jaxtyped  # type: ignore[assignment]


def _block_until_ready(value: Any) -> None:
    # Not `jax.block_until_ready(value)`: that rebuilds the tree (an unflatten).
    import jax

    try:
        leaves = jax.tree.leaves(value)
    except Exception:
        return
    for leaf in leaves:
        ready = getattr(leaf, "block_until_ready", None)
        if ready is not None and not getattr(leaf, "is_deleted", lambda: False)():
            ready()


def _reset_switches() -> None:
    import jaxtyping

    jaxtyping.config.update("jaxtyping_disable", False)


def _main(module: Any, repeat: int) -> Any:
    """The program's `main()`, `repeat` times; the values of the runs after the
    first are returned under keys ending in `@again` (`@again2`, ...)."""
    value = module.main()
    for i in range(1, repeat):
        again = module.main()
        if isinstance(value, dict) and isinstance(again, dict):
            suffix = "@again" + (str(i) if i > 1 else "")
            value = {**value, **{k + suffix: v for k, v in again.items()}}
    return value


def run_program(name: str, source: str, repeat: int = 1) -> dict[str, Any]:
    """Define and run one program (its `main()` `repeat` times); its record."""
    global PHASE, RAISED_IN
    COUNTS.clear()
    HITS.clear()
    _ATTRIBUTED.clear()
    CACHED.clear()
    EVENTS.clear()
    PHASE = "define"
    RAISED_IN = None
    _rearm()
    modname = "dprog_" + re.sub(r"\W", "_", name)
    module = types.ModuleType(modname)
    module.__file__ = f"<{name}>"
    sys.modules[modname] = module
    record: dict[str, Any] = {"name": name, "mode": MODE}
    started = time.perf_counter()
    value: Any = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(compile(source, f"<{name}>", "exec"), module.__dict__)
            track(
                *(
                    v
                    for v in list(module.__dict__.values())
                    if isinstance(v, type) and v.__module__ == modname
                )
            )
            if MODE == "block":
                import typecheck_guard

                with typecheck_guard.unflatten_safe():
                    value = _main(module, repeat)
            else:
                value = _main(module, repeat)
            PHASE = "digest"
            _block_until_ready(value)
            record["outcome"] = "ok"
        except Skip as e:
            record["outcome"] = {"skipped": str(e)}
        except Exception as e:
            record["outcome"] = describe_error(e)
            record["raised_in"] = RAISED_IN or PHASE
            record["traceback"] = scrub(
                "".join(traceback.format_exception(type(e), e, e.__traceback__))
            )[-3000:]
            value = None
        finally:
            PHASE = "digest"
            _reset_switches()
        if value is not None:
            try:
                record["values"] = {k: digest(v) for k, v in value.items()}
            except Exception as e:
                record["values"] = {"<digest>": describe_error(e)}
    record["counts"] = {f"{p}|{c}|{lv}": n for (p, c, lv), n in sorted(COUNTS.items())}
    record["hits"] = {f"{p}|{c}": n for (p, c), n in sorted(HITS.items())}
    record["cached"] = {f"{p}|{c}": n for (p, c), n in sorted(CACHED.items())}
    if MODE in ("install", "block", "wrapper"):
        # What the plugin says still runs a check on unflatten, and why: a class
        # whose check sits under a decorator that is not a typechecker can't be
        # covered without skipping that decorator, and must be listed.
        import typecheck_guard

        record["listed"] = {
            r.cls.__qualname__: r.reason
            for r in typecheck_guard.unadapted()
            if r.cls.__module__ == modname
        }
    record["events"] = list(EVENTS)
    record["warnings"] = sorted({w.category.__name__ for w in caught})
    record["seconds"] = round(time.perf_counter() - started, 3)
    del sys.modules[modname]
    return record


def main(argv: list[str] | None = None) -> None:
    global MODE, _TRACING
    argv = sys.argv[1:] if argv is None else argv
    MODE, path = argv[0], argv[1]
    if MODE not in MODES:
        sys.exit(f"unknown mode {MODE!r}: one of {', '.join(MODES)}")
    if MODE == "install":
        import typecheck_guard

        typecheck_guard.install()
    # Everything the programs use, imported before the first of them runs.
    import beartype  # noqa: F401
    import chex  # noqa: F401
    import flax.struct  # noqa: F401
    import jax
    import jaxtyping  # noqa: F401

    try:
        import typeguard  # noqa: F401
    except ImportError:
        pass
    del jax
    if MODE == "nocheck":
        _switch_checks_off()
    if MODE in ("block", "wrapper"):
        _count_verdict_hits()
    _CHECK_CODES.update(_typeguard_codes())
    with open(path) as f:
        batch = json.load(f)
    _TRACING = True
    sys.settrace(_trace)
    threading.settrace(_trace)
    out = sys.stdout
    for program in batch:
        out.write(START + program["name"] + "\n")
        out.flush()
        record = run_program(
            program["name"], program["source"], program.get("repeat", 1)
        )
        out.write(RECORD + json.dumps(record) + "\n")
        out.flush()
    sys.settrace(None)
    threading.settrace(None)  # type: ignore[arg-type]
    out.flush()
    sys.stderr.flush()
    # Every record is out: nothing is left for the interpreter's finalization to
    # do but tear down thousands of programs' executables.
    os._exit(0)


def _count_verdict_hits() -> None:
    from typecheck_guard._unflatten import _verdict

    contains = _verdict.VerdictCache.__contains__

    def counted(self: Any, key: Any) -> bool:
        hit = contains(self, key)
        if hit:
            owner = sys._getframe(1).f_locals.get("owner")
            name = getattr(owner, "__qualname__", "?")
            CACHED[(PHASE, name)] = CACHED.get((PHASE, name), 0) + 1
        return hit

    _verdict.VerdictCache.__contains__ = counted  # type: ignore[method-assign]


def run_standalone(path: str) -> None:
    """The second line of every program source: `python prog.py MODE` runs the
    program alone, as a batch of one in a fresh interpreter (so that `install()`
    comes before every import, as in a batch), and prints its record."""
    import tempfile

    mode = sys.argv[1] if len(sys.argv) > 1 else "plain"
    with open(path) as f:
        source = f.read()
    name = os.path.splitext(os.path.basename(path))[0]
    # `DIFFERENTIAL_REPEAT=2`: run `main()` twice, as `--again` does.
    repeat = int(os.environ.get("DIFFERENTIAL_REPEAT", "1"))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump([{"name": name, "source": source, "repeat": repeat}], f)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    command = "import differential_harness as h; h.main()"
    os.execve(sys.executable, [sys.executable, "-c", command, mode, f.name], env)


__all__ = [
    "Raised",
    "Skip",
    "attempt",
    "aot_attr",
    "attribute",
    "hit",
    "jax_version",
    "jit",
    "note",
    "one_level_function",
    "phase",
    "require",
    "run_standalone",
    "safe",
    "track",
]
