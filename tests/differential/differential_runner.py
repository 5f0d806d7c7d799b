"""The differential suite's runner and its comparison: each mode runs a batch of
generated programs (`differential_programs.py`) in one interpreter
(`differential_harness.py`), and every plugin mode's record of a program is compared
with the `plain` record of the same program (no plugin: the oracle).

What each mode must show, program by program (P: plain, Q: the mode, N: `nocheck`,
where no checker checks anything):

| compared | `install` | `block` | `wrapper` |
|---|---|---|---|
| outcome (`ok`, or the exception type, the package that raised it, and the same for its cause) | = P | = P | = P |
| values returned (type qualname, `vars()`/slots in order, treedef, keypaths, leaves' dtype/shape/bytes; for objects `repr`, pickle bytes, `flatten_one_level` (container type, children, aux, keys), `node_data()`; raised-or-not for each `attempt`) | = P | = P | = P |
| side effects (`note(...)` calls, in order) | = P (more in `jit1`: `extra checks`) | = P (idem) | = P (idem) |
| checks in `define` and `construct` (the program's own constructions, eager or traced), per class | = P | = P | = P |
| *nested* checks (made while another object's constructor body runs) in `tree`, `aot`, `jit1`, `jitN`, per class | = P | = P | = P |
| unflatten checks of a registered class in `tree`, `aot` | 0 | 0 | = P |
| unflatten checks of a registered class in `jit1` | 0 | 0 | 0 |
| unflatten checks of a registered class in `jitN` | 0 | <= P (row 7: informational) | 0 |
| any other check | = P | = P | = P |
| any of the above where the verdict cache served that class in that phase | | <= P (row 7: informational) | <= P (row 7) |
| unflatten checks of a class whose check sits under a decorator that is not a typechecker | = P, and `unadapted()` lists it (`blocked`) | = P, listed | = P, listed |

Levels. A check is *nested* when a constructor body (`__init__`, `__post_init__`,
`__new__`, a `default_factory`) of another object is running further up the stack;
else *unflatten* when one of the program's own unflatten functions is (a custom
node's); else *own*. The unflatten checks of a registered class are its unflatten
level for a custom node, and its own level for a dataclass (whose unflatten is
JAX's `cls(**fields)`: in the operation phases, the programs construct nothing
themselves). A check of another class made by an unflatten (a factory that builds
another class) is not one of them: checked.

Where a row says 0, a mode "covers" the class: more than 0 (up to P) is `not
covered`, a check that still runs on unflatten (the plugin's promise of speed, not
of exactness; `row 7` in `jitN` for `block`, the documented verdict cache), and
more than P is a `count mismatch`. Every other row is exactness: a difference is a
`lost check` (P raised a check, Q did not), a `crash` (Q raised where P did not, or
died), a `different error`, a `changed value` or a `count mismatch` (fewer: a check
skipped that was no unflatten's). More nested checks than P is `extra checks`,
reported and not failed: an unflatten of placeholders that raised in P (JAX's own,
such as the key paths `jit` unflattens while tracing and catches) ran its
constructor body with the plugin.

The documented exceptions, by label (`Program.relaxed`), apply only where P raised:

- `placeholder` (trees of `None`, `ShapeDtypeStruct`, AOT `lower`/`compile`/
  `in_avals`/`out_info`/..., `eval_shape`): a typechecked constructor rejects the
  placeholder leaves, so P raises. Where Q covers the operation, Q must be N (the
  operation runs and returns what JAX returns without checks); Q raising as P did is
  `not covered`, anything else is a `crash` or a `changed value`.
- `tradeoff` (`jax.tree.map(lambda x: x.astype(jnp.int32), state)`, eager or in a
  jitted step): P raises; Q may be N (the unflatten skipped: Equinox's trade-off,
  by design) or P. Nothing else.

Only the checks are compared after a program raised in both (up to the raise).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterable, Sequence
from typing import Any

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from differential_programs import Program  # noqa: E402

PLUGIN_MODES = ("install", "block", "wrapper")
CHECKERS = ("beartype", "typeguard", "jaxtyping")
# Phases whose own checks a mode covers: (covered, informational).
COVERS: dict[str, tuple[set[str], set[str]]] = {
    "install": ({"tree", "aot", "jit1", "jitN"}, set()),
    "block": ({"tree", "aot", "jit1"}, {"jitN"}),
    "wrapper": ({"aot", "jit1", "jitN"}, set()),
    # `--selfcheck`: plain against plain, where everything must be equal.
    "plain": (set(), set()),
}
EXACT_PHASES = {"define", "construct"}
LEVELS = ("own", "unflatten", "nested")
# A program that prints nothing for this long is killed (and the rest run on).
PROGRAM_TIMEOUT = 180.0
EXACT_KINDS = (
    "lost check",
    "crash",
    "different error",
    "changed value",
    "count mismatch",
    "died",
)


def modes_for(program: Program) -> tuple[str, ...]:
    """The modes `program` runs in: `wrapper` only where it makes a jitted function,
    `nocheck` only where it is relaxed."""
    modes = ["plain", "install", "block"]
    if program.jit:
        modes.append("wrapper")
    if program.relaxed:
        modes.append("nocheck")
    return tuple(modes)


# --- running ----------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(HERE), env.get("PYTHONPATH")) if p
    )
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["JAX_TRACEBACK_FILTERING"] = "off"
    env["PYTHONHASHSEED"] = "0"
    return env


def _run_once(
    mode: str, programs: Sequence[Program], log: list[str]
) -> tuple[dict[str, dict[str, Any]], str | None, str]:
    """Run `programs` in one interpreter; the records it printed, the program it
    was running when it died (or None), and its stderr's tail."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(
            [
                {"name": p.name, "source": p.source, "repeat": p.repeat}
                for p in programs
            ],
            f,
        )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import differential_harness as h; h.main()",
            mode,
            f.name,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    records: dict[str, dict[str, Any]] = {}
    current: list[str | None] = [None]
    err: list[str] = []
    drain = threading.Thread(target=lambda: err.append(proc.stderr.read()))  # type: ignore[union-attr]
    drain.start()
    alive = threading.Event()
    finished = threading.Event()

    def watchdog() -> None:
        while not finished.is_set():
            if alive.wait(PROGRAM_TIMEOUT):
                alive.clear()
                continue
            if finished.is_set() or proc.poll() is not None:
                return
            log.append(
                f"{mode}: {current[0]} printed nothing for {PROGRAM_TIMEOUT:.0f} s: killed"
            )
            proc.kill()
            return

    dog = threading.Thread(target=watchdog, daemon=True)
    dog.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        alive.set()
        if line.startswith("@@START "):
            current[0] = line[len("@@START ") :].strip()
        elif line.startswith("@@DIFF "):
            record = json.loads(line[len("@@DIFF ") :])
            records[record["name"]] = record
            current[0] = None
    finished.set()
    alive.set()
    proc.wait()
    drain.join()
    proc.stdout.close()
    proc.stderr.close()  # type: ignore[union-attr]
    os.unlink(f.name)
    stderr = "".join(err)[-3000:]
    if proc.returncode != 0 and current[0] is None:
        # It died between programs (or before the first): blame the next one.
        pending = [p.name for p in programs if p.name not in records]
        current[0] = pending[0] if pending else None
    return records, (current[0] if proc.returncode != 0 else None), stderr


