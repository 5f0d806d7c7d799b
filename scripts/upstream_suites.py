"""Run upstream test suites plain and with `typecheck_guard.install()` active, and
compare their outcomes test by test.

`install()` re-registers every dataclass-like pytree class (through
`jax.tree_util.register_dataclass`, `flax.struct`, `chex.dataclass`); the test suites
of those libraries are the best adversary we have. For the versions installed in the
running Python, this gets the upstream test sources, runs each suite twice in separate
processes (plain, then with `-p _upstream_install`, a plugin that calls `install()`
before anything is collected), reads per-test outcomes from `--junitxml`, and lists
every test whose outcome differs.

| suite | tests | where the sources come from |
| --- | --- | --- |
| `flax` | `tests/struct_test.py` | the sdist on PyPI |
| `chex` | `chex/_src/dataclass_test.py` | the sdist on PyPI |
| `jax` | `tests/tree_util_test.py` | not in the sdist: `--source jax=PATH`, else a sparse `git clone` of the release tag |
| `jaxtyping` | `test/` | not in the sdist: `--source jaxtyping=PATH`, else a sparse `git clone` of the release tag |
| `optax` | the tests of states, transforms, updates and tree utilities | the sdist on PyPI |
| `equinox` | `tests/` (under its own `pyproject.toml`: jaxtyping's import hook, warnings as errors) | not in the sdist: `--source equinox=PATH`, else a sparse `git clone` of the release tag |

Only the test files (and the suite's pytest configuration and root conftest) are
copied into a work directory, never the package sources next to them, so the suites
test the installed packages. The extra test dependencies (`absl-py`, `cloudpickle`,
`dm-tree` for chex, and for jaxtyping `ipython`, `pytest-asyncio`) must be
installed; tests that need what is missing (torch, tensorflow, mlx) skip or fail
the same way in both runs.

It is slow (minutes) and not part of CI or the test suite. Usage:

```bash
python -m venv .venv-up
.venv-up/bin/pip install -e '.[test]' absl-py cloudpickle dm-tree ipython pytest-asyncio optax equinox
.venv-up/bin/python scripts/upstream_suites.py                      # every suite
.venv-up/bin/python scripts/upstream_suites.py flax chex            # some of them
.venv-up/bin/python scripts/upstream_suites.py --source jax=~/src/jax --source jaxtyping=~/src/jaxtyping
```

`PYTHONPATH=src` (or another checkout's `src`) tests that source instead of the
installed typecheck_guard. Exit status: 0 when every suite ran and no outcome
differs, 1 when one differs, 2 when a suite could not be set up or run.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
DEFAULT_WORKDIR = SCRIPTS.parent / ".upstream-suites"


@dataclasses.dataclass(frozen=True)
class Suite:
    dist: str  # the distribution on PyPI
    tests: tuple[str, ...]  # files or directories, relative to the source root
    # Copied when present: the pytest configuration and root conftest the tests
    # expect (warning filters, fixtures).
    config: tuple[str, ...]
    git_url: str
    git_tag: str  # formatted with the installed version
    # Plugins the suite's own CI does not load: under its `filterwarnings = error`,
    # their deprecation warnings would fail the run before any test.
    pytest_args: tuple[str, ...] = ("-p", "no:asyncio")


SUITES: dict[str, Suite] = {
    "flax": Suite(
        "flax",
        ("tests/struct_test.py",),
        ("pyproject.toml",),
        "https://github.com/google/flax",
        "v{version}",
    ),
    "jax": Suite(
        "jax",
        ("tests/tree_util_test.py",),
        ("pyproject.toml", "conftest.py"),
        "https://github.com/jax-ml/jax",
        "jax-v{version}",
    ),
    "chex": Suite(
        "chex",
        ("chex/_src/dataclass_test.py",),
        (),
        "https://github.com/google-deepmind/chex",
        "v{version}",
    ),
    "jaxtyping": Suite(
        "jaxtyping",
        ("test",),
        ("pyproject.toml",),
        "https://github.com/patrick-kidger/jaxtyping",
        "v{version}",
        (),
    ),
    # optax's states are NamedTuples and its tree utilities walk every kind of
    # node: the files that build, map and rebuild trees of optimizer states.
    "optax": Suite(
        "optax",
        (
            "optax/_src/base_test.py",
            "optax/_src/combine_test.py",
            "optax/_src/transform_test.py",
            "optax/_src/update_test.py",
            "optax/_src/utils_test.py",
            "optax/transforms/_masking_test.py",
            "optax/transforms/_combining_test.py",
            "optax/tree_utils/_state_utils_test.py",
            "optax/tree_utils/_tree_math_test.py",
            "optax/tree_utils/_casting_test.py",
        ),
        (),
        "https://github.com/google-deepmind/optax",
        "v{version}",
    ),
    # Every Equinox module registers through `register_pytree_with_keys`, which
    # install() patches; the suite runs under jaxtyping's import hook (its own
    # `addopts`) with `filterwarnings = error`.
    "equinox": Suite(
        "equinox",
        ("tests",),
        ("pyproject.toml",),
        "https://github.com/patrick-kidger/equinox",
        "v{version}",
    ),
}

OUTCOMES = ("passed", "failed", "skipped")


class SetupError(Exception):
    pass


def _has_tests(root: Path, suite: Suite) -> bool:
    return all((root / t).exists() for t in suite.tests)


def _from_sdist(suite: Suite, version: str, cache: Path) -> Path | None:
    """The unpacked sdist of `suite.dist==version` if it contains the tests."""
    target = cache / f"{suite.dist}-{version}-sdist"
    if not target.exists():
        download = cache / "downloads"
        download.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--no-binary", ":all:", "--dest", str(download),
            f"{suite.dist}=={version}",
        ]  # fmt: skip
        print(f"  $ {' '.join(cmd[2:])}", flush=True)
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"  pip download failed:\n{run.stderr.strip()[-2000:]}")
            return None
        names = [
            p
            for p in download.iterdir()
            if p.name.lower().replace("_", "-").startswith(f"{suite.dist}-{version}.")
        ]
        if not names:
            print(f"  no sdist of {suite.dist} {version} in {download}")
            return None
        unpacked = cache / f"{suite.dist}-{version}-unpack"
        shutil.rmtree(unpacked, ignore_errors=True)
        with tarfile.open(names[0]) as tar:
            # The "data" filter refuses links and paths out of the directory; Pythons
            # before 3.10.12 / 3.11.4 have no filters.
            if hasattr(tarfile, "data_filter"):
                tar.extractall(unpacked, filter="data")
            else:
                tar.extractall(unpacked)
        (top,) = unpacked.iterdir()
        top.rename(target)
        unpacked.rmdir()
    if _has_tests(target, suite):
        return target
    print(
        f"  the {suite.dist} {version} sdist does not contain {', '.join(suite.tests)}"
    )
    return None


def _from_git(suite: Suite, version: str, cache: Path) -> Path | None:
    """A sparse, shallow clone of the release tag, holding only what we copy."""
    tag = suite.git_tag.format(version=version)
    target = cache / f"{suite.dist}-{version}-git"
    if not (target.exists() and _has_tests(target, suite)):
        shutil.rmtree(target, ignore_errors=True)
        clone = [
            "git", "clone", "--quiet", "--depth", "1", "--filter=blob:none",
            "--no-checkout", "--branch", tag, suite.git_url, str(target),
        ]  # fmt: skip
        print(f"  $ {' '.join(clone)}", flush=True)
        try:
            run = subprocess.run(clone, capture_output=True, text=True, timeout=600)
            if run.returncode == 0:
                paths = [*suite.tests, *suite.config]
                git = ["git", "-C", str(target)]
                run = subprocess.run(
                    [*git, "sparse-checkout", "set", "--no-cone", *paths],
                    capture_output=True,
                    text=True,
                )
                if run.returncode == 0:
                    run = subprocess.run(
                        [*git, "checkout", "--quiet", tag],
                        capture_output=True,
                        text=True,
                        timeout=600,
                    )
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"  git clone failed: {e}")
            return None
        if run.returncode != 0:
            print(f"  git clone failed:\n{run.stderr.strip()[-2000:]}")
            return None
    return target if _has_tests(target, suite) else None


def sources(
    name: str, suite: Suite, version: str, given: Path | None, cache: Path, git: bool
) -> Path:
    if given is not None:
        if not _has_tests(given, suite):
            raise SetupError(
                f"--source {name}={given}: no {', '.join(suite.tests)} there"
            )
        return given
    found = _from_sdist(suite, version, cache)
    if found is None and git:
        found = _from_git(suite, version, cache)
    if found is None:
        tag = suite.git_tag.format(version=version)
        raise SetupError(
            f"no test sources for {suite.dist} {version}. Check out the tag and pass "
            f"it: git clone --depth 1 --branch {tag} {suite.git_url} SRC, then "
            f"--source {name}=SRC"
        )
    return found


def layout(name: str, suite: Suite, src: Path, workdir: Path) -> Path:
    """Copy the tests (not the package sources beside them) into a fresh directory."""
    root = workdir / "suites" / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for rel in (*suite.tests, *suite.config):
        source, target = src / rel, root / rel
        if source.is_dir():
            shutil.copytree(
                source, target, ignore=shutil.ignore_patterns("__pycache__")
            )
        elif source.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    pyproject = root / "pyproject.toml"
    if not (pyproject.exists() and "[tool.pytest" in pyproject.read_text()):
        # Without a configuration here, pytest would walk up to ours (the default
        # workdir is inside this repository) and run the suite under our settings.
        (root / "pytest.ini").write_text("[pytest]\n")
    return root


def read_junit(path: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, first line of the failure or skip message)."""
    results: dict[str, tuple[str, str]] = {}
    seen: Counter[str] = Counter()
    for case in ET.parse(path).iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        seen[test_id] += 1
        if seen[test_id] > 1:
            test_id += f"#{seen[test_id]}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped" and outcome != "failed":
                outcome = "skipped"
            else:
                continue
            text = child.get("message") or child.text or ""
            message = text.strip().splitlines()[0] if text.strip() else ""
        results[test_id] = (outcome, message)
    return results


