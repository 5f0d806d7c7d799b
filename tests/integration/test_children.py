"""Every process of a program: the children that `typecheck-guard run`, `pytest
--typecheck-guard-install` and `TYPECHECK_GUARD=install` reach, and installed and
plain processes exchanging instances and treedefs.

One parent program (`children_program.py`) per way of turning typecheck_guard on,
each starting a child per mechanism: `multiprocessing.Pool` with spawn, forkserver
and fork, `ProcessPoolExecutor`, `subprocess`; under the pytest option, the parent
is a pytest-xdist worker (`children_session.py`). In every child: no check per
jitted call, constructions checked, and an instance and two treedefs sent each way
rebuild to the values sent (`children_work.py`).

Then every pairing of an installed or plain parent with an installed or plain child
(and a child that can't import typecheck_guard): none crashes or hangs, every value
arrives. A crash would leave a `Pool` waiting forever: every wait has a deadline,
and each program a timeout.
"""

import json
import os
import pathlib
import site
import subprocess
import sys
import time

import pytest

HERE = pathlib.Path(__file__).parent
PROGRAM = "children_program.py"
# Seconds for one program, start to exit (~25 s on a loaded 2-core machine); its
# own deadline for its children is shorter (`children_program.DEADLINE`).
TIMEOUT = 300

MECHANISMS = ("spawn", "forkserver", "fork", "executor", "subprocess")
EVERY = [f"{m}:inherit" for m in MECHANISMS]
# In the order the tests ask for them.
PLANS = {
    # Installed parents, and under `run` also a plain child and one without
    # typecheck_guard.
    "run": EVERY + ["spawn:plain", "subprocess:no-package"],
    "pytest": EVERY,
    "variable": EVERY,
    # A plain parent: installed children, and a plain one.
    "plain": ["spawn:install", "subprocess:install", "subprocess:inherit"],
}

SENT = {"type": "State/Node", "x": [2.0, 2.0, 2.0], "step": 0, "tag": "p"}
SENT_DEFAULTS = ["Defaults", 7, 8]
BACK = {"type": "State/Node", "x": [3.0, 3.0, 3.0], "step": 10, "tag": "p"}
BACK_DEFAULTS = ["Defaults", 30, 40]


def _command(way: str, out: pathlib.Path, tmp: pathlib.Path) -> list[str]:
    plan = ",".join(PLANS[way])
    if way == "run":
        return [sys.executable, "-m", "typecheck_guard", "run", PROGRAM, str(out), plan]
    if way == "pytest":
        ini = tmp / "pytest.ini"
        ini.write_text("[pytest]\n")  # none of this suite's options
        return [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            str(ini),
            "-p",
            "no:cacheprovider",
            "-p",
            "xdist",
            "-n",
            "1",
            "--typecheck-guard-install",
            "-q",
            str(HERE / "children_session.py"),
        ]
    return [sys.executable, PROGRAM, str(out), plan]


