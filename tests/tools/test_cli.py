"""`typecheck-guard scan` and the command line itself.

Each scan runs in a fresh interpreter: it imports the fixture packages and reads
JAX's registry, which in this process holds every class the other tests made.
"""

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from typecheck_guard._tools import _cli as _cli_module, _scan

FIXTURES = Path(__file__).parent / "scan_fixtures"


def _cli(*args: str, cwd: Path = FIXTURES) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [sys.executable, "-m", "typecheck_guard", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _scan_json(*modules: str) -> tuple[int, dict]:
    proc = _cli("scan", "--json", "-", *modules)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_scan_lists_at_risk_classes():
    code, report = _scan_json("atrisk_pkg")
    assert code == 1
    found = {f["name"]: f for f in report["at_risk"]}
    # `Unchecked` has no checker, and `extra.Pair` is in a module not imported.
    assert set(found) == {"Node", "CustomArray", "Derived"}

    node = found["Node"]
    assert node["module"] == "atrisk_pkg.models"
    assert node["registration"] == "flax.struct.dataclass"
    assert node["checkers"] == ["jaxtyping(beartype)"]
    assert node["checked"] == ["__init__"]
    assert node["install_covers"] and node["unflatten_safe_covers"]
    assert "typecheck_guard.install()" in node["fix"]

    # Registered before install(): install() covers every one, the zero-edit fix
    # first, custom nodes and `__post_init__` classes included.
    custom = found["CustomArray"]
    assert custom["registration"].startswith("register_pytree_node")
    assert custom["install_covers"] and custom["unflatten_safe_covers"]
    assert custom["fix"].startswith("run your program with `typecheck-guard run`")

    derived = found["Derived"]
    assert derived["install_covers"] and derived["unflatten_safe_covers"]
    assert "unflatten_safe(jax.jit(step))" in derived["fix"]
    assert report["silent_checks"] == []
    assert report["exit_code"] == 1


def test_scan_text_output_names_class_and_fix():
    proc = _cli("scan", "atrisk_pkg")
    assert proc.returncode == 1
    assert "atrisk_pkg.models.Node" in proc.stdout
    assert re.search(r"registered by: +flax.struct.dataclass", proc.stdout)
    assert "unflatten_safe(jax.jit(step))" in proc.stdout
    assert proc.stderr == ""
    # It fits a terminal, and the documentation's samples, at 88 columns.
    assert max(len(line) for line in proc.stdout.splitlines()) <= 88


def test_scan_recursive_imports_submodules():
    _, report = _scan_json("atrisk_pkg", "-r")
    assert {f["name"] for f in report["at_risk"]} == {
        "Node",
        "CustomArray",
        "Derived",
        "Pair",
    }


def test_scan_clean_package():
    # Equinox modules, a flax.struct and a register_dataclass class defined after
    # install(), a custom node that unflattens through __new__.
    code, report = _scan_json("clean_pkg")
    assert code == 0
    assert report["at_risk"] == [] and report["silent_checks"] == []
    proc = _cli("scan", "clean_pkg")
    assert proc.returncode == 0
    assert "No registered pytree class runs a typecheck" in proc.stdout


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        ("no_such_module_anywhere", "no module named 'no_such_module_anywhere'"),
        (
            "atrisk_pkg.no_such_submodule",
            "no module named 'atrisk_pkg.no_such_submodule'",
        ),
        (
            "broken_pkg",
            "importing 'broken_pkg' raised NameError: name 'undefined_name' is not "
            "defined (broken_pkg/__init__.py:9)",
        ),
        (
            "missing_dep_pkg",
            "importing 'missing_dep_pkg' raised ModuleNotFoundError: No module named "
            "'a_dependency_that_is_not_installed'",
        ),
        ("atrisk_pkg/models.py", "looks like a path; scan takes module names"),
    ],
)
def test_scan_errors_are_one_line_and_exit_2(module, expected):
    proc = _cli("scan", module)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("typecheck-guard scan: error: ")
    assert expected in lines[0]


def test_scan_reports_import_errors_and_still_scans_the_others():
    proc = _cli("scan", "atrisk_pkg", "missing_dep_pkg", "clean_pkg", "broken_pkg")
    assert proc.returncode == 2
    # (clean_pkg's `install()` warns about atrisk_pkg's classes on stderr too.)
    prefix = "typecheck-guard scan: error: importing "
    errors = [line for line in proc.stderr.splitlines() if line.startswith(prefix)]
    assert len(errors) == 2, proc.stderr
    assert errors[0].startswith(prefix + "'missing_dep_pkg'")
    assert errors[1].startswith(prefix + "'broken_pkg'")
    # The modules that imported are scanned and reported as without the others.
    assert "atrisk_pkg.models.Node" in proc.stdout
    assert "2 modules could not be imported" in proc.stdout
    assert "'a_dependency_that_is_not_installed'" in proc.stdout
    assert "(imported atrisk_pkg, clean_pkg;" in proc.stdout

    proc = _cli("scan", "--json", "-", "missing_dep_pkg", "atrisk_pkg")
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["exit_code"] == 2
    assert {f["name"] for f in report["at_risk"]} == {"Node", "CustomArray", "Derived"}
    (error,) = report["import_errors"]
    assert error["module"] == "missing_dep_pkg"
    assert "No module named 'a_dependency_that_is_not_installed'" in error["message"]


