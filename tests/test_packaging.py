"""What a release ships: the sdist and the wheel built from it, as `python -m build`
makes them, hold the license and the metadata a package index shows, and none of
our own bookkeeping (scenario codes, development-log words) in their file names or
in the wheel's text.

The build runs hatchling's PEP 517 hooks in a subprocess, without a network: a few
seconds.
"""

import email.parser
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import typecheck_guard

ROOT = Path(__file__).parents[1]
# Words of our development history, not of the product: "seed 000", "S0".."S3",
# "held-out", "issue 3" (an upstream "issue #213" is a reference, and fine).
BOOKKEEPING = re.compile(
    r"\bseed\b|\bseed ?\d|\bS[0-3]\b|held-out|\bissue \d", re.IGNORECASE
)
BOOKKEEPING_NAME = re.compile(r"seed|held.?out|issue|(^|[/_.-])s[0-3]([/_.-]|$)", re.I)


def _build(kind: str, source: Path, out: Path) -> Path:
    hook = f"build_{kind}"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys, hatchling.build as b; print(b.{hook}(sys.argv[1]))",
            str(out),
        ],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return out / proc.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    pytest.importorskip("hatchling", reason="the `test` extra installs hatchling")
    out = tmp_path_factory.mktemp("dist")
    sdist = _build("sdist", ROOT, out)
    # The wheel is built from the unpacked sdist, as `python -m build` does: so
    # the sdist must be complete.
    unpacked = tmp_path_factory.mktemp("sdist")
    with tarfile.open(sdist) as tar:
        # The "data" filter (safe extraction) is in Python 3.10.12 and later.
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(unpacked, **safe)
    (source,) = unpacked.iterdir()
    wheel = _build("wheel", source, out)
    return sdist, wheel


def _sdist_names(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as tar:
        return [name.split("/", 1)[1] for name in tar.getnames() if "/" in name]


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(zf.read(name).decode())


def test_the_license_ships_in_the_repository_sdist_and_wheel(dists):
    sdist, wheel = dists
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0" in license_text
    assert "LICENSE" in _sdist_names(sdist)
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [
            n for n in zf.namelist() if n.endswith(".dist-info/licenses/LICENSE")
        ]
        assert zf.read(name).decode() == license_text


def test_the_metadata_a_package_index_shows(dists):
    _, wheel = dists
    meta = _metadata(wheel)
    assert meta["Name"] == "typecheck-guard"
    assert meta["Version"] == typecheck_guard.__version__
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    classifiers = meta.get_all("Classifier")
    assert "Typing :: Typed" in classifiers
    for prefix in ("Development Status :: ", "Intended Audience :: ", "Topic :: "):
        assert any(c.startswith(prefix) for c in classifiers), prefix
    # PEP 639: an SPDX expression, and no license classifier next to it.
    assert not any(c.startswith("License ::") for c in classifiers)
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Documentation", "Source", "Changelog", "Issues"}
    assert "jax" in meta["Keywords"].split(",")


def test_mkdocs_agrees_with_the_project_urls(dists):
    _, wheel = dists
    urls = dict(u.split(", ", 1) for u in _metadata(wheel).get_all("Project-URL"))
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^site_url: (\S+)$", mkdocs, re.M)[1] == urls["Documentation"]
    assert re.search(r"^repo_url: (\S+)$", mkdocs, re.M)[1] == urls["Source"]
    assert urls["Changelog"] == urls["Documentation"] + "changelog/"
    assert urls["Issues"] == urls["Source"] + "/issues"


def test_the_sdist_leaves_out_our_ci(dists):
    sdist, _ = dists
    names = _sdist_names(sdist)
    assert not [n for n in names if n.startswith(".ci/")]
    for needed in (
        "pyproject.toml",
        "README.md",
        "CHANGELOG.md",
        "src/typecheck_guard/py.typed",
    ):
        assert needed in names


def test_the_start_up_hook_ships_at_the_wheel_s_root(dists):
    # site-packages runs a `.pth` file found at its top level, in every process.
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read("typecheck_guard.pth").decode()
    assert text == (ROOT / "src" / "typecheck_guard.pth").read_text()


def test_no_bookkeeping_words_in_file_names(dists):
    sdist, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        names = _sdist_names(sdist) + zf.namelist()
    assert [n for n in names if BOOKKEEPING_NAME.search(n)] == []


def test_no_bookkeeping_words_in_what_the_wheel_installs(dists):
    _, wheel = dists
    found = []
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.endswith((".py", ".md", ".txt", ".typed")):
                for i, line in enumerate(zf.read(name).decode().splitlines(), 1):
                    if BOOKKEEPING.search(line):
                        found.append(f"{name}:{i}: {line.strip()}")
    assert found == []


@pytest.mark.parametrize(
    ("line", "bookkeeping"),
    [
        ("# --- S0: seed 000 ---", True),
        ("one per seed", True),
        ("the held-out tree operation", True),
        ("| eager | issue 3 |", True),
        ('jaxtyping\'s issue #213, "jaxtyping with JAX severely slowing down"', False),
        ("S0 leaves", True),
        ("S1000 is a shape", False),
    ],
)
def test_the_bookkeeping_pattern(line, bookkeeping):
    assert bool(BOOKKEEPING.search(line)) == bookkeeping