def _environment(way: str, out: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TYPECHECK_GUARD"}
    env["JAX_PLATFORMS"] = "cpu"
    if way == "variable":
        env["TYPECHECK_GUARD"] = "install"
    if way == "pytest":
        env["CHILDREN_OUT"] = str(out)
        env["CHILDREN_PLAN"] = ",".join(PLANS[way])
    return env


# Programs run two at a time: each is mostly its processes importing JAX, one
# after another, and two share a 2-core machine's cores without doubling the
# memory of four.
AT_ONCE = 2


class _Programs:
    def __init__(self, tmp_path_factory: pytest.TempPathFactory):
        self.tmp_path_factory = tmp_path_factory
        self.started: dict[str, tuple[subprocess.Popen, pathlib.Path, float]] = {}
        self.done: dict[str, dict] = {}

    def _start(self, way: str) -> None:
        tmp = self.tmp_path_factory.mktemp(way)
        out = tmp / "out.json"
        with open(tmp / "stdout.txt", "w") as log:
            proc = subprocess.Popen(
                _command(way, out, tmp),
                cwd=HERE,
                env=_environment(way, out),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.started[way] = (proc, out, time.monotonic())

    def __call__(self, way: str) -> dict:
        if way in self.done:
            return self.done[way]
        if way == "pytest":
            pytest.importorskip("xdist", reason="the test extra installs it")
        if way not in self.started:
            self._start(way)
        for other in PLANS:
            running = sum(p.poll() is None for p, _, _ in self.started.values())
            if running >= AT_ONCE:
                break
            if other not in self.started and (other != "pytest" or _has_xdist()):
                self._start(other)
        proc, out, began = self.started[way]
        try:
            code = proc.wait(timeout=max(1.0, TIMEOUT - (time.monotonic() - began)))
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        log = (out.parent / "stdout.txt").read_text()[-6000:]
        if code != 0 or not out.exists():
            pytest.fail(
                f"the {way} program failed or overran (exit code {code}):\n{log}"
            )
        self.done[way] = json.loads(out.read_text())
        return self.done[way]

    def close(self) -> None:
        for proc, _, _ in self.started.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _has_xdist() -> bool:
    try:
        import xdist  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    if not any(
        (pathlib.Path(d) / "typecheck_guard.pth").exists()
        for d in site.getsitepackages()
    ):
        pytest.fail(
            "typecheck_guard.pth is not in site-packages: reinstall the package "
            "(pip install -e .) for TYPECHECK_GUARD to reach new processes"
        )
    programs = _Programs(tmp_path_factory)
    yield programs
    programs.close()


def _child(results: dict, entry: str) -> dict:
    got = results["children"][entry]
    if "error" in got:
        pytest.fail(f"{entry}: {got['error']}\n{got['traceback']}")
    return got


def _covered(report: dict) -> None:
    assert report["installed"]
    assert report["checks_per_call"] == [0, 0, 0]
    assert report["bad_construction"] is not None
    assert report["bad_construction_checks"] >= 1


def _crossed(got: dict) -> None:
    received = got["child"]["received"]
    assert received["instance"] == received["rebuilt"] == SENT
    # Not `Defaults()`, what a treedef read as the wrong kind of node builds.
    assert received["defaults"] == SENT_DEFAULTS
    back = got["back"]
    assert back["instance"] == back["rebuilt"] == BACK
    assert back["defaults"] == BACK_DEFAULTS


WAYS = ("run", "pytest", "variable")


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("way", WAYS)
def test_every_child_is_covered(runs, way, mechanism):
    results = runs(way)
    report = _child(results, f"{mechanism}:inherit")["child"]
    _covered(report)
    if mechanism == "fork":
        # A copy of its parent, installed as the parent was.
        assert report["started"] == results["self"]["started"]
    else:
        # Installed as it started, by the variable its parent set (or passed on).
        assert report["started"]


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("way", WAYS)
def test_instances_and_treedefs_cross_both_ways(runs, way, mechanism):
    _crossed(_child(runs(way), f"{mechanism}:inherit"))


@pytest.mark.parametrize("way", WAYS)
def test_the_parent_is_covered(runs, way):
    report = runs(way)["self"]
    _covered(report)
    assert report["received"]["rebuilt"] == SENT
    # Installed as it started: `run` is python with the variable set, and the
    # session's option set it for its pytest-xdist worker.
    assert report["started"]


@pytest.mark.parametrize(
    "way, entry, installed",
    [
        ("run", "spawn:plain", False),  # installed parent, plain child
        ("run", "subprocess:no-package", False),  # ... without typecheck_guard
        ("plain", "spawn:install", True),  # plain parent, installed children
        ("plain", "subprocess:install", True),
        ("plain", "subprocess:inherit", False),  # plain parent, plain child
    ],
)
def test_installed_and_plain_processes_exchange(runs, way, entry, installed):
    results = runs(way)
    assert results["self"]["installed"] == (way != "plain")
    got = _child(results, entry)
    _crossed(got)
    report = got["child"]
    assert report["installed"] == installed
    assert report["importable"] == (entry != "subprocess:no-package")
    if installed:
        _covered(report)
    else:
        # Plain: every call rebuilds the state with its checks, as without us.
        assert all(n >= 2 for n in report["checks_per_call"]), report


XDIST_TESTS = """
import jax
import jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped


@jaxtyped(typechecker=beartype)
@struct.dataclass
class State:
    x: Float[Array, " n"]


STEP = jax.jit(lambda s: s.replace(x=s.x + 1))


def test_step():
    STEP(STEP(STEP(State(jnp.ones(2)))))
"""


def test_the_runtime_guard_in_xdist_workers(pytester: pytest.Pytester):
    # Each worker watches its own tests: strict fails a test whose jitted calls
    # check at dispatch time; the controller ran no test, and says so instead of
    # "no typecheck ran". (With --typecheck-guard-install, those workers pass:
    # test_every_child_is_covered, way "pytest".)
    pytest.importorskip("xdist", reason="the test extra installs it")
    pytester.makepyfile(test_xdist=XDIST_TESTS)
    result = pytester.runpytest_subprocess(
        "-n", "1", "-p", "no:cacheprovider", "--typecheck-guard=strict", timeout=TIMEOUT
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*State.__init__ was typechecked by jaxtyping*",
            "typecheck-guard: the tests ran in pytest-xdist workers*",
        ]
    )
