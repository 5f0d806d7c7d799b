"""`typecheck-guard profile`, `typecheck_guard.profile()` and
`pytest --typecheck-guard-profile`: exact counts per site and per `when`, the fix
named for each, and what `--install` leaves.

The command runs in a fresh interpreter (it runs a program as `python` would); the
programs are written for the test, with the checker given on their command line.
"""

import functools as ft
import itertools
import json
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped

import typecheck_guard
from helpers import passthrough, run_script
from typecheck_guard._compat import _versions
from typecheck_guard._guard import _detect
from typecheck_guard._profile._report import fix

N_CALLS = 6
M_EAGER = 4
SLEEP = 0.02

# A program with known counts in every window: jitted steps returning a checked
# flax.struct (with a host callback inside), eager calls of checked functions with
# PyTree arguments whose bodies do slow work and call another checked function, a
# construction, a tree operation, a first compile. Its checker counts its own checks
# and failures (the independent count): one per call of the stub jaxtyping checks
# the arguments with (the other stub, for the return value, has the output as an
# extra keyword-only argument).
KNOWN = """
import collections
import functools as ft
import inspect
import json
import sys
import time

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, ArrayLike, Float, PyTree, jaxtyped

if sys.argv[1] == "typeguard":
    from typeguard import typechecked as base
else:
    from beartype import beartype as base
N, M, SLEEP = int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
CHECKS, FAILED = collections.Counter(), collections.Counter()


def counting(fn):
    checked = base(fn)
    # `State.__init__`; jaxtyping < 0.3 checks a dataclass with a stub named `State`.
    name = fn.__qualname__.removesuffix(".__init__")
    argument_stub = not any(
        p.kind is p.KEYWORD_ONLY and p.name.startswith("ret")
        for p in inspect.signature(fn).parameters.values()
    )

    @ft.wraps(checked)
    def counted(*args, **kwargs):
        CHECKS[name] += argument_stub
        try:
            return checked(*args, **kwargs)
        except Exception:
            FAILED[name] += 1
            raise

    return counted


@jaxtyped(typechecker=counting)
@struct.dataclass
class State:
    params: PyTree[Float[Array, "..."]]
    step: Float[Array, ""]


@jaxtyped(typechecker=counting)
def progress(step: Float[ArrayLike, ""]) -> None:
    pass


@jax.jit
def train_step(state):
    jax.debug.callback(progress, state.step)
    return state.replace(
        params=jax.tree.map(lambda p: p * 0.9, state.params), step=state.step + 1
    )


@jaxtyped(typechecker=counting)
def inner(params: PyTree[Float[Array, "..."]]) -> Float[Array, ""]:
    return sum(jnp.sum(p) for p in jax.tree.leaves(params))


@jaxtyped(typechecker=counting)
def outer(params: PyTree[Float[Array, "..."]]) -> Float[Array, ""]:
    time.sleep(SLEEP)  # slow work: the body's time, not the check's
    return inner(params)


state = State({f"w{i}": jnp.ones(3) for i in range(8)}, jnp.zeros(()))
for _ in range(N):
    state = train_step(state)
jax.effects_barrier()
for _ in range(M):
    outer(state.params)
state = jax.tree.map(lambda x: x, state)
with open("counts.json", "w") as f:
    json.dump({"checks": CHECKS, "failed": FAILED}, f)
print("ran", N, M)
"""


