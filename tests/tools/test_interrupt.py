"""Ctrl-C: `bench` and `scan`, interrupted with SIGINT mid-run, print what they have
so far, exit 130, print no traceback of ours, and leave no half-written `--json` or
`--plot` file.

Each test runs the command in a fresh interpreter and sends SIGINT once it has
started the work to interrupt (the first measurement done, a slow module being
imported): a few seconds each, never the whole run.
"""

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from typecheck_guard._tools import _output

pytestmark = pytest.mark.skipif(
    sys.platform == "win32", reason="SIGINT to a child process is POSIX"
)

FIXTURES = Path(__file__).parent / "scan_fixtures"


# The command as `typecheck-guard ...` runs it, with Python's own Ctrl-C handler:
# a run in a background job (`pytest &`, nohup) starts with SIGINT ignored, which
# children inherit and Python then keeps ignoring.
COMMAND = (
    "import signal, sys\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "from typecheck_guard._tools._cli import main\n"
    "raise SystemExit(main(sys.argv[1:]))\n"
)


def _start(*args: str, cwd: Path, **env: str) -> subprocess.Popen[bytes]:
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.Popen(
        [sys.executable, "-c", COMMAND, *args],
        cwd=cwd,
        env={**environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _read_until(proc: subprocess.Popen[bytes], pattern: bytes, timeout: float) -> bytes:
    """Read `proc`'s stderr until `pattern` shows up (a progress bar redraws its
    line with `\\r`, without a newline: we read bytes as they come)."""
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + timeout
    while not re.search(pattern, seen):
        left = deadline - time.monotonic()
        assert left > 0, f"no {pattern!r} in {timeout} s: {seen!r}"
        ready, _, _ = select.select([proc.stderr], [], [], left)
        if ready:
            chunk = os.read(proc.stderr.fileno(), 4096)
            assert chunk, f"it ended before {pattern!r}: {seen!r}"
            seen += chunk
    return seen


def _finish(proc: subprocess.Popen[bytes], seen: bytes = b"") -> tuple[str, str]:
    out, err = proc.communicate(timeout=120)
    return out.decode(), (seen + err).decode()


def test_bench_interrupted_prints_its_partial_table_and_writes_nothing(tmp_path):
    proc = _start(
        "bench",
        "--quick",
        "--progress",
        "--json",
        "out.json",
        "--plot",
        "out.png",
        cwd=tmp_path,
    )
    try:
        # The bar shows "1/N" once the first mode is measured.
        seen = _read_until(proc, rb"\] [1-9]\d*/\d+ ", timeout=300)
        proc.send_signal(signal.SIGINT)
        out, err = _finish(proc, seen)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    # The first case's block, with the mode measured before Ctrl-C.
    assert "flax.struct state from jit" in out
    assert re.search(r"^  no plugin +\d[\d.]*x \[", out, re.M), out
    assert re.search(
        r"typecheck-guard bench: interrupted \(Ctrl-C\) after [1-9]\d* of \d+ "
        r"measurements: the table above holds them; --json and --plot not written",
        err,
    ), err
    # Neither file, nor a temporary one.
    assert os.listdir(tmp_path) == []


def _slow_package(root: Path) -> None:
    """`slow_pkg.a` and `slow_pkg.c` register checked classes; `slow_pkg.slow`
    prints, says it has started (a file named by `$SLOW_STARTED`), and takes two
    seconds to import."""
    pkg = root / "slow_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    models = (FIXTURES / "atrisk_pkg" / "models.py").read_text()
    (pkg / "a.py").write_text(models)
    (pkg / "c.py").write_text(re.sub(r"^class (\w+)", r"class C\1", models, flags=re.M))
    (pkg / "slow.py").write_text(
        "import os, time\n"
        "print('slow_pkg.slow prints at import')\n"
        "open(os.environ['SLOW_STARTED'], 'w').close()\n"
        "for _ in range(40):\n"
        "    time.sleep(0.05)\n"
    )


def _scan_until_slow(tmp_path: Path, *args: str) -> subprocess.Popen[bytes]:
    _slow_package(tmp_path)
    started = tmp_path / "started"
    proc = _start(
        "scan",
        *args,
        "slow_pkg.a",
        "slow_pkg.slow",
        "slow_pkg.c",
        cwd=tmp_path,
        SLOW_STARTED=str(started),
    )
    deadline = time.monotonic() + 300
    while not started.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return proc


def test_scan_interrupted_reports_the_modules_it_imported(tmp_path):
    # Ctrl-C while a module imports: the import finishes (a safe point), the next
    # module is not imported, and the report has what the first two registered.
    proc = _scan_until_slow(tmp_path)
    try:
        proc.send_signal(signal.SIGINT)
        out, err = _finish(proc)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert err.splitlines() == [
        "typecheck-guard scan: interrupted, stopping at the next safe point (Ctrl-C "
        "again to stop now)"
    ]
    assert "slow_pkg.a.Node" in out and "slow_pkg.c." not in out
    assert (
        "Interrupted (Ctrl-C) before importing slow_pkg.c: its classes are not in "
        "this report." in out
    )
    assert "(imported slow_pkg.a, slow_pkg.slow;" in out
    assert "exit code 130" in " ".join(out.split())


def test_scan_interrupted_twice_stops_the_import_and_writes_whole_json(tmp_path):
    # The second Ctrl-C stops the slow import itself; `--json -`: the module's
    # print goes to stderr, standard output holds the JSON alone.
    proc = _scan_until_slow(tmp_path, "--json", "-")
    try:
        proc.send_signal(signal.SIGINT)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, err = _finish(proc)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    assert "slow_pkg.slow prints at import" in err
    report = json.loads(out)
    assert report["interrupted"] is True and report["exit_code"] == 130
    assert report["not_imported"] == ["slow_pkg.slow", "slow_pkg.c"]
    assert {f["module"] for f in report["at_risk"]} == {"slow_pkg.a"}


def test_a_file_is_written_whole_or_not_at_all(tmp_path):
    path = tmp_path / "report.json"
    path.write_text("the report before")

    def interrupted(tmp: str) -> None:
        Path(tmp).write_text('{"half": ')
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _output.write_atomically(str(path), interrupted)
    assert os.listdir(tmp_path) == ["report.json"]
    assert path.read_text() == "the report before"
    _output.write_text(str(path), '{"whole": true}\n')
    assert os.listdir(tmp_path) == ["report.json"]
    assert json.loads(path.read_text()) == {"whole": True}