def run_suite(
    name: str, root: Path, workdir: Path, mode: str, extra: list[str], timeout: int
) -> tuple[dict[str, tuple[str, str]], dict[str, object]]:
    """Run the suite in `mode`: "plain", "install" (install() before collection) or
    "warn" (our pytest plugin watching, `--typecheck-guard=warn`, no install())."""
    install = mode == "install"
    junit = workdir / f"{name}-{mode}.xml"
    log = workdir / f"{name}-{mode}.log"
    report = workdir / f"{name}-{mode}.json"
    for p in (junit, report):
        p.unlink(missing_ok=True)
    env = dict(os.environ)
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA",
        f"--junitxml={junit}", "-o", "junit_family=xunit2",
    ]  # fmt: skip
    # Our own plugin (the pytest11 entry point) stays out, except in warn mode.
    cmd += (
        ["--typecheck-guard=warn"] if mode == "warn" else ["-p", "no:typecheck_guard"]
    )
    if install:
        cmd += ["-p", "_upstream_install"]
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SCRIPTS), env.get("PYTHONPATH", "")) if p
        )
        env["TYPECHECK_GUARD_UPSTREAM_REPORT"] = str(report)
    cmd += [*SUITES[name].pytest_args, *extra, *SUITES[name].tests]
    print(f"  [{mode}] $ {' '.join(cmd[1:])}  (in {root}; log {log})", flush=True)
    with open(log, "w") as out:
        try:
            subprocess.run(
                cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT,
                timeout=timeout,
            )  # fmt: skip
        except subprocess.TimeoutExpired as e:
            raise SetupError(f"{name} [{mode}] ran past {timeout} s; see {log}") from e
    if not junit.exists():
        raise SetupError(f"{name} [{mode}] wrote no junit report; see {log}")
    extra_info: dict[str, object] = {}
    if install:
        if not report.exists():
            raise SetupError(f"{name} [install] did not load the install() plugin")
        extra_info = json.loads(report.read_text())
        if not extra_info.get("installed"):
            raise SetupError(f"{name} [install]: install() was not in effect")
    return read_junit(junit), extra_info


