"""`typecheck-guard run`: `install()`, then the program exactly as `python` runs it
(argv, `__main__`, `sys.path[0]`, exit code, tracebacks). The runner is shared with
`typecheck-guard profile`.

Each test runs the command in a fresh interpreter next to the same program run by
`python` itself, where the two must agree.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import typecheck_guard
from typecheck_guard._tools._runner import Program, ProgramError, split_command

SRC = str(Path(typecheck_guard.__file__).parents[1])

SHOW = """
import json
import os
import sys

print(json.dumps({
    "argv": sys.argv,
    "path0": sys.path[0],
    "name": __name__,
    "file": __file__,
    "main": sys.modules["__main__"].__dict__ is globals(),
}))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SRC, env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    return env


def _run(*args: str, cwd: Path, python: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable] if python else [sys.executable, "-m", "typecheck_guard"]
    return subprocess.run(
        [*command, *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _write(path: Path, source: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(source))
    return path


def test_script_sees_what_python_shows_it(tmp_path: Path):
    _write(tmp_path / "sub" / "show.py", SHOW)
    ours = _run("run", "sub/show.py", "a", "--flag", "-m", cwd=tmp_path)
    theirs = _run("sub/show.py", "a", "--flag", "-m", cwd=tmp_path, python=True)
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    import json

    got, want = json.loads(ours.stdout), json.loads(theirs.stdout)
    # argv[0] is the script's absolute path (runpy's), python keeps it as given.
    assert got["argv"] == [str(tmp_path / "sub" / "show.py"), "a", "--flag", "-m"]
    assert got["argv"][1:] == want["argv"][1:]
    assert got["path0"] == want["path0"] == str(tmp_path / "sub")
    assert got["name"] == want["name"] == "__main__"
    assert got["file"] == want["file"]
    assert got["main"] and want["main"]


def test_module_sees_what_python_shows_it(tmp_path: Path):
    _write(tmp_path / "pkg" / "__init__.py", "")
    _write(tmp_path / "pkg" / "show.py", SHOW)
    ours = _run("run", "-m", "pkg.show", "x", "-y", cwd=tmp_path)
    theirs = _run("-m", "pkg.show", "x", "-y", cwd=tmp_path, python=True)
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    import json

    got, want = json.loads(ours.stdout), json.loads(theirs.stdout)
    assert got == want
    assert got["argv"] == [str(tmp_path / "pkg" / "show.py"), "x", "-y"]
    assert got["path0"] == str(tmp_path)


@pytest.mark.parametrize(
    "tail, code, stderr",
    [
        ("pass", 0, ""),
        ("sys.exit()", 0, ""),
        ("sys.exit(3)", 3, ""),
        ("sys.exit('bad input')", 1, "bad input\n"),
        ("raise KeyboardInterrupt", 130, None),
    ],
)
def test_exit_codes(tmp_path: Path, tail: str, code: int, stderr: str | None):
    _write(tmp_path / "prog.py", f"import sys\n{tail}\n")
    proc = _run("run", "prog.py", cwd=tmp_path)
    assert proc.returncode == code
    if stderr is not None:
        assert proc.stderr == stderr
    else:
        assert "KeyboardInterrupt" in proc.stderr


def test_exception_prints_the_programs_traceback(tmp_path: Path):
    _write(
        tmp_path / "prog.py",
        """
        def inner():
            raise ValueError("boom")

        inner()
        """,
    )
    ours = _run("run", "prog.py", cwd=tmp_path)
    theirs = _run("prog.py", cwd=tmp_path, python=True)
    assert ours.returncode == theirs.returncode == 1
    assert ours.stderr.startswith("Traceback (most recent call last):\n")
    assert ours.stderr.splitlines()[-1] == "ValueError: boom"
    # The traceback starts in the program: no frame of ours or of runpy.
    assert "typecheck_guard" not in ours.stderr and "runpy" not in ours.stderr
    assert [line for line in ours.stderr.splitlines() if "File" in line] == [
        line for line in theirs.stderr.splitlines() if "File" in line
    ]


def test_unknown_module_and_missing_script(tmp_path: Path):
    proc = _run("run", "-m", "no_such_module_here", cwd=tmp_path)
    assert proc.returncode == 1
    assert "No module named no_such_module_here" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = _run("run", "missing.py", cwd=tmp_path)
    assert proc.returncode == 2
    assert "can't open file" in proc.stderr
    proc = _run("run", cwd=tmp_path)
    assert proc.returncode == 2
    assert "typecheck-guard run script.py" in proc.stderr


def test_a_folder_without_main_is_one_line_as_python_prints_it(tmp_path: Path):
    (tmp_path / "folder").mkdir()
    ours = _run("run", "folder", cwd=tmp_path)
    theirs = _run("folder", cwd=tmp_path, python=True)
    assert (
        (ours.returncode, ours.stdout)
        == (theirs.returncode, theirs.stdout)
        == (
            1,
            "",
        )
    )
    assert ours.stderr == theirs.stderr
    assert ours.stderr.splitlines() == [
        f"{sys.executable}: can't find '__main__' module in "
        f"{str(tmp_path / 'folder')!r}"
    ]
    # A folder with one runs, as with `python`.
    _write(tmp_path / "folder" / "__main__.py", "raise SystemExit(4)\n")
    assert _run("run", "folder", cwd=tmp_path).returncode == 4


def test_install_is_in_effect(tmp_path: Path):
    # A class the script defines is adapted: a jitted step returning it runs no
    # check per call, while a direct construction is still checked.
    _write(
        tmp_path / "train.py",
        """
        import functools
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
        print("ok")
        """,
    )
    proc = _run("run", "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n"
    # The same program under plain python re-runs the check on every call.
    proc = _run("train.py", cwd=tmp_path, python=True)
    assert proc.returncode == 1
    assert "AssertionError" in proc.stderr


def test_non_daemon_threads_finish_before_the_exit(tmp_path: Path):
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
    proc = _run("run", "prog.py", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout == "main done\nthread done\n"


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
