"""The test suite against the ends of the supported version range.

    nox -s newest       # the newest releases of everything (typeguard 2.13.3)
    nox -s oldest       # the oldest supported release of each library
    nox -s typeguard4   # the newest releases with typeguard 4.x: tests marked typeguard4

The oldest versions are read from `typecheck_guard._versions.SUPPORTED`, the same
table `install()` checks, so the range we claim is the range we test. Add `-r`
(`--reuse-existing-virtualenvs`) to skip reinstalling on a second run.
"""

from __future__ import annotations

import ast
import pathlib

import nox

nox.options.sessions = ["newest", "oldest", "typeguard4"]
nox.options.error_on_missing_interpreters = True

ROOT = pathlib.Path(__file__).parent


def supported() -> dict[str, tuple[str, str | None]]:
    """`_versions.SUPPORTED`, read without importing the package (or jax)."""
    tree = ast.parse((ROOT / "src/typecheck_guard/_versions.py").read_text())
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
    return pins


def _pytest(session: nox.Session, *args: str) -> None:
    session.run("python", "-m", "pip", "list", "--format=freeze", silent=False)
    session.run("python", "-m", "pytest", "-q", *args, *session.posargs)


@nox.session
def newest(session: nox.Session) -> None:
    session.install("-q", "--upgrade", "-e", ".[test]")
    _pytest(session)


@nox.session
def oldest(session: nox.Session) -> None:
    # One resolve with every floor pinned: pip picks the optax, orbax-checkpoint,
    # ... releases that go with them.
    session.install("-q", "-e", ".[test]", *oldest_pins())
    _pytest(session)


@nox.session
def typeguard4(session: nox.Session) -> None:
    # The test extra pins typeguard 2.13.3 (what jaxtyping recommends); this
    # session replaces it, so pip reports the conflict, and that is expected.
    session.install("-q", "--upgrade", "-e", ".[test]")
    session.install("-q", "typeguard>=4,<5")
    _pytest(session, "-m", "typeguard4")