def differing(
    plain: dict[str, tuple[str, str]], other: dict[str, tuple[str, str]]
) -> list[tuple[str, tuple[str, str], tuple[str, str]]]:
    """(test id, plain outcome, other outcome) for each test whose outcome differs."""
    absent = ("absent", "")
    return [
        (t, plain.get(t, absent), other.get(t, absent))
        for t in sorted(plain.keys() | other.keys())
        if plain.get(t, absent)[0] != other.get(t, absent)[0]
    ]


def counts(results: dict[str, tuple[str, str]]) -> str:
    c = Counter(outcome for outcome, _ in results.values())
    return "/".join(str(c[o]) for o in OUTCOMES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "suites", nargs="*", metavar="SUITE",
        help=f"which suites to run ({', '.join(SUITES)}; default: all)",
    )  # fmt: skip
    parser.add_argument(
        "--source", action="append", default=[], metavar="PKG=PATH",
        help="a checkout (or unpacked sdist) of PKG at the installed version",
    )  # fmt: skip
    parser.add_argument(
        "--workdir", type=Path, default=DEFAULT_WORKDIR,
        help=f"downloads, test copies, logs and junit reports (default {DEFAULT_WORKDIR})",
    )  # fmt: skip
    parser.add_argument(
        "--no-git", dest="git", action="store_false",
        help="never fall back to a git clone of the release tag",
    )  # fmt: skip
    parser.add_argument(
        "--timeout", type=int, default=3600, help="seconds per pytest run"
    )
    parser.add_argument(
        "--json", type=Path, help="write every test's outcome in both runs here"
    )
    parser.add_argument(
        "--warn", action="store_true",
        help="a third run, with the runtime guard's --typecheck-guard=warn (no "
        "install()), compared with the plain one too",
    )  # fmt: skip
    parser.epilog = "Arguments after `--` go to both pytest runs."
    argv = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    args = parser.parse_args(argv)
    if unknown := [s for s in args.suites if s not in SUITES]:
        parser.error(f"unknown suite(s) {unknown}: choose from {list(SUITES)}")
    given: dict[str, Path] = {}
    for item in args.source:
        pkg, sep, path = item.partition("=")
        if not sep or pkg not in SUITES:
            parser.error(
                f"--source {item!r}: write PKG=PATH, PKG one of {list(SUITES)}"
            )
        given[pkg] = Path(path).expanduser().resolve()
    workdir: Path = args.workdir.resolve()
    cache = workdir / "sources"
    cache.mkdir(parents=True, exist_ok=True)

    import typecheck_guard

    print(f"python {sys.version.split()[0]} ({sys.executable})")
    print(
        f"typecheck_guard {typecheck_guard.__version__} from {typecheck_guard.__file__}"
    )
    rows, differences, problems, out = [], [], [], {}
    for name in args.suites or list(SUITES):
        suite = SUITES[name]
        try:
            version = importlib.metadata.version(suite.dist)
        except importlib.metadata.PackageNotFoundError:
            problems.append(f"{name}: {suite.dist} is not installed")
            continue
        print(f"\n== {name} {version}", flush=True)
        try:
            src = sources(name, suite, version, given.get(name), cache, args.git)
            print(f"  sources: {src}")
            root = layout(name, suite, src, workdir)
            plain, _ = run_suite(name, root, workdir, "plain", extra, args.timeout)
            inst, info = run_suite(name, root, workdir, "install", extra, args.timeout)
            warned = (
                run_suite(name, root, workdir, "warn", extra, args.timeout)[0]
                if args.warn
                else None
            )
        except SetupError as e:
            problems.append(f"{name}: {e}")
            print(f"  {e}")
            continue
        diff = differing(plain, inst)
        rows.append((name, version, counts(plain), counts(inst), len(diff)))
        differences += [(name, "install()", *d) for d in diff]
        if warned is not None:
            warn_diff = differing(plain, warned)
            print(
                f"  --typecheck-guard=warn: {counts(warned)} passed/failed/skipped, "
                f"{len(warn_diff)} differing from plain"
            )
            differences += [(name, "warn", *d) for d in warn_diff]
        print(
            f"  install(): {len(info.get('adapted', []))} classes unflattened through "
            f"__new__, {len(info.get('marked', []))} through their own unflatten, "
            "marked"
        )
        if stats := info.get("pytree_cache"):
            print(f"  PyTree verdict cache: {stats}")
        # A class defined in a parametrized test is registered once per case.
        for line, n in Counter(info.get("marked", [])).items():
            print(f"    marked{f' ({n} classes)' if n > 1 else ''}: {line}")
        out[name] = {
            "version": version,
            "sources": str(src),
            "plain": plain,
            "install": inst,
            "install_report": info,
            **({"warn": warned} if warned is not None else {}),
        }

    print(
        "\n| suite | version | plain passed/failed/skipped | install() passed/failed/skipped | differing |"
    )
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(map(str, row)) + " |")
    if differences:
        print("\nDiffering outcomes (plain -> with the plugin):")
        for name, mode, test_id, a, b in differences:
            print(f"- {name} [{mode}]: {test_id}: {a[0]} -> {b[0]}")
            for label, (outcome, message) in (("plain", a), (mode, b)):
                if outcome in ("failed", "skipped") and message:
                    print(f"    {label}: {message[:300]}")
    for p in problems:
        print(f"\nnot run: {p}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    if problems:
        return 2
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main())