def test_scan_recursive_reports_a_submodule_that_fails_and_walks_on(tmp_path):
    pkg = tmp_path / "half_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "broken.py").write_text("import a_dependency_that_is_not_installed\n")
    (pkg / "fine.py").write_text((FIXTURES / "atrisk_pkg" / "models.py").read_text())
    proc = _cli("scan", "--json", "-", "-r", "half_pkg", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    assert [e["module"] for e in report["import_errors"]] == ["half_pkg.broken"]
    assert "Node" in {f["name"] for f in report["at_risk"]}


@pytest.mark.filterwarnings("always::UserWarning")
def test_scan_reports_instrumentation_warnings(monkeypatch, tmp_path):
    # typeguard 4's InstrumentationWarning, simulated: the typeguard in this
    # environment is 2.13.3. The real thing is tested below under typeguard 4.
    class InstrumentationWarning(UserWarning):
        pass

    (tmp_path / "warns_instrumentation.py").write_text(
        "import warnings\n"
        "from test_cli_warning import InstrumentationWarning\n"
        "for _ in range(2):\n"
        "    warnings.warn('instrumentor did not find the target function -- not '\n"
        "                  'typechecking pkg.Node.__init__', InstrumentationWarning)\n"
        "warnings.warn('an unrelated warning', UserWarning)\n"
    )
    shim = type(sys)("test_cli_warning")
    shim.InstrumentationWarning = InstrumentationWarning  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "test_cli_warning", shim)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(
        _scan, "_instrumentation_warning", lambda: InstrumentationWarning
    )
    shown = []
    monkeypatch.setattr(
        warnings, "showwarning", lambda *a, **k: shown.append(str(a[0]))
    )
    silent = _scan.import_all(["warns_instrumentation"])
    assert [s.target for s in silent] == ["pkg.Node.__init__"]
    # Other warnings are passed on to the user, not swallowed.
    assert shown == ["an unrelated warning"]


@pytest.mark.typeguard4
def test_scan_detects_typeguard4_checking_nothing():
    import typeguard

    if not hasattr(typeguard, "InstrumentationWarning"):
        pytest.skip("needs typeguard 4.x")
    proc = _cli("scan", "--json", "-", "typeguard4_pkg")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert [s["target"] for s in report["silent_checks"]] == [
        "typeguard4_pkg.Silent.__init__"
    ]


def test_python_m_and_console_script_entry_point():
    proc = _cli("--help")
    assert proc.returncode == 0
    assert "bench" in proc.stdout and "scan" in proc.stdout
    scripts = importlib.metadata.entry_points(group="console_scripts")
    (script,) = [e for e in scripts if e.name == "typecheck-guard"]
    assert script.value == "typecheck_guard._tools._cli:main"


def test_help_does_not_import_jax():
    code = (
        "import sys\n"
        "from typecheck_guard._tools._cli import main\n"
        "try:\n"
        "    main(['bench', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_unknown_command_is_a_usage_error():
    proc = _cli("frobnicate")
    assert proc.returncode == 2
    assert "invalid choice" in proc.stderr


def test_scan_reports_annotations_jaxtyping_cannot_resolve():
    code, report = _scan_json("unresolved_pkg")
    assert code == 1
    (silent,) = report["silent_checks"]
    assert silent["kind"] == "unresolved"
    assert silent["target"] == "unresolved_pkg.make.<locals>.Lost.__init__"
    assert "x: Float[Array, ' n']" in silent["message"]
    proc = _cli("scan", "unresolved_pkg")
    assert "can't resolve" in proc.stdout and "Lost.__init__" in proc.stdout
    # The at-risk packages import their names at module level: nothing reported.
    assert _scan_json("atrisk_pkg")[1]["silent_checks"] == []


def test_version():
    import typecheck_guard

    proc = _cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"typecheck-guard {typecheck_guard.__version__}\n"
    assert typecheck_guard.__version__ == importlib.metadata.version("typecheck-guard")


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["scan", "--bogus", "pkg"], "usage: typecheck-guard scan "),
        (["bench", "--bogus"], "usage: typecheck-guard bench "),
        (["run", "--bogus", "x.py"], "usage: typecheck-guard run "),
        (["profile", "--bogus", "x.py"], "usage: typecheck-guard profile "),
    ],
)
def test_an_unknown_option_gets_its_subcommands_usage(argv, usage):
    proc = _cli(*argv)
    assert proc.returncode == 2
    assert proc.stderr.startswith(usage), proc.stderr
    command = argv[0]
    assert proc.stderr.splitlines()[-1] == (
        f"typecheck-guard {command}: error: unrecognized arguments: --bogus"
    )