def _cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    src = str(Path(typecheck_guard.__file__).parents[1])
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    return subprocess.run(
        [sys.executable, "-m", "typecheck_guard", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _profile(
    tmp_path: Path, source: str, *args: str, options: tuple[str, ...] = ()
) -> tuple[subprocess.CompletedProcess, dict[str, Any]]:
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / "profile.json"
    proc = _cli("profile", "--json", str(out), *options, "prog.py", *args, cwd=tmp_path)
    assert out.exists(), proc.stderr
    return proc, json.loads(out.read_text())


def _rows(report: dict[str, Any], name: str) -> dict[tuple[str, str | None], int]:
    return {
        (s["when"], s["jitted"]): s["count"]
        for s in report["sites"]
        if s["site"] == name
    }


def _known(tmp_path: Path, checker: str, *options: str) -> tuple[Any, Any, Any]:
    proc, report = _profile(
        tmp_path,
        KNOWN,
        checker,
        str(N_CALLS),
        str(M_EAGER),
        str(SLEEP),
        options=options,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"ran {N_CALLS} {M_EAGER}\n"
    counts = json.loads((tmp_path / "counts.json").read_text())
    return proc, report, counts


STEP = "jax.jit(__main__.train_step)"


@pytest.mark.parametrize("checker", ["beartype", "typeguard"])
def test_profile_counts_each_window_exactly(tmp_path: Path, checker: str):
    proc, report, counts = _known(tmp_path, checker)
    checks, failed = counts["checks"], counts["failed"]
    state = _rows(report, "__main__.State")
    # One rebuild of the output per call, the first call's included: the same count
    # the runtime guard flags.
    assert state[("dispatch", STEP)] == N_CALLS
    assert state[("construction", None)] == 1
    assert state[("tree", None)] == 1
    # `replace` inside the traced step: your code, checked once per compilation.
    assert state[("trace", STEP)] == 1
    # What JAX rebuilds once per compilation (the input from tracers, the output
    # with placeholder leaves for its key paths, the re-flatten for its fast path):
    # everything the checker counted that no other window has.
    compile_count = checks["State"] - (N_CALLS + 3)
    assert compile_count >= 1
    assert state[("compile", STEP)] == compile_count
    assert sum(state.values()) == checks["State"]
    sites = {(s["site"], s["when"], s["jitted"]): s for s in report["sites"]}
    compiled = sites["__main__.State", "compile", STEP]
    # A check that fails on JAX's placeholder leaves is counted as failed.
    assert compiled["failed"] == failed.get("State", 0)
    assert all(s["failed"] == 0 for s in report["sites"] if s["when"] != "compile")
    # Host callbacks: their own window, named after the callback.
    assert _rows(report, "__main__.progress") == {
        ("callback", "jax.debug.callback(__main__.progress)"): N_CALLS
    }
    assert checks["progress"] == N_CALLS
    # Nested checks are rows of their own; the body is not the check's time.
    assert _rows(report, "__main__.outer") == {("eager", None): M_EAGER}
    assert _rows(report, "__main__.inner") == {("eager", None): M_EAGER}
    assert checks["outer"] == checks["inner"] == M_EAGER
    # (That the body is not in the check's time is measured exactly, in thread CPU
    # time, by `test_reported_seconds_are_what_switching_checks_off_saves`.)

    # The fixes.
    dispatch = sites["__main__.State", "dispatch", STEP]
    assert dispatch["checker"] == f"jaxtyping with {checker}"
    for rebuild in (dispatch, compiled, sites["__main__.State", "tree", None]):
        assert rebuild["rebuild"] and rebuild["removable"]
        assert "typecheck_guard.install() before State is defined" in rebuild["fix"]
        assert "registered by flax.struct.dataclass" in rebuild["scan"]
    # The fix that edits no code comes first.
    assert dispatch["fix"].startswith("run it with `typecheck-guard run prog.py`")
    assert "the first line of prog.py" in dispatch["fix"]
    # `@jax.jit` on `train_step`: the decorator goes above the user's own.
    assert (
        "; or put @typecheck_guard.unflatten_safe above @jax.jit (prog.py:"
        in (dispatch["fix"])
    )
    assert compiled["fix"].startswith(
        "JAX rebuilds State while it traces and compiles jax.jit(train_step)"
    )
    if compiled["failed"]:
        assert "JAX swallowed the errors" in compiled["fix"]
    assert (
        "with typecheck_guard.unflatten_safe():"
        in (sites["__main__.State", "tree", None]["fix"])
    )
    traced = sites["__main__.State", "trace", STEP]
    assert not traced["rebuild"] and not traced["removable"]
    assert traced["fix"].startswith("your code, checked while JAX traced it")
    assert sites[
        "__main__.progress", "callback", "jax.debug.callback(__main__.progress)"
    ]["fix"].startswith("runs inside a JAX host callback")
    outer = sites["__main__.outer", "eager", None]
    assert outer["fix"].startswith("typecheck_guard.cache_pytree_checks()")
    for site in report["sites"]:
        assert site["seconds"] > 0 and site["count"] >= 1
    total = sum(s["seconds"] for s in report["sites"])
    assert report["check_seconds"] == pytest.approx(total)
    assert 0 < report["check_seconds"] < report["wall_seconds"]
    removable = sum(s["seconds"] for s in report["sites"] if s["removable"])
    assert report["removable_seconds"] == pytest.approx(removable)

    # The table, on stderr.
    assert "typecheck-guard profile: typechecks took " in proc.stderr
    assert "of that is removable" in proc.stderr
    assert "State (jaxtyping with " in proc.stderr
    assert "in jax.jit(train_step)" in proc.stderr


@pytest.mark.parametrize("checker", ["beartype", "typeguard"])
def test_profile_install_leaves_only_the_checks_you_asked_for(
    tmp_path: Path, checker: str
):
    proc, report, counts = _known(tmp_path, checker, "--install")
    whens = {s["when"] for s in report["sites"]}
    assert not whens & {"dispatch", "compile", "tree"}
    state = _rows(report, "__main__.State")
    assert state == {("construction", None): 1, ("trace", STEP): 1}
    assert sum(state.values()) == counts["checks"]["State"]
    assert _rows(report, "__main__.outer") == {("eager", None): M_EAGER}
    assert report["removable_seconds"] == 0


def test_removable_is_what_install_removes(tmp_path: Path):
    # Counted, not timed: the checks the plain run's removable sites made are the
    # checks that `--install` no longer runs, by the program's own count.
    plain = tmp_path / "plain"
    installed = tmp_path / "installed"
    plain.mkdir(), installed.mkdir()
    _, before, plain_counts = _known(plain, "beartype")
    _, after, installed_counts = _known(installed, "beartype", "--install")
    # (The checker's count of `State`: jaxtyping re-checks a failed call's
    # arguments one by one to word its error, which is part of that check.)
    removed = plain_counts["checks"]["State"] - installed_counts["checks"]["State"]
    removable = sum(s["count"] for s in before["sites"] if s["removable"])
    assert removable == removed > 0
    assert before["removable_seconds"] > 0
    assert not any(s["removable"] for s in after["sites"])
    assert after["removable_seconds"] == 0


def test_profile_reports_on_exception_and_keeps_the_exit_code(tmp_path: Path):
    args = ("beartype", "2", "1", "0")
    source = KNOWN + "\nraise ValueError('boom')\n"
    proc, report = _profile(tmp_path, source, *args)
    assert proc.returncode == 1
    assert "ValueError: boom" in proc.stderr
    assert "typecheck-guard profile: typechecks took" in proc.stderr
    assert _rows(report, "__main__.outer") == {("eager", None): 1}

    source = KNOWN + "\nsys.exit(7)\n"
    proc, report = _profile(tmp_path, source, *args)
    assert proc.returncode == 7
    assert "typecheck-guard profile: typechecks took" in proc.stderr
    assert _rows(report, "__main__.State")[("dispatch", STEP)] == 2


def test_profile_module_threads_and_plot(tmp_path: Path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(
        textwrap.dedent(
            """
            import sys
            import threading

            import jax
            import jax.numpy as jnp
            from beartype import beartype
            from flax import struct
            from jaxtyping import Array, Float, jaxtyped


            @jaxtyped(typechecker=beartype)
            @struct.dataclass
            class Pair:
                x: Float[Array, " n"]


            step = jax.jit(lambda p: p.replace(x=p.x + 1))
            step(Pair(jnp.ones(2)))


            def work(n):
                p = Pair(jnp.ones(2))
                for _ in range(n):
                    p = step(p)


            threads = [
                threading.Thread(target=work, args=(int(sys.argv[1]),), name=f"w{i}")
                for i in range(2)
            ]
            for t in threads:
                t.start()
            """
        )
    )
    out = tmp_path / "p.json"
    plot = tmp_path / "p.png"
    proc = _cli(
        "profile",
        "--json",
        str(out),
        "--plot",
        str(plot),
        "--top",
        "3",
        "-m",
        "pkg.train",
        "5",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    (dispatch,) = [s for s in report["sites"] if s["when"] == "dispatch"]
    # The main thread's first call, then 5 calls in each worker, which the runner
    # waits for (as the interpreter does at exit) before it reports.
    assert dispatch["count"] == 1 + 2 * 5
    assert set(dispatch["threads"]) == {"MainThread", "w0", "w1"}
    assert dispatch["site"] == "__main__.Pair"  # run as __main__, as by python -m
    assert "`typecheck-guard run -m pkg.train`" in dispatch["fix"]
    assert plot.read_bytes().startswith(b"\x89PNG")


@pytest.mark.allow_runtime_typechecks
def test_profile_api_composes_with_the_runtime_guard(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Node:
        params: PyTree[Float[Array, "..."]]

    @jaxtyped(typechecker=typecheck)
    def total(params: PyTree[Float[Array, "..."]]) -> Float[Array, ""]:
        return jnp.sum(jnp.stack([jnp.sum(p) for p in jax.tree.leaves(params)]))

    node = Node({"a": jnp.ones(2), "b": jnp.ones(3)})
    with typecheck_guard.profile() as prof:
        step = jax.jit(lambda n: n.replace(params=jax.tree.map(jnp.negative, n.params)))
        node = step(node)
        for _ in range(N_CALLS - 1):
            node = step(node)
        for _ in range(M_EAGER):
            total(node.params)
        # The runtime guard still sees the checks of a watched call.
        with pytest.raises(typecheck_guard.RuntimeTypecheckError):
            with typecheck_guard.runtime_checks("disallow"):
                node = step(node)

        def work():
            n = node
            for _ in range(3):
                n = step(n)

        threads = [threading.Thread(target=work, name=f"t{i}") for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    counts = {(s.name.rsplit(".", 1)[-1], s.when): s for s in prof.sites}
    dispatch = counts["Node", "dispatch"]
    assert dispatch.count == N_CALLS + 1 + 2 * 3
    assert dispatch.threads == {"MainThread", "t0", "t1"}
    assert dispatch.jitted is not None and dispatch.jitted.startswith("jax.jit(")
    assert counts["total", "eager"].count == M_EAGER
    assert counts["total", "eager"].pytree
    assert dispatch.checker == f"jaxtyping with {typecheck.name}"
    # Every check ran through the counting checker: jaxtyping checks parameters and
    # the full signature, two checker calls per check (jaxtyping < 0.3 checks a
    # dataclass's fields with one).
    old = _versions.parse(_versions.installed("jaxtyping") or "0") < (0, 3)
    per_check = 1 if old else 2
    assert sum(s.count for s in prof.sites if s.when != "trace") * per_check <= (
        typecheck.calls
    )
    assert prof.wall_seconds > prof.check_seconds > 0
    # Stopped: nothing more is recorded.
    before = dispatch.count
    step(node)
    assert counts["Node", "dispatch"].count == before


def test_profile_api_report_and_dict(capsys):
    with typecheck_guard.profile() as prof:
        pass
    prof.report()
    assert capsys.readouterr().out.startswith(
        "typecheck-guard profile: no typecheck ran"
    )
    data = prof.to_dict()
    assert data["sites"] == [] and data["wall_seconds"] >= 0


def test_profile_cli_errors(tmp_path: Path):
    proc = _cli("profile", cwd=tmp_path)
    assert proc.returncode == 2
    assert "no program to run" in proc.stderr
    proc = _cli("profile", "missing.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert "can't open file" in proc.stderr and "missing.py" in proc.stderr
    (tmp_path / "p.py").write_text("pass\n")
    proc = _cli("profile", "--top", "-1", "p.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert "--top takes 0 (all sites) or more, got -1" in proc.stderr


# Three sites, each checked once: enough to see what `top` lists.
THREE_SITES = """
from beartype import beartype
from jaxtyping import jaxtyped


@jaxtyped(typechecker=beartype)
def a(x: int) -> int:
    return x


@jaxtyped(typechecker=beartype)
def b(x: int) -> int:
    return x


@jaxtyped(typechecker=beartype)
def c(x: int) -> int:
    return x


for f, n in ((a, 3), (b, 2), (c, 1)):
    for _ in range(n):
        f(1)
"""


def test_report_top_means_the_same_everywhere(tmp_path: Path, capsys, monkeypatch):
    # Sites are listed the most time first: a clock that advances one tick per
    # reading makes every check of these three alike take the same time, so the
    # order is their counts' (a, b, c), however busy the machine is.
    ticks = itertools.count()
    monkeypatch.setattr(_detect, "_clock", lambda: float(next(ticks)))
    namespace: dict[str, Any] = {}
    with typecheck_guard.profile() as prof:
        exec(compile(THREE_SITES, "three.py", "exec"), namespace)
    assert [site.count for site in prof.sites] == [3, 2, 1]

    def listed(**kwargs: Any) -> int:
        prof.report(**kwargs)
        out = capsys.readouterr().out
        return sum(1 for line in out.splitlines() if "  eager  " in line)

    assert listed() == 3
    for everything in (0, None):
        assert listed(top=everything) == 3
    assert listed(top=1) == 1
    prof.report(top=2)
    out = capsys.readouterr().out
    assert "(1 more site, 1 checks" in out and "report(top=0) lists them all" in out
    assert "--top" not in out
    for bad, error in ((-1, ValueError), ("x", TypeError), (1.5, TypeError)):
        with pytest.raises(error, match=r"Profile.report: `top` is how many sites"):
            prof.report(top=bad)
    with pytest.raises(TypeError, match=r"got True"):
        prof.report(top=True)

    # The command line: `--top 0` lists all, `--top 2` says how to see the rest.
    (tmp_path / "three.py").write_text(THREE_SITES)
    proc = _cli("profile", "--top", "0", "three.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert sum(1 for line in proc.stderr.splitlines() if "  eager  " in line) == 3
    proc = _cli("profile", "--top", "2", "three.py", cwd=tmp_path)
    assert "--top 0 lists them all" in proc.stderr


def test_site_is_public_and_documented():
    from typecheck_guard._profile._data import Site

    assert typecheck_guard.Site is Site
    for name in ("when", "count", "seconds", "failed", "rebuild", "jitted"):
        assert name in Site.__slots__
    assert "checker's own" in (Site.__doc__ or "")


# `with profile():` around a loop that calls jitted functions made before the block.
# JAX's C++ dispatch rebuilds the output through the class's checked constructor and
# leaves no Python frame: the rebuild's caller is the program's line that called the
# jitted function, and what that line calls tells a rebuild from a construction. A
# call the profile can't read without running code (through a subscript) leaves it
# "unclear". A call that takes JAX's Python dispatch (a function that runs a host
# callback) rebuilds from JAX's own code, and is read off the line that called into
# JAX. A jitted function made inside the block is one we see. Run without our
# pytest plugin, which switches the jit patches on before any test module is
# imported.
API_BEFORE_AFTER = """
import functools
import json
import sys

import jax
import jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard


@jaxtyped(typechecker=beartype)
@struct.dataclass
class State:
    x: Float[Array, " n"]


class Plain:  # not a pytree: its checks are constructions whatever the profile sees
    @jaxtyped(typechecker=beartype)
    def __init__(self, x: Float[Array, " n"]):
        self.x = x


class Trainer:
    def __init__(self):
        self.steps = [jax.jit(shrink)]

    @functools.partial(jax.jit, static_argnums=0)
    def grow(self, s):
        return s.replace(x=s.x + 1)


def shrink(s):
    return s.replace(x=s.x - 1)


@jax.jit
def noted(s):  # a host callback: each call takes JAX's Python dispatch
    jax.debug.callback(lambda v: None, s.x)
    return s.replace(x=s.x + 0)


grow = jax.jit(lambda s: s.replace(x=s.x + 1))
trainer = Trainer()
state = noted(grow(State(jnp.ones(2))))
state = trainer.steps[0](trainer.grow(state))
with typecheck_guard.profile() as prof:
    after = jax.jit(lambda s: s.replace(x=s.x * 2))
    for _ in range(4):
        state = grow(state)
    for _ in range(3):
        state = trainer.grow(state)
    for _ in range(2):
        state = trainer.steps[0](state)
    for _ in range(2):
        state = noted(state)
    state = after(state)  # the first call: traced and compiled
    for _ in range(3):
        state = after(state)
    for _ in range(2):
        Plain(state.x)
    State(state.x)
json.dump(prof.to_dict(), sys.stdout)
"""


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="what a line calls is read off its source span (co_positions, 3.11+); "
    "on 3.10 those rebuilds are 'unclear'",
)
def test_profile_api_labels_the_dispatch_of_a_jitted_function_made_before_it(
    tmp_path: Path,
):
    proc = run_script(tmp_path, API_BEFORE_AFTER)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert _rows(report, "__main__.State") == {
        # `after` is seen (made in the block: its 4 calls); `grow` (4 calls) and
        # `trainer.grow` are read off the lines that call them, as the command line
        # would label them.
        ("dispatch", "jax.jit(__main__.<lambda>)"): 4 + 4,
        ("dispatch", "jax.jit(__main__.Trainer.grow)"): 3,
        # Rebuilt in JAX's Python dispatch: read off the line that called into JAX.
        ("dispatch", "jax.jit(__main__.noted)"): 2,
        ("compile", "jax.jit(__main__.<lambda>)"): 3,
        ("trace", "jax.jit(__main__.<lambda>)"): 1,
        ("unclear", None): 2,  # `trainer.steps[0](state)`: not read
        ("construction", None): 1,  # `State(state.x)`: the line calls the class
    }
    assert _rows(report, "__main__.Plain") == {("construction", None): 2}
    grow = next(
        s for s in report["sites"] if s["jitted"] == "jax.jit(__main__.Trainer.grow)"
    )
    assert grow["removable"] and grow["rebuild"]
    assert grow["fix"].startswith(
        "run the program with `typecheck-guard run`, or call "
    )
    (unclear,) = [s for s in report["sites"] if s["when"] == "unclear"]
    assert unclear["fix"].startswith("can't tell: your code built State here, or JAX")
    assert "typecheck_guard.install() before State is defined" in unclear["fix"]
    assert not unclear["removable"]
    assert 'may be ("unclear"' in report["headline"]


def test_pytest_option_reports_sites_and_tests(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_steps="""
        import jax
        import jax.numpy as jnp
        import pytest
        from beartype import beartype
        from flax import struct
        from jaxtyping import Array, Float, jaxtyped


        @jaxtyped(typechecker=beartype)
        @struct.dataclass
        class S:
            x: Float[Array, " n"]


        step = jax.jit(lambda s: s.replace(x=s.x + 1))


        @pytest.mark.allow_runtime_typechecks
        def test_many():
            s = S(jnp.ones(3))
            for _ in range(5):
                s = step(s)


        def test_few():
            S(jnp.ones(3))
        """
    )
    # With the runtime guard in the same session: both summaries.
    # (`-v`: the guard's summary lists allowed sites only then.)
    result = pytester.runpytest_subprocess(
        "--typecheck-guard-profile",
        "--typecheck-guard=strict",
        "-p",
        "no:cacheprovider",
        "-v",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*typecheck-guard: typechecks run at dispatch time*",
            "* test_steps.S.__init__ (jaxtyping with beartype) in jax.jit(*allowed",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*typecheck-guard profile*",
            "typecheck-guard profile: typechecks took *",
            # (The site's name, broken over lines in its column: 100 columns.)
            "*5  * dispatch * test_steps.S",
            "* (jaxtyping with beartype)",
            "* in jax.jit(test_steps.<lambda>)",
            "*run pytest with --typecheck-guard-install, or call*",
            "*(at the top of your conftest.py)*",
            "tests that spent the most in checks:",
            "* test_steps.py::test_many",
            "* test_steps.py::test_few",
        ]
    )


def test_profile_counts_checker_wrappers_that_are_equal_code_objects():
    # beartype's wrappers of two functions with one signature are equal code objects
    # (code compares by value): on 3.12+ each needs its own return event, or the
    # second function's first check never ends and swallows the checks after it.
    from beartype import beartype

    def make():
        @beartype
        def scale(x: float) -> float:
            return 2 * x

        return scale

    first, second = make(), make()
    first(1.0), second(1.0)  # beartype's one-time setup, outside the profile
    # (beartype alone: 3.11 sees it with a profile function only.)
    with typecheck_guard.profile(every_checker=True) as prof:
        for _ in range(3):
            first(1.0)
            second(1.0)
    assert sum(s.count for s in prof.sites if s.when == "eager") == 6


@pytest.mark.xfail(
    sys.version_info < (3, 12),
    strict=True,
    reason="the profile function counts a check per resumption (a known limit)",
)
def test_a_checked_generator_or_coroutine_is_one_check_per_call():
    # beartype checks a generator or coroutine function with a wrapper of the same
    # kind; a profile function (3.11, `every_checker=True`) is told each time its
    # frame stops at a `yield` or an `await` and resumes, as if it returned and
    # was called again, and counts each resumption as one more check.
    import asyncio

    @beartype
    def gen(x: Float[Array, " n"]):
        yield x
        yield x

    @beartype
    async def coro(x: Float[Array, " n"]) -> Float[Array, " n"]:
        await asyncio.sleep(0)
        return x

    x = jnp.ones(2)
    list(gen(x)), asyncio.run(coro(x))  # beartype's one-time setup
    with typecheck_guard.profile(every_checker=True) as prof:
        for _ in range(3):
            list(gen(x))
            asyncio.run(coro(x))
    counts: dict[str, int] = {}
    for site in prof.sites:
        counts[site.checked] = counts.get(site.checked, 0) + site.count
    assert {k.rsplit(".", 1)[-1]: v for k, v in counts.items()} == {
        "gen": 3,
        "coro": 3,
    }


# Seconds, through ratios only: a checker that spins for a known time in each stub it
# checks, a body that spins longer. The reported time per check must be what
# switching the checks off saves (`jaxtyping_disable`), measured interleaved. On a
# shared machine wall time is noise, so here the profiler's clock, the spins and the
# measurement are the thread's CPU time (`benchmarks/profile_truth.py` measures the
# wall time of real checks).
SPIN = 0.002
BODY = 0.006
_clock = time.thread_time


def _spin(seconds: float) -> None:
    end = _clock() + seconds
    while _clock() < end:
        pass


def _spinning(fn):
    from beartype import beartype

    checked = beartype(fn)

    @ft.wraps(checked)
    def spin(*args, **kwargs):
        _spin(SPIN)
        return checked(*args, **kwargs)

    return spin


@jaxtyped(typechecker=_spinning)
def _inner(x: Float[Array, " n"]) -> Float[Array, " n"]:
    return x


@jaxtyped(typechecker=_spinning)
def _outer(x: Float[Array, " n"]) -> Float[Array, " n"]:
    _spin(BODY)
    return _inner(x)


@jaxtyped(typechecker=_spinning)
@struct.dataclass
class _Spun:
    x: Float[Array, " n"]


def _per_call(run: Any, n: int, *, disabled: bool = False, prof: Any = None) -> float:
    import jaxtyping

    jaxtyping.config.update("jaxtyping_disable", disabled)
    try:
        if prof is not None:
            prof.start()
        start = _clock()
        run(n)
        elapsed = _clock() - start
        if prof is not None:
            prof.stop()
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
    return elapsed / n


@pytest.mark.allow_runtime_typechecks
@pytest.mark.parametrize("workload", ["eager, nested", "dispatch"])
def test_reported_seconds_are_what_switching_checks_off_saves(workload, monkeypatch):
    from typecheck_guard._guard import _detect, _watch

    monkeypatch.setattr(_detect, "_clock", _clock)
    # This session's runtime guard would watch each call too, and its own cost
    # would be in the measured difference: nothing listens here.
    monkeypatch.setattr(_watch, "_sinks", [])
    x = jnp.ones(3)
    if workload == "dispatch":
        step = jax.jit(lambda s: s.replace(x=s.x + 1))
        state = [step(_Spun(x))]

        def run(n: int) -> None:
            for _ in range(n):
                state[0] = step(state[0])

        checks_per_call = 1
    else:

        def run(n: int) -> None:
            for _ in range(n):
                _outer(x)

        checks_per_call = 2
    run(2)
    ratios = []
    for _ in range(7):
        on = _per_call(run, 6)
        off = _per_call(run, 6, disabled=True)
        prof = typecheck_guard.profile()
        _per_call(run, 6, prof=prof)
        assert sum(site.count for site in prof.sites) == 6 * checks_per_call
        if workload == "eager, nested":
            # Both checks spin as long; the outer one's body (which spins longer
            # and runs the inner check) is not in its time.
            times = {s.name.rsplit(".", 1)[-1]: s.seconds for s in prof.sites}
            assert times["_outer"] / times["_inner"] < 1.5, times
        ratios.append(prof.check_seconds / 6 / (on - off))
    assert 0.8 <= statistics.median(ratios) <= 1.2, ratios


@pytest.mark.allow_runtime_typechecks
def test_the_guard_and_the_profile_count_the_same(typecheck):
    from typecheck_guard._guard import _watch

    tallies: list[dict] = []

    def record(tally):
        tallies.append(tally)
        return False

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Node:
        params: PyTree[Float[Array, "..."]]

    @jaxtyped(typechecker=typecheck)
    def progress(x: Float[Array, ""]) -> None:
        pass

    def body(n):
        jax.debug.callback(progress, jnp.sum(n.params["a"]))
        return n.replace(params=jax.tree.map(jnp.negative, n.params))

    _watch.add_sink(record)
    try:
        with typecheck_guard.profile() as prof:
            step = jax.jit(body)  # its first call, the compilation, is watched too
            node = Node({"a": jnp.ones(2)})
            with typecheck_guard.runtime_checks("log"):
                for _ in range(N_CALLS):
                    node = step(node)
                jax.effects_barrier()
    finally:
        _watch.remove_sink(record)
    guard: dict[str, int] = {}
    for tally in tallies:
        for site, (count, *_) in tally.items():
            guard[site.kind] = guard.get(site.kind, 0) + count
    profiled = {
        s.when: s.count for s in prof.sites if s.when in ("dispatch", "callback")
    }
    assert guard == {"constructor": N_CALLS, "callback": N_CALLS}
    assert profiled == {"dispatch": N_CALLS, "callback": N_CALLS}


@pytest.mark.allow_runtime_typechecks
def test_a_check_unflatten_safe_runs_on_purpose_is_its_own_window(typecheck):
    # `unflatten_safe` checks a rebuild it can't prove is JAX's (here: JAX's C++
    # fast path rebuilding a jitted call's output) or a construction in its block
    # the first time its verdict cache sees the signature: a check it runs on
    # purpose, which the guard does not flag. The profile lists it as `verdict`,
    # once per signature, at a jitted call's dispatch and in a host callback alike:
    # not as a check that runs on every call, and not as one to remove.
    from typecheck_guard._guard import _watch

    tallies: list[dict] = []

    def record(tally):
        tallies.append(tally)
        return False

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Node:
        params: PyTree[Float[Array, "..."]]

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Reading:
        x: Float[Array, ""]

    def meter(x):
        with typecheck_guard.unflatten_safe():
            Reading(x)
            # A failure is not cached: checked on every run of the callback, and
            # flagged as the callback's (the program catches the error).
            try:
                Reading(jnp.zeros(2))
            except Exception:
                pass

    def body(n):
        return n.replace(params=jax.tree.map(jnp.negative, n.params))

    _watch.add_sink(record)
    try:
        with typecheck_guard.profile() as prof:
            step = jax.jit(body)
            report = jax.jit(lambda x: jax.debug.callback(meter, x))
            node = Node({"a": jnp.ones(2)})
            with (
                typecheck_guard.runtime_checks("log"),
                typecheck_guard.unflatten_safe(),
            ):
                for _ in range(N_CALLS):
                    node = step(node)
                    report(jnp.sum(node.params["a"]))
                jax.effects_barrier()
                # A failure is not cached: checked each time, a construction.
                for _ in range(3):
                    with pytest.raises(Exception, match="Type-check error"):
                        Reading(jnp.zeros(2))
    finally:
        _watch.remove_sink(record)
    guard: dict[str, int] = {}
    for tally in tallies:
        for site, (count, *_) in tally.items():
            guard[site.kind] = guard.get(site.kind, 0) + count
    assert guard == {"callback": N_CALLS}
    every_call = {
        (s.name.rsplit(".", 1)[-1], s.when): s.count
        for s in prof.sites
        if s.when in ("dispatch", "callback", "verdict")
    }
    assert every_call == {
        ("Node", "verdict"): 1,
        ("Reading", "verdict"): 1,
        ("Reading", "callback"): N_CALLS,
    }
    (failing,) = [s for s in prof.sites if s.when == "construction" and s.failed]
    assert (failing.name.rsplit(".", 1)[-1], failing.count) == ("Reading", 3)
    assert failing.failed == 3
    for site in prof.sites:
        if site.when == "verdict":
            assert not site.rebuild
            assert fix(site).startswith(
                "unflatten_safe checks this the first time its verdict cache sees "
                "the call's signature"
            )
            assert fix(site).endswith("once per signature; keep it")
    assert prof.to_dict()["removable_seconds"] == 0.0


def test_a_functions_first_failed_check_is_setup_not_steady_state(typecheck):
    # A checker builds its first error message once: beartype's and jaxtyping's
    # error paths import and cache on first use (0.7 s, then milliseconds). That
    # first failed check is counted with the first calls, not the steady state.
    @jaxtyped(typechecker=typecheck)
    def f(x: Float[Array, "3"]) -> None:
        pass

    with typecheck_guard.profile() as prof:
        f(jnp.zeros(3))
        for _ in range(4):
            with pytest.raises(Exception, match="Type-check error"):
                f(jnp.zeros(4))
        f(jnp.zeros(3))
    (site,) = [s for s in prof.sites if s.name.endswith(".f")]
    assert (site.count, site.failed, site.first_calls) == (6, 4, 2)
    assert site.per_check == pytest.approx(site.steady_seconds / 4)


def test_a_call_that_does_not_bind_leaves_the_profile_watching():
    # On Python 3.11 the profile function is off from the start of a jaxtyping
    # check; a call that does not match the signature raises before jaxtyping's
    # `try`, and the profile must be watching again afterwards. (jaxtyping raised
    # Python's `TypeError` before checking anything: no check, on every backend,
    # as the runtime guard counts it.)
    @jaxtyped(typechecker=beartype_checker())
    def one(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x

    @jaxtyped(typechecker=beartype_checker())
    def failing(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x[None]  # the return check fails

    x = jnp.ones(2)
    with typecheck_guard.profile() as prof:
        one(x)
        with pytest.raises(TypeError):
            one(x, x)
        with pytest.raises(Exception, match="return value"):
            failing(x)
        for _ in range(3):
            one(x)
    counts = {s.name.rsplit(".", 1)[-1]: (s.count, s.failed) for s in prof.sites}
    assert counts == {"one": (4, 0), "failing": (1, 1)}


def beartype_checker():
    from beartype import beartype

    return beartype


@pytest.mark.filterwarnings("ignore::typecheck_guard.UnadaptedClassesWarning")
def test_a_check_under_installs_mark_is_a_rebuild(installed, typecheck):
    # A checker under a decorator that is not one: install() registers the class's
    # unflatten marked ("JAX is unflattening Logged") but can't skip a check it
    # can't take apart from the decorator. The check runs under JAX's mark, which
    # only JAX can set: a rebuild, whatever called the checked function, and one
    # that neither install() nor unflatten_safe removes.
    @jax.tree_util.register_pytree_node_class
    class Logged:
        @passthrough
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, " n"]):
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    with typecheck_guard.profile() as prof:
        node = Logged(jnp.ones(2))
        for _ in range(3):
            node = jax.tree.map(jnp.negative, node)
    rows = {(s.when, s.rebuild): s.count for s in prof.sites if s.cls is Logged}
    assert rows == {("construction", False): 1, ("tree", True): 3}
    (tree,) = [s for s in prof.sites if s.cls is Logged and s.rebuild]
    from typecheck_guard._profile._report import fix, removable

    assert not removable(tree)
    assert "keep it" not in fix(tree)


NEVER_STOPPED = """
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard

typecheck_guard.runtime_checks("log")  # the guard stays on to the end, too
prof = typecheck_guard.profile().start()


@jaxtyped(typechecker=beartype)
def f(x: Float[Array, " n"]) -> Float[Array, " n"]:
    return x


jax.jit(lambda x: x + 1)(f(jnp.ones(2)))
print("done")
"""


def test_a_profile_never_stopped_ends_quietly():
    # Nothing watches the interpreter tear its modules down: no "Exception ignored"
    # traceback at exit.
    proc = subprocess.run(
        [sys.executable, "-c", NEVER_STOPPED], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done\n"
    assert "Exception ignored" not in proc.stderr and "Traceback" not in proc.stderr


def _partial_step(config, state):
    return state.replace(step=state.step + config)


@pytest.mark.allow_runtime_typechecks
def test_the_unflatten_safe_fix_wraps_the_users_own_jitted_object():
    # Not `_partial_step = unflatten_safe(jax.jit(_partial_step))`, which would drop
    # the bound argument: the object the user made, on the line that makes it.
    @jaxtyped(typechecker=beartype)
    @struct.dataclass
    class PartialState:
        step: Float[Array, ""]

    with typecheck_guard.profile() as prof:
        step = jax.jit(ft.partial(_partial_step, 1.0))  # made here
        state = PartialState(jnp.zeros(()))
        for _ in range(3):
            state = step(state)
    (site,) = [s for s in prof.sites if s.when == "dispatch"]
    line = _line_of("step = jax.jit(ft.partial(_partial_step, 1.0))  # made here")
    assert site.made_at == f"tests/profile/test_profile.py:{line}"
    assert fix(site).endswith(
        "; or step = typecheck_guard.unflatten_safe(jax.jit(ft.partial(_partial_step, "
        f"1.0)))  (tests/profile/test_profile.py:{line})"
    )
    assert "_partial_step = " not in fix(site)


def test_the_unflatten_safe_fix_is_no_statement_where_the_line_holds_two(
    tmp_path: Path,
):
    from typecheck_guard._guard._fixes import unflatten_safe_fix

    source = tmp_path / "train.py"
    source.write_text("n = 3; step = jax.jit(f)\nstep = jax.jit(f)\n")
    assert unflatten_safe_fix("jax.jit(train.f)", f"{source}:1") == (
        f"wrap the jitted function made at {source}:1 in "
        "typecheck_guard.unflatten_safe(...)"
    )
    assert unflatten_safe_fix("jax.jit(train.f)", f"{source}:2") == (
        f"step = typecheck_guard.unflatten_safe(jax.jit(f))  ({source}:2)"
    )


def _line_of(snippet: str) -> int:
    with open(__file__) as f:
        for number, line in enumerate(f, 1):
            if snippet in line and "_line_of" not in line:
                return number
    raise AssertionError(snippet)


def test_a_failed_check_that_stops_the_program_says_so():
    # `jax.tree.map(lambda _: None, obs)` in a jitted function: the user's tree
    # operation rebuilds `Obs` with `None` leaves while JAX traces; the check fails
    # and its error ends the run. Not "compile", not "swallowed".
    @jaxtyped(typechecker=beartype)
    @struct.dataclass
    class Obs:
        x: Float[Array, " n"]

    @jax.jit
    def f(obs):
        jax.tree.map(lambda _: None, obs)
        return obs

    obs = Obs(jnp.ones(3))
    prof = typecheck_guard.profile()
    with pytest.raises(Exception, match="Type-check error"), prof:
        f(obs)
    (site,) = [s for s in prof.sites if s.failed]
    assert (site.when, site.failed, site.fatal, site.rebuild) == ("tree", 1, 1, True)
    text = fix(site)
    assert text.startswith(
        "this check failed and the program stopped here (its error ended the run); "
    )
    assert "swallowed" not in text and "compiles" not in text


@pytest.mark.allow_runtime_typechecks
@pytest.mark.parametrize("guard", [False, True], ids=["alone", "with the guard"])
def test_a_rebuild_while_jax_traces_through_a_python_unflatten_is_compile(guard):
    # A class registered with a Python unflatten function that calls it: JAX
    # rebuilds it while it traces (its tracers, once per compilation), and so does
    # the program's own `jax.tree.map` in the traced function (once, its tree
    # operation). The constructor's caller is the program's unflatten function,
    # not JAX's tree code: what called that decides. JAX's own rebuild had been
    # `tree`, as if the program's, or `dispatch` (a jitted call's line).
    class S:
        @jaxtyped(typechecker=beartype)
        def __init__(self, w: Float[Array, " n"]):
            self.w = w

    jax.tree_util.register_pytree_node(S, lambda s: ((s.w,), None), lambda _, c: S(*c))
    s = S(jnp.ones(2))
    if guard:
        typecheck_guard.runtime_checks("log")
        typecheck_guard.runtime_checks("allow")
    with typecheck_guard.profile() as prof:

        @jax.jit
        def mapped(s):
            return jax.tree.map(lambda x: x + 1, s)

        mapped(s)
        mapped(s)
    counts = {site.when: site.count for site in prof.sites}
    assert set(counts) == {"compile", "tree", "dispatch"}, counts
    assert (counts["tree"], counts["dispatch"]) == (1, 2), counts


def test_what_the_profile_puts_in_a_checked_closure_is_the_function():
    # On Python 3.11 the profile times a jaxtyped function's body through what
    # jaxtyping's closure calls, and binds its arguments through an equal signature
    # (`_profile/_engine.py`). What a program can reach of them meanwhile pickles
    # as what they replace (cloudpickle pickles a local or `__main__` function's
    # closure by value), they keep nothing alive, and they are gone once it stops.
    import gc
    import inspect
    import pickle
    import weakref

    import cloudpickle

    def make():
        @jaxtyped(typechecker=beartype)
        def scale(x: Float[Array, " n"]) -> Float[Array, " n"]:
            return 2 * x

        return scale

    def closure(fn):
        return {
            name: cell.cell_contents
            for name, cell in zip(
                fn.__code__.co_freevars, fn.__closure__ or (), strict=True
            )
        }

    scale = make()
    impl = closure(scale)["wrapped_fn_impl"]
    body, signature = scale.__wrapped__, closure(impl)["param_signature"]
    with typecheck_guard.profile() as prof:
        scale(jnp.ones(2))
        during = closure(impl)
        pickled = cloudpickle.dumps(impl)
    assert [s.count for s in prof.sites] == [1]
    if sys.version_info < (3, 12):
        assert type(during["fn"]).__name__ == "_Body"  # ours, while it ran
    assert during["param_signature"] == signature
    assert b"typecheck_guard" not in pickled
    restored = closure(pickle.loads(pickled))
    assert type(restored["fn"]) is type(body)
    assert type(restored["param_signature"]) is inspect.Signature
    after = closure(impl)
    assert after["fn"] is body and after["param_signature"] is signature
    del scale, impl, body, during, after, restored
    with typecheck_guard.profile():  # a profile that runs on holds nothing either
        scale = make()
        scale(jnp.ones(2))
        dropped = (weakref.ref(scale), weakref.ref(scale.__wrapped__))
        del scale
        gc.collect()
        assert [ref() for ref in dropped] == [None, None]


def test_the_body_hook_answers_no_type_check_as_the_function():
    # jaxtyping skips a function whose `__no_type_check__` is set, read off what its
    # closure holds: on Python 3.11, while profiling, our body hook. We read it
    # without the hook's `__getattr__` (`_detect.forwarders`): the same answer as
    # `getattr`, whichever of the two holds the attribute, and a check switched
    # off mid-profile is no check, as without the profile.
    from typecheck_guard._profile._engine import _Body

    def f(x):
        return x

    body = _Body(f)
    assert type(body) in _detect.forwarders
    for on_fn, on_body in itertools.product((None, True, False, 0, "yes"), repeat=2):
        for target, value in ((f, on_fn), (body, on_body)):
            target.__dict__.pop("__no_type_check__", None)
            if value is not None:
                target.__no_type_check__ = value
        expected = bool(getattr(body, "__no_type_check__", False))
        assert _detect._no_type_check(body) is expected, (on_fn, on_body)

    @jaxtyped(typechecker=beartype)
    def scale(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return 2 * x

    with typecheck_guard.profile() as prof:
        scale(jnp.ones(2))
        scale.__wrapped__.__no_type_check__ = True
        assert scale(jnp.ones((2, 2))).shape == (2, 2)  # unchecked: no error
    assert [s.count for s in prof.sites] == [1]


def _counting_beartype(checks: list[Any]) -> Any:
    """beartype as jaxtyping's typechecker, appending to `checks` each time one of
    the stubs it checks runs: an independent count of the checks jaxtyping ran
    (two per call, the arguments' and the return value's)."""

    def counting(fn):
        checked = beartype(fn)

        @ft.wraps(fn)
        def stub(*args, **kwargs):
            checks.append(fn)
            return checked(*args, **kwargs)

        return stub

    return counting


def test_the_profile_counts_the_checks_jaxtyping_runs_as_its_switches_change():
    # A check jaxtyping's wrapper began (it bound the arguments) is one whatever
    # its off-switches say later; one it skipped is none. Counted independently: the
    # calls of the checker's argument stub, one per check.
    import jaxtyping

    checks: list[Any] = []
    counting = _counting_beartype(checks)

    @jaxtyped(typechecker=counting)
    def scale(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return 2 * x

    switches = {
        2: lambda: jaxtyping.config.update("jaxtyping_disable", True),
        3: lambda: jaxtyping.config.update("jaxtyping_disable", False),
        4: lambda: setattr(scale, "__no_type_check__", True),
        5: lambda: delattr(scale, "__no_type_check__"),
        6: lambda: setattr(scale.__wrapped__, "__no_type_check__", 1),
        7: lambda: delattr(scale.__wrapped__, "__no_type_check__"),
    }
    try:
        with typecheck_guard.profile() as prof:
            for step in range(9):
                switches.get(step, lambda: None)()
                scale(jnp.ones(2))
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
    argument_checks = len(checks) // 2  # the arguments' stub and the return's
    assert argument_checks == 6  # steps 0, 1, 3, 5, 7, 8
    assert [s.count for s in prof.sites] == [argument_checks]


def test_a_rows_threads_are_named_as_they_were_when_they_checked():
    @jaxtyped(typechecker=beartype)
    def scale(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return 2 * x

    thread = threading.current_thread()
    name = thread.name
    try:
        with typecheck_guard.profile() as prof:
            scale(jnp.ones(2))
            thread.name = "renamed-while-profiled"
            scale(jnp.ones(2))
    finally:
        thread.name = name
    (site,) = prof.sites
    assert site.count == 2
    assert set(site.threads) == {name, "renamed-while-profiled"}


def test_what_a_program_does_through_the_closure_cell_reaches_the_function():
    # A program may reach jaxtyping's closure cell and write, delete, compare or
    # copy what it holds: while profiled (on 3.11, our body hook), each does to
    # the function what it does without us, and jaxtyping checks as it would.
    import copy

    import jaxtyping

    def program():
        @jaxtyped(typechecker=beartype)
        def f(x: int) -> int:
            return x

        cell = f.__closure__[f.__code__.co_freevars.index("fn")]
        out = []
        f(0)  # its first check: the profile's hook is in the cell from here on
        held = cell.cell_contents
        out.append((held == f.__wrapped__, hash(held) == hash(f.__wrapped__)))
        out.append((copy.copy(held) is held, copy.deepcopy(held) is held))
        held.__no_type_check__ = True  # off, through the cell
        f.__wrapped__.__no_type_check__ = False  # on again, through the function
        try:
            f("not an int")  # type: ignore[arg-type]
            out.append("no error")
        except jaxtyping.TypeCheckError:
            out.append("checked")
        f.__wrapped__.__no_type_check__ = True
        del held.__no_type_check__  # through the cell: from the function
        out.append(hasattr(f.__wrapped__, "__no_type_check__"))
        held.__qualname__ = "renamed"
        out.append((f.__wrapped__.__qualname__, held.__qualname__))
        f(1)
        return out

    plain = program()
    with typecheck_guard.profile() as prof:
        profiled = program()
    assert (
        profiled
        == plain
        == [
            (True, True),
            (True, True),
            "checked",
            False,
            ("renamed", "renamed"),
        ]
    )
    assert sum(site.failed for site in prof.sites) == 1
    assert sum(site.count for site in prof.sites) == 3


def _jaxtyped_object(typechecker, obj):
    """`jaxtyped(typechecker=...)(obj)` for a callable object, or `None` where
    jaxtyping can't decorate one (its oldest supported releases read the object's
    type hints with `typing.get_type_hints`, which takes no instance)."""
    try:
        return jaxtyped(typechecker=typechecker)(obj)
    except TypeError:
        return None


def test_a_row_keeps_its_name_whatever_is_written_through_the_closure_cell():
    # A row is named when its function is first checked (docs/cli.md): renaming
    # the function through jaxtyping's closure cell after that, where the profile's
    # stand-in sits on 3.11 from the first check on, does not rename it either.
    @jaxtyped(typechecker=beartype)
    def f(x: int) -> int:
        return x

    cell = f.__closure__[f.__code__.co_freevars.index("fn")]
    name = f"{f.__module__}.{f.__qualname__}"
    with typecheck_guard.profile() as prof:
        f(0)
        cell.cell_contents.__module__ = "elsewhere"
        for i in range(3):
            f(i)
    assert f.__wrapped__.__module__ == "elsewhere"
    assert [(s.name, s.count) for s in prof.sites] == [(name, 4)]


def test_a_checked_callable_object_is_named_after_itself_every_time():
    class Scale:
        __globals__ = globals()  # what jaxtyping reads off a function
        __name__ = "Scale"

        def __call__(self, x: int) -> int:
            return x

    scale = _jaxtyped_object(beartype, Scale())
    if scale is None:
        pytest.skip("this jaxtyping can't decorate a callable object")
    with typecheck_guard.profile() as prof:
        for i in range(3):
            scale(i)
    assert [(s.name, s.count) for s in prof.sites] == [
        (f"{__name__}.{Scale.__qualname__}(...)", 3)
    ]


def test_the_profile_registers_no_thread_of_its_own():
    # A thread `threading` did not start (one of JAX's, running a host callback,
    # or `_thread`'s) is named without registering it: `threading.current_thread()`
    # would leave a `Dummy-N` thread behind, and take a number from `Thread-N`.
    import _thread

    @jaxtyped(typechecker=beartype)
    def g(x: int) -> int:
        return x

    done = threading.Event()

    def raw():
        g(1)
        done.set()

    before = {t.ident for t in threading.enumerate()}
    with typecheck_guard.profile() as prof:
        _thread.start_new_thread(raw, ())
        assert done.wait(10)
    time.sleep(0.1)
    assert {t.ident for t in threading.enumerate()} <= before
    (site,) = prof.sites
    (name,) = site.threads
    assert name.startswith("thread ") and int(name.split()[1]) > 0


def test_an_off_switch_of_the_programs_runs_as_often_as_without_the_profile():
    # `__no_type_check__` may be the program's own object, whose truth is its code
    # (here: true every second time it is asked), or a property: jaxtyping asks it
    # once per call. The profile asks nothing that runs it, and counts as checks
    # exactly the calls jaxtyping checked (counted by the checker's stub).
    checks: list[Any] = []
    counting = _counting_beartype(checks)

    class EverySecond:
        asked = 0

        def __bool__(self):
            EverySecond.asked += 1
            return EverySecond.asked % 2 == 0

    class Scale:
        __globals__ = globals()  # what jaxtyping reads off a function
        __name__ = "Scale"
        read = 0

        @property
        def __no_type_check__(self):
            Scale.read += 1
            return False

        def __call__(self, x: int) -> int:
            return x

    def program():
        EverySecond.asked = Scale.read = 0
        checks.clear()

        @jaxtyped(typechecker=counting)
        def f(x: int) -> int:
            return x

        f.__wrapped__.__no_type_check__ = EverySecond()
        scale = _jaxtyped_object(counting, Scale())
        for i in range(4):
            f(i)
            if scale is not None:
                scale(i)
        return EverySecond.asked, Scale.read, len(checks) // 2, scale is not None

    plain = program()
    with typecheck_guard.profile() as prof:
        profiled = program()
    assert profiled == plain
    # f's first and third calls, and each of scale's where jaxtyping decorates one
    assert plain[2] == 2 + 4 * plain[3]
    assert sum(site.count for site in prof.sites) == plain[2]


def test_the_report_fits_100_columns():
    # A terminal's and the documentation's width: long site names break over lines
    # in their column, at spaces and after dots; nothing is cut.
    from typecheck_guard._profile._data import Record, Totals
    from typecheck_guard._profile._report import format_text

    prof = Totals()
    prof.label = (
        "tests/very/long/path/to/test_module.py::TestClass::test_a_long_name[a-b]"
    )
    checked = "mylib.submodule.deeply.nested.ModuleName.ClassName.__init__"
    jitted = "jax.jit(mylib.training.loop.train_step_with_a_long_name)"
    for thread in ("MainThread", "worker-1"):
        prof._add(
            Record(
                checked,
                "jaxtyping with beartype",
                "constructor",
                "dispatch",
                jitted,
                None,
                False,
                thread,
                0.5,
                failed=True,
                rebuild=True,
            )
        )
    text = format_text(prof)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, text
    header = next(i for i, line in enumerate(lines) if line.endswith("site"))
    column = len(lines[header]) - len("site")
    label = lines[header + 1][column:].split(" ")
    for line in lines[header + 2 :]:
        if not line.strip():
            break
        assert line[:column].strip() == ""  # continued in the site's column
        label.append(line[column:])
    assert " ".join(label).replace(". ", ".") == (
        "mylib.submodule.deeply.nested.ModuleName.ClassName (jaxtyping with beartype) "
        "in jax.jit(mylib.training.loop.train_step_with_a_long_name) [2 failed] "
        "[threads: MainThread, worker-1]"
    ).replace(". ", ".")
    assert "test_a_long_name[a-b]" in text


ALONE = """
from beartype import beartype
from jaxtyping import Array, Float, PyTree, jaxtyped
import jax.numpy as jnp


@beartype
def alone(x: int) -> int:
    return x


@beartype
def tree(x: PyTree[Float[Array, "..."]]) -> None:
    pass


@jaxtyped(typechecker=beartype)
def together(x: int) -> int:
    return x


for _ in range(2):
    alone(1), tree({"a": jnp.ones(2)}), together(1)
"""


@pytest.mark.parametrize("every_checker", [False, True])
def test_what_the_profile_watches_and_says_it_does_not(every_checker, capsys):
    # Python 3.11 sees checks where their checker enters them, with no profile
    # function (the rest of the program runs at full speed): every jaxtyping check,
    # and `isinstance(x, PyTree[...])` under any checker; a check by beartype or
    # typeguard alone of other annotations only with `every_checker=True`. The
    # report says what it did not watch. 3.12+ sees them all.
    with typecheck_guard.profile(every_checker=every_checker) as prof:
        exec(compile(ALONE, "alone.py", "exec"), {})
    counts = {
        s.checked.split(" in ")[0].removeprefix("__main__."): s.count
        for s in prof.sites
    }
    partial = sys.version_info < (3, 12) and not every_checker
    if partial:  # the PyTree check of `tree`, not the rest of beartype's
        # (how the annotation prints depends on the jaxtyping and jaxlib releases)
        [pytree] = [k for k in counts if k.startswith("isinstance(..., PyTree[")]
        assert pytree.endswith("'...']])")
        assert counts == {"together": 2, pytree: 2}
    else:
        assert counts == {"together": 2, "alone": 2, "tree": 2}
    prof.report()
    out = capsys.readouterr().out
    note = (
        f"not watched on Python 3.{sys.version_info[1]}: checks by beartype or "
        "typeguard alone "
        "(profile(every_checker=True) or --every-checker watches them, slower)"
    )
    assert (note in " ".join(out.split())) is partial
    with pytest.raises(TypeError, match="`every_checker` must be True or False"):
        typecheck_guard.profile(every_checker="yes")  # type: ignore[arg-type]


# --- the profiler's own cost -------------------------------------------------------


def _totals(wall: float, profiler: float, checks: list[float]) -> Any:
    """A recorder with a known wall time, profiler time and checks (no clock)."""
    from typecheck_guard._profile._data import Record, Totals

    totals = Totals()
    totals._wall, totals._profiler = wall, profiler
    for i, seconds in enumerate(checks):
        totals._add(
            Record(
                f"m.f{i}",
                "jaxtyping",
                "function",
                "eager",
                None,
                None,
                False,
                "MainThread",
                seconds,
            )
        )
    return totals


def test_profile_report_states_the_profilers_own_cost():
    from typecheck_guard._profile._report import format_text, to_dict

    # 2.61 s measured, 0.83 s of it the profiler's: 1.47x; the checks took 0.5 s
    # and 0.2 s, of the 1.78 s the run would have taken.
    totals = _totals(2.61, 0.83, [0.5, 0.2])
    assert totals.unprofiled_seconds == pytest.approx(1.78)
    assert totals.overhead == pytest.approx(2.61 / 1.78)
    text = format_text(totals)
    lines = text.splitlines()
    assert lines[0] == (
        "typecheck-guard profile: typechecks took 39.3% of the run (700.00 ms of "
        "1.78 s);"
    )
    assert lines[2:4] == [
        "Profiling made this run about 1.47x slower: 830.00 ms of its 2.61 s was the "
        "profiler's own (an",
        "estimate); the percentages are of the 1.78 s the run would have taken "
        "without it.",
    ]
    # The share column: of the 1.78 s.
    assert " 28.1%  eager " in lines[6] and " 11.2%  eager " in lines[7]
    assert "share: of the wall time less the profiler's own, as estimated" in (
        " ".join(text.split())
    )
    data = to_dict(totals)
    assert data["wall_seconds"] == 2.61
    assert data["profiler_seconds"] == pytest.approx(0.83)
    assert data["unprofiled_seconds"] == pytest.approx(1.78)
    assert data["overhead"] == pytest.approx(2.61 / 1.78)
    assert [s["share"] for s in data["sites"]] == pytest.approx(
        [0.5 / 1.78, 0.2 / 1.78]
    )
    assert data["headline"].startswith("typechecks took 39.3% of the run (700.00 ms")


def test_profile_report_is_silent_about_a_small_overhead():
    from typecheck_guard._profile._report import format_text, overhead_line

    # 1.1x and under: not worth a line; the base is still the corrected one.
    totals = _totals(1.1, 0.1, [0.5])
    assert totals.overhead == pytest.approx(1.1)
    assert overhead_line(totals) is None
    text = format_text(totals)
    assert "made this run about" not in text
    assert "took 50.0% of the run (500.00 ms of 1.00 s)" in text
    # An estimate that is not below the time outside the checks can't be told
    # apart from the run's own: nothing is taken off, and the report says so.
    for estimate in (0.5, 0.9):
        totals = _totals(1.0, estimate, [0.5])
        assert totals.estimated_profiler_seconds == estimate
        assert totals.profiler_seconds == 0.0 and totals.unprofiled_seconds == 1.0
        assert totals.overhead == 1.0
        text = " ".join(format_text(totals).split())
        assert "took 50.0% of the run (500.00 ms of 1.00 s)" in text
        assert (
            "The profiler's own cost could not be told apart from the run's (its "
            f"estimate, {estimate * 1e3:.2f} ms, is not below the 500.00 ms spent "
            "outside checks); the percentages are of the measured wall time."
        ) in text
    # A profile a few microseconds long: the same, never a ratio of nothing.
    empty = _totals(3.1e-05, 3.1e-05, [])
    assert empty.profiler_seconds == 0.0 and empty.overhead == 1.0
    assert "could not be told apart" in format_text(empty)


def _many_checks() -> None:
    @jaxtyped(typechecker=beartype)
    def leaf(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x

    x = jnp.ones((3,))
    for _ in range(50):
        leaf(x)


@pytest.mark.parametrize("every_checker", [False, True])
def test_profile_counts_and_measures_its_own_work(every_checker, monkeypatch):
    from typecheck_guard._profile import _engine

    # Unforced: what it counts and measures stays within the wall time outside
    # the checks.
    with typecheck_guard.profile(every_checker=every_checker) as prof:
        before = _engine.spent()
        _many_checks()
        after = _engine.spent()
    # Each check's start and end is measured; each callback or hook call counted.
    assert after[0] > before[0]
    assert after[1] + after[2] - before[1] - before[2] >= 50
    # Whether the estimate is below the time outside the checks depends on the
    # machine's load (it is counted calls times a cost per call measured at the
    # start); the rule that decides what is taken off does not.
    estimate = prof.estimated_profiler_seconds
    assert estimate > 0
    outside = prof.wall_seconds - prof.check_seconds
    assert prof.profiler_seconds == (estimate if estimate < outside else 0.0)
    assert prof.unprofiled_seconds == pytest.approx(
        prof.wall_seconds - prof.profiler_seconds
    )
    data = prof.to_dict()
    assert data["overhead"] == pytest.approx(
        data["wall_seconds"] / data["unprofiled_seconds"]
    )
    # Forced: a second per counted call makes the estimate more than all of the
    # run outside the checks: nothing is taken off, and the report says so.
    monkeypatch.setattr(_engine, "_rates", {})
    monkeypatch.setattr(_engine, "_rate", (1.0, 1.0))
    monkeypatch.setattr(_engine, "_calibrate", lambda: None)
    with typecheck_guard.profile(every_checker=every_checker) as prof:
        _many_checks()
    assert prof.estimated_profiler_seconds > prof.wall_seconds - prof.check_seconds
    assert prof.profiler_seconds == 0.0
    assert prof.unprofiled_seconds == prof.wall_seconds and prof.overhead == 1.0
    text = " ".join(
        __import__("typecheck_guard._profile._report", fromlist=["x"])
        .format_text(prof)
        .split()
    )
    assert "The profiler's own cost could not be told apart from the run's" in text
    assert "the percentages are of the measured wall time." in text
    assert "made this run about" not in text


def test_calibration_does_not_read_the_checks_clock(monkeypatch):
    # A test that swaps the clock checks are timed with, and happens to run the
    # process's first profile, must not fix its ticks in the process's calibration
    # (CI once calibrated 1.0 s per hook call under a clock that ticks per reading).
    from typecheck_guard._profile import _engine

    monkeypatch.setattr(_engine, "_rates", {})
    ticks = itertools.count()
    monkeypatch.setattr(_detect, "_clock", lambda: float(next(ticks)))
    with typecheck_guard.profile():
        pass
    backend = "monitoring" if sys.version_info >= (3, 12) else "hooks"
    assert max(_engine._rates[backend]) < 1e-3


def test_profile_calibrates_each_backend_once():
    from typecheck_guard._profile import _engine

    with typecheck_guard.profile():
        pass
    backend = "monitoring" if sys.version_info >= (3, 12) else "hooks"
    rate = _engine._rates[backend]
    # A counted call costs something, and less than a millisecond.
    assert 0 < max(rate) < 1e-3
    with typecheck_guard.profile():
        assert _engine._rate is rate


VERDICT_UNDER_PROFILE = """
import sys
import jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped
import typecheck_guard

calls = [0]


def counting(fn):
    checked = beartype(fn)

    def wrapper(*args, **kwargs):
        calls[0] += 1
        return checked(*args, **kwargs)

    return wrapper


def run(profiled):
    @jaxtyped(typechecker=counting)
    @struct.dataclass
    class State:
        w: Float[Array, " n"]

    calls[0] = 0

    def build():
        with typecheck_guard.unflatten_safe():
            for _ in range(3):
                State(jnp.ones(3))

    if profiled:
        with typecheck_guard.profile(every_checker=sys.argv[1] == "every"):
            build()
    else:
        build()
    return calls[0]


# Profiled first: jaxtyping's internals are first read while the profiler's
# stand-ins are in place, as in a program profiled from its start.
print(run(True), run(False))
"""


@pytest.mark.parametrize("every_checker", [False, True])
def test_profiling_changes_no_verdict(every_checker):
    # The profiler's stand-ins for jaxtyping's PyTree check are not what
    # `unflatten_safe`'s verdict cache models: read while they are in place, the
    # cache still works, so a construction repeated in a block is checked once,
    # profiled or not.
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            VERDICT_UNDER_PROFILE,
            "every" if every_checker else "default",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    profiled, plain = map(int, out.stdout.split())
    assert plain > 0
    assert profiled == plain


def _quantity(typecheck, build):
    """A checked dataclass node whose registered unflatten builds it with
    `build(cls, unit, value)`."""
    import dataclasses

    @jaxtyped(typechecker=typecheck)
    @dataclasses.dataclass
    class Quantity:
        value: Float[Array, "..."]
        unit: str

    jax.tree_util.register_pytree_node(
        Quantity,
        lambda q: ((q.value,), q.unit),
        lambda unit, children: build(Quantity, unit, children[0]),
    )
    return Quantity


def _directly(cls, unit, value):
    return cls(value, unit)


def _through_a_factory(cls, unit, value):
    return _directly(cls, unit, value)  # a helper of the helper


@pytest.mark.allow_runtime_typechecks
def test_a_node_built_by_its_unflattens_helper_is_a_rebuild(typecheck):
    # A registered unflatten that builds the node through a factory function (the
    # rule `install()`'s evidence uses: every frame in between runs the unflatten's
    # own code) is JAX rebuilding the tree, as when it calls the class itself: the
    # same windows, counts and removable checks (review round 15, F5).
    def rows(build):
        Quantity = _quantity(typecheck, lambda cls, unit, v: build(cls, unit, v))
        step = jax.jit(lambda q: jax.tree.map(lambda v: 2 * v, q))
        with typecheck_guard.profile() as profile:
            q = Quantity(jnp.ones(3), "m")
            for _ in range(3):
                q = step(q)
        return {
            (s["when"], s["count"], s["removable"], s["rebuild"])
            for s in profile.to_dict()["sites"]
        }

    direct, factory = rows(_directly), rows(_through_a_factory)
    assert direct == factory
    assert {when for when, *_ in factory} == {
        "compile",
        "tree",
        "dispatch",
        "construction",
    }
    assert all(removable for when, _, removable, _ in factory if when != "construction")

    # A function the unflatten is handed (not its own code) builds the node: a
    # construction, as install() checks it.
    def handed(cls, unit, value, make=_directly):
        return (lambda: make(cls, unit, value))()

    made = rows(handed)
    assert ("construction", 1, False, False) in made


# `with profile():` around the ways a program calls a jitted callable made before
# the block, one block each: what the program's line calls is read where no code of
# the program's runs, through JAX's, Equinox's and Flax's own frames; a jitted call
# made from them is a `dispatch`, named as the command line names it, and a line
# that may have called one without us telling (C code calling back, a property,
# an iterator unpacked at the call) is `unclear`, never a construction.
API_CALL_FORMS = """
import functools
import json
import os
import sys
from typing import Any, NamedTuple, Union

import equinox as eqx
import jax
import jax.numpy as jnp
from beartype import beartype
from flax import nnx, struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard


@jaxtyped(typechecker=beartype)
@struct.dataclass
class State:
    x: Float[Array, " n"]


@jaxtyped(typechecker=beartype)
@struct.dataclass
class Loose:  # Equinox, NNX and lowering rebuild it with placeholders too
    x: Union[Float[Array, "*b n"], object]


@jax.tree_util.register_pytree_node_class
class Node:
    @jaxtyped(typechecker=beartype)
    def __init__(self, x: Float[Array, " n"]):
        self.x = x

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


def double(s):
    return s.replace(x=s.x * 2)


@jax.jit
def noted(s):  # a host callback: each call takes JAX's Python dispatch
    jax.debug.callback(lambda v: None, s.x)
    return s.replace(x=s.x * 2)


@jax.jit
def node_noted(n):
    jax.debug.callback(lambda v: None, n.x)
    return Node(n.x * 2)


@jax.jit
def make(x):
    return State(x * 2)


step = jax.jit(double)


class Holder:
    step = staticmethod(jax.jit(double))

    @property
    def prop(self):
        return step


class Slotted:
    __slots__ = ("step",)

    def __init__(self):
        self.step = step


class Steps(NamedTuple):
    step: Any


class Runner:
    def __init__(self):
        self.fn = step

    def pick(self, s):  # could rebind self.fn before the call: we can't tell
        return s


class Meta(type):  # counts what the profile must not call
    calls = 0

    def __getattribute__(cls, name):
        Meta.calls += 1
        return type.__getattribute__(cls, name)

    def __hash__(cls):
        Meta.calls += 1
        return id(cls)

    def __eq__(cls, other):
        Meta.calls += 1
        return cls is other


class Metered(metaclass=Meta):
    pass


def class_body():
    class Body:  # a class body's names (and a comprehension in it skips them)
        out = [step(s) for _ in range(1)]


def inner(s):
    return s.replace(x=s.x * 2)


wrapped = functools.update_wrapper(jax.jit(inner), double)  # named as jit's own
# Code compiled under another file's name: the source on disk is not what runs.
with open("swapped.py", "w") as file:
    file.write("make(s)\\n")
swapped = compile("step(s)\\n", os.path.abspath("swapped.py"), "exec")
holder, slotted, steps, fns = Holder(), Slotted(), Steps(step), {"noted": noted}
runner, metered = Runner(), Metered()


class Model(eqx.Module):  # its own __getattribute__ is Equinox's
    step: Any

    def __call__(self, s):
        return self.step(s)  # a field holding a jitted function (with a __get__)
metered.step = step
eqx_step = eqx.filter_jit(double)
model = Model(eqx_step)
nnx_step = nnx.jit(double)
nnx_named = type(nnx_step).__name__ == "JitWrapped"
pmapped = jax.pmap(double)
s, xs, n = State(jnp.ones(3)), [jnp.ones(3), jnp.ones(3)], Node(jnp.ones(3))
loose, batched = Loose(jnp.ones(3)), Loose(jnp.ones((1, 3)))
compiled = jax.jit(double).lower(loose).compile()
for warm in (step, noted, holder.step, wrapped):
    warm(s)
make(xs[0]), node_noted(n), eqx_step(loose), nnx_step(loose), pmapped(batched)
compiled(loose)
treedef = jax.tree_util.tree_structure(s)
sections = {
    "tree.map(make, xs)": lambda: jax.tree.map(make, xs),
    "node, Python dispatch": lambda: node_noted(n),
    "unread, Python dispatch": lambda: fns["noted"](s),
    "staticmethod": lambda: holder.step(s),
    "slot": lambda: slotted.step(s),
    "NamedTuple field": lambda: steps.step(s),
    "property": lambda: holder.prop(s),
    "list(map(make, xs))": lambda: list(map(make, xs)),
    "step(*map(State, xs))": lambda: step(*map(State, xs[:1])),
    "equinox.filter_jit": lambda: eqx_step(loose),
    "flax.nnx.jit": lambda: nnx_step(loose),
    "jax.pmap": lambda: pmapped(batched),
    "compiled": lambda: compiled(loose),
    "an Equinox module's field": lambda: model(loose),
    "an argument runs code": lambda: runner.fn(runner.pick(s)),
    "a metaclass of the program's": lambda: metered.step(s),
    "a class body": class_body,
    "update_wrapper": lambda: wrapped(s),
    "another file's name": lambda: exec(swapped, globals()),
    "tree.map(f, s)": lambda: jax.tree.map(lambda v: v + 1, s),
    "tree_unflatten": lambda: jax.tree_util.tree_unflatten(treedef, [s.x]),
    "construction": lambda: State(s.x),
    "replace": lambda: s.replace(x=s.x),
}
out = {"nnx_named": nnx_named}
for name, section in sections.items():
    Meta.calls = 0
    with typecheck_guard.profile() as prof:
        for _ in range(2):
            section()
    if name == "a metaclass of the program's":
        out["metaclass calls"] = Meta.calls
    out[name] = sorted(
        [site["site"], site["when"], site["jitted"], site["count"]]
        for site in prof.to_dict()["sites"]
    )
json.dump(out, sys.stdout)
"""


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="what a line calls is read off its source span (co_positions, 3.11+)",
)
def test_profile_api_reads_every_way_a_program_calls_a_jitted_function(
    tmp_path: Path,
):
    proc = run_script(tmp_path, API_CALL_FORMS)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    state, loose, node = "__main__.State", "__main__.Loose", "__main__.Node"
    dispatch = "jax.jit(__main__.double)"
    expected = {
        # JAX's `tree_map` calls `make` from its own frames.
        "tree.map(make, xs)": [[state, "dispatch", "jax.jit(__main__.make)", 4]],
        # Rebuilt by the class's registered unflatten, called from JAX's Python.
        "node, Python dispatch": [
            [node, "dispatch", "jax.jit(__main__.node_noted)", 2]
        ],
        "unread, Python dispatch": [[state, "unclear", None, 2]],
        "staticmethod": [[state, "dispatch", dispatch, 2]],
        "slot": [[state, "dispatch", dispatch, 2]],
        "NamedTuple field": [[state, "dispatch", dispatch, 2]],
        # Reading a property runs the program's code.
        "property": [[state, "unclear", None, 2]],
        # C code that calls back: the program's line calls `list`.
        "list(map(make, xs))": [[state, "unclear", None, 4]],
        # `State` is built at the instruction that calls `step`, and so is the
        # rebuild of `step`'s output: the two can't be told apart.
        "step(*map(State, xs))": [[state, "unclear", None, 4]],
        "equinox.filter_jit": [
            [loose, "dispatch", "equinox.filter_jit(__main__.double)", 6]
        ],
        "flax.nnx.jit": [[loose, "dispatch", "flax.nnx.jit(__main__.double)", 10]],
        "jax.pmap": [[loose, "dispatch", "jax.pmap(__main__.double)", 2]],
        "compiled": [[loose, "dispatch", "jax.stages.Compiled", 2]],
        "an Equinox module's field": [
            [loose, "dispatch", "equinox.filter_jit(__main__.double)", 6]
        ],
        "an argument runs code": [[state, "unclear", None, 2]],
        # (An instance's attribute is found without its class's metaclass.)
        "a metaclass of the program's": [[state, "dispatch", dispatch, 2]],
        "metaclass calls": 0,
        # 3.12+ runs the comprehension in the class body's frame, whose names
        # it skips; before, in a function of its own, which reads the global.
        "a class body": [
            [state, "unclear", None, 2]
            if sys.version_info >= (3, 12)
            else [state, "dispatch", dispatch, 2]
        ],
        "update_wrapper": [[state, "dispatch", "jax.jit(__main__.inner)", 2]],
        "another file's name": [[state, "unclear", None, 2]],
        "tree.map(f, s)": [[state, "tree", None, 2]],
        "tree_unflatten": [[state, "tree", None, 2]],
        "construction": [[state, "construction", None, 2]],
        "replace": [[state, "construction", None, 2]],
    }
    if not got.pop("nnx_named"):  # an older Flax: nnx.jit returns a function
        del expected["flax.nnx.jit"], got["flax.nnx.jit"]
    assert got == expected


@pytest.mark.skipif(
    sys.version_info < (3, 11),
    reason="what a line calls is read off its source span (co_positions, 3.11+)",
)
def test_profile_command_labels_an_ahead_of_time_compiled_call(tmp_path: Path):
    # `jax.jit(f).lower(...).compile()` is made by no factory of ours, even under
    # the command, which sees every other jitted call: its output's rebuilds were
    # filed as the program's constructions.
    _, report = _profile(
        tmp_path,
        """
        from typing import Union

        import jax
        import jax.numpy as jnp
        from beartype import beartype
        from flax import struct
        from jaxtyping import Array, Float, jaxtyped


        @jaxtyped(typechecker=beartype)
        @struct.dataclass
        class Loose:  # lowering rebuilds it with placeholders
            x: Union[Float[Array, " n"], object]


        loose = Loose(jnp.ones(3))
        compiled = jax.jit(lambda s: s.replace(x=s.x * 2)).lower(loose).compile()
        for _ in range(3):
            loose = compiled(loose)
        """,
    )
    rows = _rows(report, "__main__.Loose")
    # (The first call, through JAX's Python, rebuilds twice on jax 0.10.)
    assert rows.pop(("dispatch", "jax.stages.Compiled")) >= 3
    assert rows.pop(("construction", None)) == 1  # `Loose(jnp.ones(3))`
    # Lowering: JAX traces `loose`, and rebuilds it in its own tree code.
    assert set(rows) <= {("trace", None), ("compile", None), ("tree", None)}


# A program under jaxtyping's import hook, which checks every function of Equinox
# (and of a module of the program's own, `counted`, whose calls it counts): the
# profiler's own reads of a jitted callable (the function `equinox.filter_jit`
# wraps, which Equinox's `__wrapped__` puts back together through its checked
# functions) ran checks inside its bookkeeping. On Python 3.11 one of them, an
# `isinstance(x, PyTree[...])` of a checked return value, opened a check that never
# closed: every later check in the process went unreported (Equinox's own suite: 2,813
# of 42,966 checks). The count of `counted.mark` in the report is the program's.
IMPORT_HOOK_PROGRAM = """
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from jaxtyping import install_import_hook

with install_import_hook(["equinox", "counted"], "beartype.beartype"):
    import counted
    import equinox as eqx
import jax.numpy as jnp


def run():
    def double(x):
        return x * 2

    step = eqx.filter_jit(double)
    for _ in range(3):
        counted.mark(1)
    step(jnp.zeros(2))
    step(jnp.zeros(2))
    for _ in range(5):
        counted.mark(2)
    nested = eqx.filter_jit(eqx.filter_jit(double))
    nested(jnp.zeros(2))
    counted.mark(3)


if sys.argv[1:] == ["api"]:
    import typecheck_guard

    with typecheck_guard.profile() as prof:
        run()
    sites = prof.to_dict()["sites"]
else:
    run()
    sites = None
print(json.dumps({"marks": counted.CALLS, "sites": sites}))
"""

COUNTED = """
CALLS = 0


def mark(x: int) -> int:
    global CALLS
    CALLS += 1
    return x
"""


@pytest.mark.parametrize("how", ["command", "api"])
def test_profile_under_jaxtypings_import_hook_reports_every_check(
    tmp_path: Path, how: str
):
    (tmp_path / "counted.py").write_text(COUNTED)
    if how == "command":
        proc, report = _profile(tmp_path, IMPORT_HOOK_PROGRAM)
        sites = report["sites"]
    else:
        (tmp_path / "prog.py").write_text(IMPORT_HOOK_PROGRAM)
        env = dict(os.environ)
        src = str(Path(typecheck_guard.__file__).parents[1])
        env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        proc = subprocess.run(
            [sys.executable, "prog.py", "api"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        sites = json.loads(proc.stdout.strip().splitlines()[-1])["sites"]
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["marks"] == 9
    marks = {
        (s["when"], s["kind"]): s["count"]
        for s in sites
        if s["checked"] == "counted.mark"
    }
    assert marks == {("eager", "function"): out["marks"]}
    # Equinox's own checks while JAX traces the jitted functions, and at dispatch.
    whens = {s["when"] for s in sites if s["checked"].startswith("equinox.")}
    assert {"eager", "trace"} <= whens


def test_jaxtypings_memo_functions_a_program_took_while_profiled_still_work_after():
    # A program that wraps `push_shape_memo` / `pop_shape_memo` while the profile
    # runs holds our hooks in its wrapper; they forward to jaxtyping's own after the
    # profile stopped (they had called `None`: `TypeError` at the next check).
    from jaxtyping import _decorator

    @jaxtyped(typechecker=beartype)
    def f(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x

    before = (_decorator.push_shape_memo, _decorator.pop_shape_memo)
    calls = []
    try:
        with typecheck_guard.profile():
            push, pop = _decorator.push_shape_memo, _decorator.pop_shape_memo

            def counting_push(arguments):
                calls.append("push")
                return push(arguments)

            def counting_pop():
                calls.append("pop")
                return pop()

            _decorator.push_shape_memo = counting_push
            _decorator.pop_shape_memo = counting_pop
            f(jnp.ones(3))
        f(jnp.ones(3))
        with pytest.raises(Exception, match="f"):
            f(jnp.ones((2, 2)))
        # Our hooks put back as jaxtyping's own: a new profile calls past them
        # (they had been its "originals", which call it: `RecursionError`).
        _decorator.push_shape_memo, _decorator.pop_shape_memo = push, pop
        f(jnp.ones(3))
        with typecheck_guard.profile() as again:
            f(jnp.ones(3))
        f(jnp.ones(3))
        # The program's wrappers around our hooks left in place: the next profile's
        # hooks call them, and they call our old ones, which call jaxtyping's own
        # (they had called the new ones' "originals", the program's wrappers again:
        # `RecursionError`).
        _decorator.push_shape_memo = counting_push
        _decorator.pop_shape_memo = counting_pop
        with typecheck_guard.profile() as third:
            f(jnp.ones(3))
        f(jnp.ones(3))
    finally:
        _decorator.push_shape_memo, _decorator.pop_shape_memo = before
    assert calls == ["push", "pop"] * 5
    for prof in (again, third):
        assert [(s["site"], s["count"]) for s in prof.to_dict()["sites"]] == [
            (f"{__name__}.{f.__qualname__}", 1)
        ]


def test_a_push_shape_memo_of_the_programs_that_raises_ends_no_check():
    # The program's wrapper of jaxtyping's `push_shape_memo`, which the profile's
    # hook calls, raises once: jaxtyping never reaches `pop_shape_memo`. On Python
    # 3.11 the check opened at the binding stayed open, and every later check of
    # the thread was filed as part of it (none reported).
    from jaxtyping import _decorator

    @jaxtyped(typechecker=beartype)
    def f(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x

    push = _decorator.push_shape_memo
    raised = []

    def raising_push(arguments):
        if not raised:
            raised.append(True)
            raise RuntimeError("the program's own")
        return push(arguments)

    _decorator.push_shape_memo = raising_push
    try:
        with typecheck_guard.profile() as prof:
            with pytest.raises(RuntimeError, match="the program's own"):
                f(jnp.ones(3))
            for _ in range(5):
                f(jnp.ones(3))
            with pytest.raises(Exception, match="f"):
                f(jnp.ones((2, 2)))
    finally:
        _decorator.push_shape_memo = push
    assert [(s.when, s.count, s.failed) for s in prof.sites] == [("eager", 6, 1)]
