"""The start-up hook (`typecheck_guard.pth`, `_startup.py`): `TYPECHECK_GUARD=install`
calls `install()` as a process starts; unset, it imports nothing; a wrong value, or
an `install()` that fails, is one line on stderr and the interpreter runs on. And
who sets the variable (`typecheck-guard run`, `pytest --typecheck-guard-install`)
gives the environment back.

What it reaches (spawn, forkserver and fork children, executors, subprocesses,
pytest-xdist workers) is in tests/integration/test_children.py.
"""

import os
import subprocess
import sys
import textwrap
import warnings

import pytest

import typecheck_guard
from typecheck_guard import _install, _startup
from typecheck_guard._tools._cli import main


def _python(code: str, value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TYPECHECK_GUARD"}
    if value is not None:
        env["TYPECHECK_GUARD"] = value
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


SEEN = "import sys; print(sorted(m for m in ('typecheck_guard', 'jax') if m in sys.modules))"


@pytest.mark.parametrize("value", [None, ""])
def test_unset_the_hook_imports_nothing(value):
    out = _python(SEEN, value)
    assert (out.returncode, out.stdout, out.stderr) == (0, "[]\n", "")


@pytest.mark.parametrize("value", ["instal", "1", "INSTALL", " install"])
def test_a_wrong_value_is_one_line_and_the_program_runs(value):
    out = _python(SEEN, value)
    # It read the value (and imported nothing heavy to say so).
    assert (out.returncode, out.stdout) == (0, "['typecheck_guard']\n")
    # One line, though Python may run a `.pth` file twice (a venv's site-packages
    # is found twice).
    assert out.stderr.splitlines() == [
        f"typecheck_guard: ignoring TYPECHECK_GUARD={value!r}: the value it takes is "
        "'install' (typecheck_guard.install() in every Python process it reaches); "
        "unset it, or set it to '', to turn that off."
    ]


@pytest.fixture
def fresh_start(monkeypatch):
    """`_startup` as in a process that has not run it yet, the variable set."""
    monkeypatch.setattr(_startup, "_ran", False)
    monkeypatch.setattr(_startup, "started", False)
    monkeypatch.setattr(_install, "say_instead", None)
    monkeypatch.setenv("TYPECHECK_GUARD", "install")


def test_start_installs_once(fresh_start, capsys):
    _startup.start()
    _startup.start()  # a `.pth` line run twice
    assert typecheck_guard.installed() and _startup.started
    assert capsys.readouterr().err == ""


def test_an_install_that_fails_is_one_line(fresh_start, monkeypatch, capsys):
    def refuse(**kwargs):
        raise RuntimeError("typecheck_guard.install() can't work here:\n- jax: ...")

    monkeypatch.setattr(_install, "install", refuse)
    _startup.start()
    assert not _startup.started
    assert capsys.readouterr().err.splitlines() == [
        "typecheck_guard: TYPECHECK_GUARD=install, but install() failed in this "
        "process (RuntimeError: typecheck_guard.install() can't work here: - jax: "
        "...); it runs without typecheck_guard."
    ]


def test_install_s_warnings_are_lines_not_errors(fresh_start, monkeypatch, capsys):
    real = _install.install

    def partly(**kwargs):
        real(**kwargs)
        warnings.warn("chex is off", typecheck_guard.PartsDisabledWarning, stacklevel=1)
        warnings.warn("Early", typecheck_guard.UnadaptedClassesWarning, stacklevel=1)
        warnings.warn("jax says", DeprecationWarning, stacklevel=1)

    monkeypatch.setattr(_install, "install", partly)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # `python -W error`
        _startup.start()
    assert _startup.started
    # Classes registered before us are not the program's (as under `run`), and a
    # library's own warning is not ours to say.
    assert capsys.readouterr().err.splitlines() == [
        "typecheck_guard: PartsDisabledWarning: chex is off"
    ]


def test_run_sets_the_variable_for_the_program_and_gives_it_back(tmp_path):
    seen = tmp_path / "seen.txt"
    script = tmp_path / "prog.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os
            with open({str(seen)!r}, "w") as f:
                f.write(os.environ.get("TYPECHECK_GUARD", "<unset>"))
            """
        )
    )
    assert "TYPECHECK_GUARD" not in os.environ
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        assert main(["run", str(script)]) == 0
    assert seen.read_text() == "install"
    assert "TYPECHECK_GUARD" not in os.environ


def test_the_pytest_option_sets_the_variable_for_the_session(
    pytester: pytest.Pytester, monkeypatch
):
    monkeypatch.setenv("TYPECHECK_GUARD", "")
    pytester.makepyfile(
        test_env="""
        import os

        def test_env():
            assert os.environ["TYPECHECK_GUARD"] == "install"
        """
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        result = pytester.runpytest(
            "--typecheck-guard-install", "-p", "no:cacheprovider"
        )
    result.assert_outcomes(passed=1)
    assert os.environ["TYPECHECK_GUARD"] == ""  # what it was before the session


def test_profile_install_sets_it_too(tmp_path, capsys):
    seen = tmp_path / "seen.txt"
    script = tmp_path / "prog.py"
    script.write_text(
        "import os, pathlib\n"
        f"pathlib.Path({str(seen)!r}).write_text(os.environ.get('TYPECHECK_GUARD', '-'))\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        assert main(["profile", "--install", str(script)]) == 0
    assert seen.read_text() == "install"
    assert "TYPECHECK_GUARD" not in os.environ
    # The report says whose checks it counted.
    assert "no typecheck ran in this process" in capsys.readouterr().err
