"""`typecheck-guard profile`, `typecheck_guard.profile()` and
`pytest --typecheck-guard-profile`: exact counts per site and per `when`, the fix
named for each, and what `--install` leaves.

The command runs in a fresh interpreter (it runs a program as `python` would); the
programs are written for the test, with the checker given on their command line.
"""

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped

import typecheck_guard
from typecheck_guard._compat import _versions

N_CALLS = 6
M_EAGER = 4

MIX = """
import sys

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped

if sys.argv[1] == "beartype":
    from beartype import beartype as typechecker
else:
    from typeguard import typechecked as typechecker
N, M = int(sys.argv[2]), int(sys.argv[3])


@jaxtyped(typechecker=typechecker)
@struct.dataclass
class State:
    params: PyTree[Float[Array, "..."]]
    step: Float[Array, ""]


@jax.jit
def train_step(state):
    return state.replace(
        params=jax.tree.map(lambda p: p * 0.9, state.params), step=state.step + 1
    )


@jax.jit
def make(x):
    return State({"w": x}, jnp.zeros(())).params["w"] * 2


@jaxtyped(typechecker=typechecker)
def norm(params: PyTree[Float[Array, "..."]]) -> Float[Array, ""]:
    return sum(jnp.sum(p) for p in jax.tree.leaves(params))


state = State({f"w{i}": jnp.ones(3) for i in range(8)}, jnp.zeros(()))
for _ in range(N):
    state = train_step(state)
make(jnp.ones(3))
state = jax.tree.map(lambda x: x, state)
for _ in range(M):
    norm(state.params)
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


@pytest.mark.parametrize("checker", ["beartype", "typeguard"])
def test_profile_counts_each_when_exactly(tmp_path: Path, checker: str):
    proc, report = _profile(tmp_path, MIX, checker, str(N_CALLS), str(M_EAGER))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"ran {N_CALLS} {M_EAGER}\n"

    state = _rows(report, "__main__.State")
    # One unflatten of the output per call, the first call's included.
    assert state[("dispatch", "jax.jit(__main__.train_step)")] == N_CALLS
    assert state[("tree", None)] == 1
    assert state[("construction", None)] == 1
    # The construction inside `make`, checked once, while JAX traced it.
    assert state[("trace", "jax.jit(__main__.make)")] == 1
    # `train_step`'s trace: its input rebuilt from tracers and `replace`, then the
    # compilation's own unflattens of its input paths and outputs: once each.
    assert state[("trace", "jax.jit(__main__.train_step)")] >= 2
    assert _rows(report, "__main__.norm") == {("eager", None): M_EAGER}

    sites = {(s["site"], s["when"], s["jitted"]): s for s in report["sites"]}
    dispatch = sites["__main__.State", "dispatch", "jax.jit(__main__.train_step)"]
    assert dispatch["checker"] == f"jaxtyping with {checker}"
    assert "typecheck_guard.install() before State is defined" in dispatch["fix"]
    assert "the first line of prog.py" in dispatch["fix"]
    assert (
        "train_step = typecheck_guard.unflatten_safe(jax.jit(train_step))"
        in dispatch["fix"]
    )
    assert "registered by flax.struct.dataclass" in dispatch["scan"]
    assert "install() covers it" in dispatch["scan"]
    tree = sites["__main__.State", "tree", None]
    assert "with typecheck_guard.unflatten_safe():" in tree["fix"]
    assert sites["__main__.norm", "eager", None]["fix"].startswith(
        "typecheck_guard.cache_pytree_checks()"
    )
    assert (
        sites["__main__.State", "trace", "jax.jit(__main__.make)"]["fix"]
        == "traced once: nothing to do"
    )
    for site in report["sites"]:
        assert site["seconds"] > 0 and site["count"] >= 1
        assert {"site", "checker", "when", "count", "seconds", "fix"} <= set(site)
    total = sum(s["seconds"] for s in report["sites"])
    assert report["check_seconds"] == pytest.approx(total)
    assert 0 < report["check_seconds"] < report["wall_seconds"]
    removable = sum(
        s["seconds"] for s in report["sites"] if s["when"] in ("dispatch", "tree")
    )
    assert report["removable_seconds"] == pytest.approx(removable)

    # The table, on stderr.
    assert "typecheck-guard profile: typechecks took " in proc.stderr
    assert "of that is removable" in proc.stderr
    assert "State (jaxtyping with " in proc.stderr
    assert "in jax.jit(train_step)" in proc.stderr


@pytest.mark.parametrize("checker", ["beartype", "typeguard"])
def test_profile_install_leaves_no_dispatch_or_tree_rows(tmp_path: Path, checker: str):
    proc, report = _profile(
        tmp_path, MIX, checker, str(N_CALLS), str(M_EAGER), options=("--install",)
    )
    assert proc.returncode == 0, proc.stderr
    whens = {s["when"] for s in report["sites"]}
    assert "dispatch" not in whens and "tree" not in whens
    state = _rows(report, "__main__.State")
    assert state[("construction", None)] == 1
    assert state[("trace", "jax.jit(__main__.make)")] == 1
    assert _rows(report, "__main__.norm") == {("eager", None): M_EAGER}
    assert report["removable_seconds"] == 0


def test_profile_reports_on_exception_and_keeps_the_exit_code(tmp_path: Path):
    source = MIX + "\nraise ValueError('boom')\n"
    proc, report = _profile(tmp_path, source, "beartype", "2", "1")
    assert proc.returncode == 1
    assert "ValueError: boom" in proc.stderr
    assert "typecheck-guard profile: typechecks took" in proc.stderr
    assert _rows(report, "__main__.norm") == {("eager", None): 1}

    source = MIX + "\nsys.exit(7)\n"
    proc, report = _profile(tmp_path, source, "beartype", "2", "1")
    assert proc.returncode == 7
    assert "typecheck-guard profile: typechecks took" in proc.stderr
    assert _rows(report, "__main__.State")[
        ("dispatch", "jax.jit(__main__.train_step)")
    ] == (2)


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
            "*5  * dispatch * test_steps.S (jaxtyping with beartype) in jax.jit(*",
            "*call typecheck_guard.install() before S is defined (at the top of*",
            "*conftest.py)*",
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
    with typecheck_guard.profile() as prof:
        for _ in range(3):
            first(1.0)
            second(1.0)
    assert sum(s.count for s in prof.sites if s.when == "eager") == 6
