"""`typecheck-guard run`: the program exactly as `python` runs it (argv, `__main__`
and what it holds, `sys.path[0]`, exit status, tracebacks, SIGINT), with
`install()` in effect from its first line. The in-process runner is shared with
`typecheck-guard profile`.

`run` has two ways, and each test runs both, in fresh interpreters, next to the
same program run by `python` itself, where the two must agree:

- `hook`: the package is installed, so `run` replaces its process with `python`
  and the start-up hook calls `install()` (every detail is python's own, the stack
  included);
- `in-process`: the start-up hook can't run (here: `python -S`, with the package and
  site-packages on `PYTHONPATH`), so `run` calls `install()` and runs the program in
  its own process.
"""

import json
import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import typecheck_guard
from typecheck_guard._tools._runner import (
    Program,
    ProgramError,
    interpreter_options,
    split_command,
)

SRC = str(Path(typecheck_guard.__file__).parents[1])

# What a program sees of how it was started.
SHOW = """
import json
import sys
import traceback

print(json.dumps({
    "argv": sys.argv,
    "orig_argv": sys.orig_argv,
    "path0": sys.path[0],
    "name": __name__,
    "file": __file__,
    "main": sys.modules["__main__"].__dict__ is globals(),
    "builtins": type(__builtins__).__name__,
    "loader": type(__loader__).__name__,
    "spec": None if __spec__ is None else [__spec__.name, type(__spec__.loader).__name__],
    "package": __package__,
    "cached": globals().get("__cached__", "<absent>"),
    "globals": sorted(k for k in globals() if k.startswith("__")),
    "stack": len(traceback.extract_stack()),
    "flags": list(sys.flags),
    "warnoptions": sys.warnoptions,
    "xoptions": sys._xoptions,
}))
"""

WAYS = ["hook", "in-process"]


def _env(way: str) -> dict[str, str]:
    env = dict(os.environ)
    path = [SRC, env.get("PYTHONPATH", "")]
    if way == "in-process":
        # `-S` reads no `.pth` file: the libraries' folders come from PYTHONPATH.
        path[1:1] = site.getsitepackages()
    env["PYTHONPATH"] = os.pathsep.join(path).rstrip(os.pathsep)
    env.pop("TYPECHECK_GUARD", None)
    return env


def _run(
    *args: str,
    cwd: Path,
    way: str = "hook",
    python: bool = False,
    options: tuple[str, ...] = (),
) -> subprocess.CompletedProcess:
    interpreter = [sys.executable, *options] + (["-S"] if way == "in-process" else [])
    command = interpreter if python else [*interpreter, "-m", "typecheck_guard"]
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        env=_env(way),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def _same_as_python(ours: subprocess.CompletedProcess, theirs, way: str) -> dict:
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    got, want = json.loads(ours.stdout), json.loads(theirs.stdout)
    if way == "hook":
        # `python` itself: nothing of ours on the stack, the same command line.
        assert got == want
    else:
        # Our frames are under the program's: the one difference.
        assert got.pop("stack") > want.pop("stack")
        for seen in (got, want):
            seen.pop("orig_argv")
        assert got == want
    return got


@pytest.mark.parametrize("way", WAYS)
def test_script_sees_what_python_shows_it(tmp_path: Path, way: str):
    _write(tmp_path / "sub" / "show.py", SHOW)
    args = ("sub/show.py", "a", "--flag", "-m")
    got = _same_as_python(
        _run("run", *args, cwd=tmp_path, way=way),
        _run(*args, cwd=tmp_path, way=way, python=True),
        way,
    )
    assert got["argv"] == list(args)
    assert got["path0"] == str(tmp_path / "sub")
    assert (got["builtins"], got["loader"], got["spec"], got["package"]) == (
        "module",
        "SourceFileLoader",
        None,
        None,
    )


@pytest.mark.parametrize("way", WAYS)
def test_module_sees_what_python_shows_it(tmp_path: Path, way: str):
    _write(tmp_path / "pkg" / "__init__.py", "")
    _write(tmp_path / "pkg" / "show.py", SHOW)
    got = _same_as_python(
        _run("run", "-m", "pkg.show", "x", "-y", cwd=tmp_path, way=way),
        _run("-m", "pkg.show", "x", "-y", cwd=tmp_path, way=way, python=True),
        way,
    )
    assert got["argv"] == [str(tmp_path / "pkg" / "show.py"), "x", "-y"]
    assert got["path0"] == str(tmp_path)
    assert got["package"] == "pkg" and got["builtins"] == "module"


@pytest.mark.parametrize("way", WAYS)
def test_a_folder_with_main_sees_what_python_shows_it(tmp_path: Path, way: str):
    _write(tmp_path / "folder" / "__main__.py", SHOW)
    got = _same_as_python(
        _run("run", "folder", "z", cwd=tmp_path, way=way),
        _run("folder", "z", cwd=tmp_path, way=way, python=True),
        way,
    )
    assert got["argv"] == ["folder", "z"]
    assert got["path0"] == str(tmp_path / "folder")