def test_profile_checks_its_outputs_before_running_the_program(tmp_path: Path):
    marker = tmp_path / "ran"
    script = tmp_path / "prog.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n")
    bad = tmp_path / "no_such_folder" / "report.json"
    proc = _cli("profile", "--json", str(bad), str(script), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"typecheck-guard profile: error: --json: can't write {str(bad)!r}: No such "
        "file or directory"
    ]
    assert not marker.exists()
    # A good path: the program runs, the report is written, its exit code is kept.
    good = tmp_path / "report.json"
    proc = _cli("profile", "--json", str(good), str(script), cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert marker.exists()
    assert "sites" in json.loads(good.read_text())


def test_output_into_a_closed_pipe_ends_quietly():
    # `typecheck-guard scan --json - pkg | head -1`, once head has exited: the reader
    # is gone before we write.
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "typecheck_guard", "scan", "--json", "-", "atrisk_pkg"],
        cwd=FIXTURES,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    stderr = proc.stderr.read()
    proc.stderr.close()
    code = proc.wait(timeout=300)
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert stderr == ""
    assert code == 141  # 128 + SIGPIPE, as a shell reports a command a pipe ended


def test_scan_json_to_stdout_holds_the_json_alone(tmp_path: Path):
    # A module that prints at import: its output goes to stderr, Python's print and
    # a write to file descriptor 1 alike.
    (tmp_path / "chatty.py").write_text(
        "import os\n"
        "print('chatty prints at import')\n"
        "os.write(1, b'chatty writes to fd 1\\n')\n"
        + (FIXTURES / "atrisk_pkg" / "models.py").read_text()
    )
    proc = _cli("scan", "--json", "-", "chatty", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert "Node" in {f["name"] for f in report["at_risk"]}
    assert "chatty prints at import" in proc.stderr
    assert "chatty writes to fd 1" in proc.stderr
    # To a file: the same report; the module's output stays on stdout.
    proc = _cli("scan", "--json", "report.json", "chatty", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert proc.stdout.splitlines() == [
        "chatty prints at import",
        "chatty writes to fd 1",
    ]


@pytest.mark.parametrize(
    ("argv", "modules", "json_path"),
    [
        (["--json", "-", "atrisk_pkg"], ["atrisk_pkg"], "-"),
        (["--json", "out.json", "atrisk_pkg"], ["atrisk_pkg"], "out.json"),
        (["--json", "report", "atrisk_pkg"], ["atrisk_pkg"], "report"),
        # `--json` was a flag: a module after it is a module, not a path.
        (["--json", "atrisk_pkg"], ["atrisk_pkg"], "-"),
        (
            ["--json", "atrisk_pkg.models", "clean_pkg"],
            ["atrisk_pkg.models", "clean_pkg"],
            "-",
        ),
        (["atrisk_pkg", "--json"], ["atrisk_pkg"], "-"),
        (["--json", "-r", "atrisk_pkg"], ["atrisk_pkg"], "-"),
        (["atrisk_pkg"], ["atrisk_pkg"], None),
    ],
)
def test_scan_json_takes_a_path_or_dash(monkeypatch, argv, modules, json_path):
    monkeypatch.chdir(FIXTURES)
    monkeypatch.setattr(sys, "path", list(sys.path))
    args = _cli_module._parse(["scan", *argv])
    _cli_module._scan_arguments(args)
    assert (args.modules, args.json) == (modules, json_path)


def test_scan_json_as_a_flag_still_prints_it():
    proc = _cli("scan", "--json", "atrisk_pkg")
    assert proc.returncode == 1, proc.stderr
    assert "Node" in {f["name"] for f in json.loads(proc.stdout)["at_risk"]}
    assert not (FIXTURES / "atrisk_pkg").is_file()


def test_scan_without_a_module_is_a_usage_error(tmp_path: Path):
    proc = _cli("scan", "--json", "out.json", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: typecheck-guard scan ")
    assert proc.stderr.splitlines()[-1] == (
        "typecheck-guard scan: error: the following arguments are required: MODULE"
    )
    assert os.listdir(tmp_path) == []


def test_profile_json_to_stdout_holds_the_json_alone(tmp_path: Path):
    script = tmp_path / "prog.py"
    script.write_text("print('the program prints')\nraise SystemExit(3)\n")
    proc = _cli("profile", "--json", "-", str(script), cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["sites"] == []
    assert "the program prints" in proc.stderr
