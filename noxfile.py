"""The test suite on every Python we support, and at the ends of the version range.

    nox -s tests-3.10 tests-3.11 tests-3.12 tests-3.13
                        # the newest releases pip resolves on each Python
                        # (jax 0.12 and flax 0.12.12 need Python >= 3.12)
    nox -s oldest       # the oldest supported release of each library, Python 3.10
    nox -s typeguard4   # the newest releases with typeguard 4.x: tests marked typeguard4

The oldest versions are read from `typecheck_guard._compat._versions.SUPPORTED`, the same
table each part of the package checks when it starts, so the range we claim is the
range we test. Add `-r` (`--reuse-existing-virtualenvs`) to skip reinstalling on a
second run.

Interpreters: where pyenv is installed, `pyenv prefix 3.X` names them (pyenv's
shims only run the versions selected in `pyenv global`/`local`); otherwise nox finds
`python3.X` on PATH.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import shutil
import subprocess

import nox

PYTHONS = ("3.10", "3.11", "3.12", "3.13")
OLDEST_PYTHON = "3.10"  # the oldest Python: where the oldest releases all install
TYPEGUARD4_PYTHON = "3.12"

nox.options.sessions = [*(f"tests-{v}" for v in PYTHONS), "oldest", "typeguard4"]
nox.options.error_on_missing_interpreters = True

ROOT = pathlib.Path(__file__).parent


@functools.cache
def interpreter(version: str) -> str:
    """A path to Python `version` from pyenv when it has one, else `version` (nox
    then looks for `python{version}` on PATH)."""
    pyenv = shutil.which("pyenv")
    if pyenv is not None:
        # `pyenv prefix 3.12` answers for the newest installed 3.12.x.
        found = subprocess.run(
            [pyenv, "prefix", version], capture_output=True, text=True, check=False
        )
        prefix = found.stdout.strip().splitlines()[-1:] if found.returncode == 0 else []
        if prefix and (pathlib.Path(prefix[0]) / "bin" / "python").exists():
            return str(pathlib.Path(prefix[0]) / "bin" / "python")
    return version


def supported() -> dict[str, tuple[str, str | None]]:
    """`_versions.SUPPORTED`, read without importing the package (or jax)."""
    tree = ast.parse((ROOT / "src/typecheck_guard/_compat/_versions.py").read_text())
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "SUPPORTED"
            and node.value is not None
        ):
            return ast.literal_eval(node.value)
    raise RuntimeError("SUPPORTED not found in _versions.py")


def oldest_pins() -> list[str]:
    pins = [f"{package}=={low}" for package, (low, _) in supported().items()]
    # jaxlib is released in lockstep with jax.
    pins.append(f"jaxlib=={supported()['jax'][0]}")
    # numpy 1.x: the pins real projects still hold (jax 0.4.36 accepts both).
    pins.append("numpy<2")
    return pins


def _pytest(session: nox.Session, *args: str) -> None:
    session.run("python", "-m", "pip", "list", "--format=freeze", silent=False)
    # On pytest-xdist workers, as `scripts/test.sh` runs the suite.
    session.run(
        "python",
        "-m",
        "pytest",
        "-q",
        "-n",
        "auto",
        "--maxprocesses=4",
        *args,
        *session.posargs,
    )


def _tests(session: nox.Session) -> None:
    session.install("-q", "--upgrade", "-e", ".[test]")
    _pytest(session)


for _version in PYTHONS:
    nox.session(name=f"tests-{_version}", python=interpreter(_version))(_tests)


@nox.session(python=interpreter(OLDEST_PYTHON))
def oldest(session: nox.Session) -> None:
    # One resolve with every floor pinned: pip picks the optax, orbax-checkpoint,
    # ... releases that go with them.
    session.install("-q", "-e", ".[test]", *oldest_pins())
    _pytest(session)


@nox.session(python=interpreter(TYPEGUARD4_PYTHON))
def typeguard4(session: nox.Session) -> None:
    # The test extra pins typeguard 2.13.3 (what jaxtyping recommends); this
    # session replaces it, so pip reports the conflict, and that is expected.
    session.install("-q", "--upgrade", "-e", ".[test]")
    session.install("-q", "typeguard>=4,<5")
    _pytest(session, "-m", "typeguard4")