def test_interpreter_options_reach_the_program(tmp_path: Path):
    # The options of the interpreter that ran `typecheck-guard` are the program's.
    _write(tmp_path / "show.py", SHOW)
    options = ("-X", "dev", "-W", "error::UserWarning", "-B", "-X", "utf8")
    got = _same_as_python(
        _run("run", "show.py", cwd=tmp_path, options=options),
        _run("show.py", cwd=tmp_path, options=options, python=True),
        "hook",
    )
    assert got["xoptions"] == {"dev": True, "utf8": True}
    assert "error::UserWarning" in got["warnoptions"]


def test_the_console_script_runs_python_too(tmp_path: Path):
    script = Path(sys.executable).parent / "typecheck-guard"
    if not script.exists():
        pytest.skip("no typecheck-guard command next to this interpreter")
    _write(tmp_path / "show.py", SHOW)
    ours = subprocess.run(
        [str(script), "run", "show.py", "q"],
        cwd=tmp_path,
        env=_env("hook"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    theirs = _run("show.py", "q", cwd=tmp_path, python=True)
    got = json.loads(ours.stdout)
    want = json.loads(theirs.stdout)
    # The console script's interpreter is this one, maybe by another path.
    for seen in (got, want):
        seen.pop("orig_argv")
    assert got == want


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize(
    "tail, code, stderr",
    [
        ("pass", 0, ""),
        ("sys.exit()", 0, ""),
        ("sys.exit(3)", 3, ""),
        ("sys.exit('bad input')", 1, "bad input\n"),
        # python dies of SIGINT once everything else is done (a shell says 130).
        ("raise KeyboardInterrupt", -2, None),
    ],
)
def test_exit_codes(tmp_path: Path, way: str, tail: str, code: int, stderr):
    _write(
        tmp_path / "prog.py",
        "import atexit, sys\n"
        "atexit.register(lambda: print('atexit', flush=True))\n"
        f"{tail}\n",
    )
    ours = _run("run", "prog.py", cwd=tmp_path, way=way)
    theirs = _run("prog.py", cwd=tmp_path, way=way, python=True)
    assert (ours.returncode, ours.stdout) == (theirs.returncode, theirs.stdout)
    assert (ours.returncode, ours.stdout) == (code, "atexit\n")
    if stderr is not None:
        assert ours.stderr == stderr
    else:
        assert ours.stderr == theirs.stderr
        assert ours.stderr.splitlines()[-1] == "KeyboardInterrupt"


@pytest.mark.parametrize("way", WAYS)
def test_exception_prints_the_programs_traceback(tmp_path: Path, way: str):
    _write(
        tmp_path / "prog.py",
        """
        def inner():
            raise ValueError("boom")

        inner()
        """,
    )
    ours = _run("run", "prog.py", cwd=tmp_path, way=way)
    theirs = _run("prog.py", cwd=tmp_path, way=way, python=True)
    assert ours.returncode == theirs.returncode == 1
    # The traceback starts in the program: no frame of ours or of runpy.
    assert ours.stderr == theirs.stderr
    assert ours.stderr.splitlines()[-1] == "ValueError: boom"


@pytest.mark.parametrize("way", WAYS)
def test_unknown_module_and_missing_script(tmp_path: Path, way: str):
    ours = _run("run", "-m", "no_such_module_here", cwd=tmp_path, way=way)
    theirs = _run("-m", "no_such_module_here", cwd=tmp_path, way=way, python=True)
    assert (ours.returncode, ours.stderr) == (theirs.returncode, theirs.stderr)
    assert ours.returncode == 1
    assert "No module named no_such_module_here" in ours.stderr
    proc = _run("run", "missing.py", cwd=tmp_path, way=way)
    assert proc.returncode == 2
    assert "can't open file" in proc.stderr
    proc = _run("run", cwd=tmp_path, way=way)
    assert proc.returncode == 2
    assert "typecheck-guard run script.py" in proc.stderr


@pytest.mark.parametrize("way", WAYS)
def test_a_folder_without_main_is_one_line_as_python_prints_it(tmp_path: Path, way):
    (tmp_path / "folder").mkdir()
    ours = _run("run", "folder", cwd=tmp_path, way=way)
    theirs = _run("folder", cwd=tmp_path, way=way, python=True)
    assert (ours.returncode, ours.stdout, ours.stderr) == (
        theirs.returncode,
        theirs.stdout,
        theirs.stderr,
    )
    assert ours.returncode == 1
    assert ours.stderr.splitlines() == [
        f"{sys.executable}: can't find '__main__' module in "
        f"{str(tmp_path / 'folder')!r}"
    ]


def test_a_script_named_like_an_option(tmp_path: Path):
    _write(tmp_path / "-odd.py", "import sys; print(sys.argv)\n")
    ours = _run("run", "--", "-odd.py", "x", cwd=tmp_path)
    assert (ours.returncode, ours.stdout) == (0, "['-odd.py', 'x']\n"), ours.stderr


INSTALLED = """
import functools
import os
import sys
import threading

import jax
import jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard

checks = 0


def counting(fn):
    checked = beartype(fn)

    @functools.wraps(checked)
    def counted(*args, **kwargs):
        global checks
        checks += 1
        return checked(*args, **kwargs)

    return counted


@jaxtyped(typechecker=counting)
@struct.dataclass
class State:
    x: Float[Array, " n"]


step = jax.jit(lambda s: s.replace(x=s.x + 1))
state = step(State(jnp.ones(3)))
checks = 0
for _ in range(10):
    state = step(state)
jax.tree.map(lambda v: v, state)
t = threading.Thread(target=lambda: step(state))
t.start()
t.join()
assert checks == 0, checks
State(jnp.ones(3))
# jaxtyping 0.3 checks the parameters, then the full signature; older
# releases check the fields once, after `__init__`.
assert checks >= 1, checks
assert typecheck_guard.installed()
assert typecheck_guard.unadapted() == ()
# The Python processes it starts install too.
assert os.environ["TYPECHECK_GUARD"] == "install"
print("ok")
"""


@pytest.mark.parametrize("way", WAYS)
def test_install_is_in_effect(tmp_path: Path, way: str):
    # A class the script defines is adapted: a jitted step returning it runs no
    # check per call, while a direct construction is still checked.
    _write(tmp_path / "train.py", INSTALLED)
    proc = _run("run", "train.py", cwd=tmp_path, way=way)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "ok\n", "")
    # The same program under plain python re-runs the check on every call.
    proc = _run("train.py", cwd=tmp_path, way=way, python=True)
    assert proc.returncode == 1
    assert "AssertionError" in proc.stderr


@pytest.mark.parametrize("way", WAYS)
def test_non_daemon_threads_finish_before_the_exit(tmp_path: Path, way: str):
    _write(
        tmp_path / "prog.py",
        """
        import threading
        import time

        def late():
            time.sleep(0.2)
            print("thread done", flush=True)

        threading.Thread(target=late).start()
        print("main done", flush=True)
        """,
    )
    proc = _run("run", "prog.py", cwd=tmp_path, way=way)
    assert proc.returncode == 0
    assert proc.stdout == "main done\nthread done\n"


def test_profile_of_an_interrupted_program_reports_then_ends_by_sigint(tmp_path):
    # `profile` runs the program in its own process, and then ends as python would.
    _write(tmp_path / "prog.py", "print('ran', flush=True)\nraise KeyboardInterrupt\n")
    proc = _run("profile", "prog.py", cwd=tmp_path)
    assert (proc.returncode, proc.stdout) == (-2, "ran\n")
    report = proc.stderr.index("typecheck-guard profile")
    assert proc.stderr.index("KeyboardInterrupt") < report


@pytest.mark.parametrize(
    "orig_argv, options",
    [
        (["python", "-m", "typecheck_guard", "run", "x.py"], []),
        (["/venv/bin/python", "/venv/bin/typecheck-guard", "run", "x.py"], []),
        (
            ["python", "-X", "dev", "-Werror", "-uBc", "code"],
            ["-X", "dev", "-W", "error", "-uB"],
        ),
        (["python", "-bWerror", "-x", "/bin/tg", "run"], ["-b", "-W", "error"]),
        (
            ["python", "--check-hash-based-pycs", "always", "-I", "-Bm", "mod"],
            ["--check-hash-based-pycs", "always", "-I", "-B"],
        ),
        (["python", "-X"], None),
        (["python", "--unknown", "x.py"], None),
    ],
)
def test_interpreter_options(orig_argv, options):
    assert interpreter_options(orig_argv) == options


@pytest.mark.parametrize(
    "argv, ours, program",
    [
        (["train.py", "--top", "3"], [], Program("train.py", False, ("--top", "3"))),
        (
            ["--top", "5", "--json", "o.json", "t.py", "-m", "x"],
            ["--top", "5", "--json", "o.json"],
            Program("t.py", False, ("-m", "x")),
        ),
        (
            ["--install", "-m", "pkg.mod", "a"],
            ["--install"],
            Program("pkg.mod", True, ("a",)),
        ),
        (["-mpkg.mod", "--top"], [], Program("pkg.mod", True, ("--top",))),
        (["--", "-odd.py", "x"], [], Program("-odd.py", False, ("x",))),
        (["--help"], ["--help"], Program("", False, ())),
    ],
)
def test_split_command(argv, ours, program):
    assert split_command("profile", argv, frozenset({"--top", "--json"})) == (
        ours,
        program,
    )


def test_split_command_needs_a_module_name():
    with pytest.raises(ProgramError, match="-m needs a module name"):
        split_command("run", ["-m"], frozenset())