def run_mode(
    mode: str, programs: Sequence[Program], log: list[str] | None = None
) -> dict[str, dict[str, Any]]:
    """Every program's record in `mode`: one interpreter for the batch, and a new
    one for the programs after any that took its interpreter down."""
    log = [] if log is None else log
    records: dict[str, dict[str, Any]] = {}
    todo = list(programs)
    while todo:
        got, died, stderr = _run_once(mode, todo, log)
        records.update(got)
        if died is None:
            missing = [p.name for p in todo if p.name not in records]
            if missing:  # exited 0 without running them: say so, once each
                for name in missing:
                    records[name] = _died(name, mode, "never ran", stderr)
            break
        records[died] = _died(died, mode, "the interpreter died", stderr)
        log.append(f"{mode}: {died} took the interpreter down; rerunning the rest")
        todo = [p for p in todo if p.name not in records]
    return records


def _died(name: str, mode: str, why: str, stderr: str) -> dict[str, Any]:
    return {
        "name": name,
        "mode": mode,
        "outcome": {"error": "died", "raiser": why, "message": stderr[-1500:]},
        "counts": {},
        "hits": {},
        "events": [],
    }


def run_all(
    programs: Sequence[Program], modes: Iterable[str] | None = None, parallel: int = 2
) -> tuple[dict[str, dict[str, dict[str, Any]]], list[str]]:
    """{mode: {program: record}} for every mode each program runs in, `parallel`
    interpreters at a time; and a log of interpreters that died."""
    wanted = set(modes) if modes is not None else None
    by_mode: dict[str, list[Program]] = {}
    for program in programs:
        for mode in modes_for(program):
            if wanted is None or mode in wanted or mode in ("plain", "nocheck"):
                by_mode.setdefault(mode, []).append(program)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    log: list[str] = []
    queue = sorted(by_mode, key=lambda m: -len(by_mode[m]))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                mode = queue.pop(0)
            got = run_mode(mode, by_mode[mode], log)
            with lock:
                results[mode] = got

    threads = [threading.Thread(target=worker) for _ in range(max(1, parallel))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, log


# --- comparing --------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Difference:
    program: str
    region: str
    mode: str
    kind: str
    detail: str

    @property
    def exact(self) -> bool:
        """A difference of exactness (else of coverage: a check that still runs)."""
        return self.kind in EXACT_KINDS

    def __str__(self) -> str:
        return f"{self.program} [{self.mode}] {self.kind}: {self.detail}"


def _outcome_key(outcome: Any) -> Any:
    if not isinstance(outcome, dict):
        return outcome
    return {k: v for k, v in outcome.items() if k != "message"}


def _is_check_error(outcome: Any) -> bool:
    if not isinstance(outcome, dict) or "error" not in outcome:
        return False
    return outcome.get("raiser") in CHECKERS or outcome.get("cause_raiser") in CHECKERS


def _show(outcome: Any) -> str:
    if not isinstance(outcome, dict):
        return str(outcome)
    if "skipped" in outcome:
        return f"skipped ({outcome['skipped']})"
    text = f"{outcome['error'].rsplit('.', 1)[-1]} from {outcome.get('raiser')}"
    if outcome.get("cause"):
        text += f" (cause {outcome['cause'].rsplit('.', 1)[-1]} from {outcome.get('cause_raiser')})"
    message = outcome.get("message", "").strip().splitlines()
    if message:
        text += f": {message[0][:160]}"
    return text


def describe_outcome(outcome: Any) -> str:
    return _show(outcome)


def well_formed(program: Program, record: dict[str, Any]) -> bool:
    """Whether a program's plain run tests something: it ran to the end, was
    skipped for the installed versions, or raised a checker's error (a generated
    program that fails for another reason is a bug of the generator)."""
    outcome = record.get("outcome")
    if outcome == "ok":
        return True
    return isinstance(outcome, dict) and (
        "skipped" in outcome or _is_check_error(outcome)
    )


def _counts(record: dict[str, Any]) -> dict[tuple[str, str, str], int]:
    out = {}
    for key, n in record.get("counts", {}).items():
        phase, cls, level = key.split("|")
        out[(phase, cls, level)] = n
    return out


def _cached(record: dict[str, Any]) -> set[tuple[str, str]]:
    """(phase, class) where `block`'s verdict cache served a construction."""
    return {tuple(key.split("|")) for key in record.get("cached", {})}  # type: ignore[misc]


def _hits(record: dict[str, Any]) -> dict[tuple[str, str], int]:
    out = {}
    for key, n in record.get("hits", {}).items():
        phase, cls = key.split("|")
        out[(phase, cls)] = n
    return out


def _is_raised(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and value[0] == "raised"


def _value_diffs(
    program: Program, mode: str, want: dict, got: dict
) -> list[Difference]:
    diffs = []
    for key in sorted(set(want) | set(got)):
        a, b = want.get(key), got.get(key)
        if a == b:
            continue
        va: Any = a.get("value") if isinstance(a, dict) else a
        vb: Any = b.get("value") if isinstance(b, dict) else b
        if _is_raised(va) and not _is_raised(vb):
            kind, detail = (
                "lost check",
                f"{key!r}: plain raised {va[1]}, {mode} returned a value",
            )
        elif _is_raised(vb) and not _is_raised(va):
            kind, detail = (
                "crash",
                f"{key!r}: {mode} raised {vb[1]}, plain returned a value",
            )
        elif _is_raised(va) and _is_raised(vb):
            kind, detail = (
                "different error",
                f"{key!r}: plain raised {va[1]}, {mode} raised {vb[1]}",
            )
        else:
            if isinstance(a, dict) and isinstance(b, dict):
                parts = [part for part in {**a, **b} if a.get(part) != b.get(part)]
            else:
                parts = ["value"]
            kind = "changed value"
            shown = parts[0] if parts and parts[0] != "value" else None
            detail = (
                f"{key!r}: differs in {', '.join(parts)}: plain {_short(a, shown)} | "
                f"{mode} {_short(b, shown)}"
            )
        diffs.append(Difference(program.name, program.region, mode, kind, detail))
    return diffs


def _short(entry: Any, part: str | None = None) -> str:
    """The part of a digest that differs (its `value` unless said), shortened."""
    if isinstance(entry, dict):
        entry = entry.get(part or "value")
    text = json.dumps(entry)
    return text if len(text) <= 300 else text[:300] + "..."


def compare(
    program: Program,
    mode: str,
    plain: dict[str, Any],
    got: dict[str, Any],
    nocheck: dict[str, Any] | None = None,
) -> list[Difference]:
    """The differences of `got` (the program's record in `mode`) from `plain`, by the
    table in this module's docstring."""

    def diff(kind: str, detail: str) -> Difference:
        return Difference(program.name, program.region, mode, kind, detail)

    p_out, q_out = plain.get("outcome"), got.get("outcome")
    if isinstance(q_out, dict) and q_out.get("error") == "died":
        return [diff("died", _show(q_out))]
    if (
        isinstance(p_out, dict)
        and "skipped" in p_out
        and _outcome_key(p_out) == _outcome_key(q_out)
    ):
        return []
    covered, informational = COVERS[mode]
    relaxed = program.relaxed if _is_check_error(p_out) else None
    if relaxed:
        return _compare_relaxed(program, mode, plain, got, nocheck, covered, diff)
    diffs: list[Difference] = []
    if _outcome_key(p_out) != _outcome_key(q_out):
        if p_out == "ok":
            kind = "crash"
        elif q_out == "ok":
            kind = "lost check" if _is_check_error(p_out) else "crash"
        else:
            kind = "different error"
        return [diff(kind, f"plain: {_show(p_out)} | {mode}: {_show(q_out)}")]
    diffs += _value_diffs(
        program, mode, plain.get("values") or {}, got.get("values") or {}
    )
    events = _compare_events(plain.get("events") or [], got.get("events") or [])
    if events is not None:
        kind = "extra checks" if events else "changed value"
        diffs.append(
            diff(
                kind,
                f"side effects: plain {plain.get('events')} | {mode} {got.get('events')}"
                + (
                    " (more constructor bodies while the first call compiles)"
                    if events
                    else ""
                ),
            )
        )
    diffs += _compare_counts(program, mode, plain, got, covered, informational, diff)
    return diffs


def _is_subsequence(short: list[str], long: list[str]) -> bool:
    it = iter(long)
    return all(any(x == y for y in it) for x in short)


def _compare_events(plain: list[str], got: list[str]) -> bool | None:
    """`None` when the side effects are the same; `True` when they differ only by
    more of them while a jitted function's first call compiles (JAX rebuilds its
    output there with placeholder leaves and swallows what raises: plain JAX's
    checker raised before the constructor body ran, the plugin skips the check and
    the body runs); `False` for any other difference."""
    if plain == got:
        return None
    first = "jit1: "
    outside = (
        [e for e in plain if not e.startswith(first)],
        [e for e in got if not e.startswith(first)],
    )
    inside = (
        [e for e in plain if e.startswith(first)],
        [e for e in got if e.startswith(first)],
    )
    if outside[0] == outside[1] and _is_subsequence(inside[0], inside[1]):
        return True
    return False


def _compare_relaxed(
    program, mode, plain, got, nocheck, covered, diff
) -> list[Difference]:
    p_out, q_out = plain.get("outcome"), got.get("outcome")
    phases = {key.split("|")[0] for key in plain.get("counts", {})} | {"tree"}
    if _outcome_key(q_out) == _outcome_key(p_out):
        if (
            program.relaxed == "placeholder"
            and covered & phases
            # Raised by the program's own construction, before the placeholder
            # operation ran (a checker that can't check the class at all).
            and plain.get("raised_in") not in EXACT_PHASES
        ):
            return [
                diff(
                    "not covered",
                    f"a placeholder tree still raises as in plain: {_show(q_out)}",
                )
            ]
        return []
    if nocheck is None:
        return [diff("crash", f"no nocheck record to compare with: {_show(q_out)}")]
    n_out = nocheck.get("outcome")
    if _outcome_key(q_out) != _outcome_key(n_out):
        kind = "crash" if q_out != "ok" else "changed value"
        return [
            diff(
                kind,
                f"plain: {_show(p_out)} | without checks: {_show(n_out)} | {mode}: {_show(q_out)}",
            )
        ]
    diffs = _value_diffs(
        program, mode, nocheck.get("values") or {}, got.get("values") or {}
    )
    return [
        dataclasses.replace(d, detail="(vs. without checks) " + d.detail) for d in diffs
    ]


def _compare_counts(
    program, mode, plain, got, covered, informational, diff
) -> list[Difference]:
    diffs = []
    pc, qc = _counts(plain), _counts(got)
    cached = _cached(got)
    listed = got.get("listed", {})
    nodes = dict(program.nodes)
    keys = {(ph, cls) for ph, cls, _ in pc} | {(ph, cls) for ph, cls, _ in qc}
    for ph, cls in sorted(keys):
        if ph == "digest":
            continue
        p = {lv: pc.get((ph, cls, lv), 0) for lv in LEVELS}
        q = {lv: qc.get((ph, cls, lv), 0) for lv in LEVELS}
        where = f"{ph} {cls}"
        if (ph, cls) in cached and sum(q.values()) < sum(p.values()):
            # `block`'s verdict cache: a signature whose check passed before, not
            # checked again (row 7, exact by design: the outcome and the values are
            # compared above).
            diffs.append(
                diff(
                    "row 7",
                    f"{where}: plain {sum(p.values())} checks, {mode} "
                    f"{sum(q.values())} (verdict cache hits)",
                )
            )
            continue
        if ph in EXACT_PHASES:
            if sum(p.values()) != sum(q.values()):
                fewer = sum(q.values()) < sum(p.values())
                diffs.append(
                    diff(
                        "count mismatch",
                        f"{where}: plain {sum(p.values())} checks, {mode} {sum(q.values())}"
                        + (" (a construction's check skipped)" if fewer else " (more)"),
                    )
                )
            continue
        if p["nested"] > q["nested"]:
            diffs.append(
                diff(
                    "count mismatch",
                    f"{where} nested: plain {p['nested']} checks, {mode} {q['nested']} "
                    "(a nested construction's check skipped)",
                )
            )
        elif p["nested"] < q["nested"]:
            # More nested checks than plain JAX: an unflatten that raised in plain
            # JAX (JAX's own trees of placeholder leaves, such as the key paths `jit`
            # unflattens while tracing, which it catches) ran its constructor body
            # with the plugin. Not a lost check; reported, not failed.
            diffs.append(
                diff(
                    "extra checks",
                    f"{where} nested: plain {p['nested']} checks, {mode} {q['nested']}",
                )
            )
        kind = nodes.get(cls)
        may_skip = {"all": ("own", "unflatten"), "hits": ("unflatten",)}.get(
            kind or "", ()
        )
        for level in ("own", "unflatten"):
            if level in may_skip and (ph in covered or ph in informational):
                if q[level] > p[level]:
                    diffs.append(
                        diff(
                            "count mismatch",
                            f"{where} {level}: plain {p[level]} checks, {mode} {q[level]} (more)",
                        )
                    )
                elif q[level] > 0:
                    label = "row 7" if ph in informational else "not covered"
                    if "not a typechecker" in listed.get(cls, ""):
                        # Its check sits under a decorator that is not a
                        # typechecker: JAX's unflatten runs both, as without us,
                        # and `unadapted()` says so.
                        label = "blocked"
                    diffs.append(
                        diff(
                            label,
                            f"{where}: {q[level]} checks on unflatten (plain {p[level]})",
                        )
                    )
            elif p[level] != q[level]:
                fewer = (
                    " (a construction's check skipped)" if q[level] < p[level] else ""
                )
                diffs.append(
                    diff(
                        "count mismatch",
                        f"{where} {level}: plain {p[level]} checks, {mode} {q[level]}{fewer}",
                    )
                )
    return diffs


def compare_all(
    programs: Sequence[Program], results: dict[str, dict[str, dict[str, Any]]]
) -> dict[str, list[Difference]]:
    """{mode: differences} for every plugin mode in `results`."""
    out: dict[str, list[Difference]] = {}
    plain = results.get("plain", {})
    nocheck = results.get("nocheck", {})
    for mode in PLUGIN_MODES:
        if mode not in results:
            continue
        diffs = out.setdefault(mode, [])
        for program in programs:
            if program.name not in results[mode]:
                continue
            if program.name not in plain:
                diffs.append(
                    Difference(
                        program.name, program.region, mode, "died", "no plain record"
                    )
                )
                continue
            diffs += compare(
                program,
                mode,
                plain[program.name],
                results[mode][program.name],
                nocheck.get(program.name),
            )
    return out


def selfcheck(
    programs: Sequence[Program], parallel: int = 2
) -> tuple[list[Difference], list[str]]:
    """`programs` run twice without the plugin, compared as a plugin mode would be
    with everything required equal: what the harness itself does not reproduce
    (there must be nothing)."""
    log: list[str] = []
    runs: list[dict[str, dict[str, Any]]] = [{}, {}]

    def one(i: int) -> None:
        runs[i] = run_mode("plain", programs, log)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads[: max(1, parallel)]:
        t.start()
    for t in threads[: max(1, parallel)]:
        t.join()
    for t in threads[max(1, parallel) :]:
        t.start()
        t.join()
    diffs: list[Difference] = []
    for program in programs:
        diffs += compare(program, "plain", runs[0][program.name], runs[1][program.name])
    return diffs, log
