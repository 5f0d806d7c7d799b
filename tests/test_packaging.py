"""What a release ships: the sdist and the wheel, as `python -m build` makes them
(the wheel from the unpacked sdist) and as `pip install .` does (the wheel from the
checkout), hold exactly the files we mean them to, whatever else lies in the
builder's tree; they pass `twine check`; they hold the license and the metadata a
package index shows, and none of our own bookkeeping (scenario codes,
development-log words) in their file names or in the wheel's text. The README reads
right on the package index's project page, and the changelog is release notes.

The builds run hatchling's PEP 517 hooks in a subprocess, without a network: a few
seconds.
"""

import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.version import Version

import typecheck_guard

try:
    import tomllib
except ImportError:  # Python 3.10: hatchling brings tomli there.
    import tomli as tomllib

ROOT = Path(__file__).parents[1]
# Words of our development history, not of the product: "seed 000", "S0".."S3",
# "held-out", "issue 3" (an upstream "issue #213" is a reference, and fine).
BOOKKEEPING = re.compile(
    r"\bseed\b|\bseed ?\d|\bS[0-3]\b|held-out|\bissue \d", re.IGNORECASE
)
BOOKKEEPING_NAME = re.compile(r"seed|held.?out|issue|(^|[/_.-])s[0-3]([/_.-]|$)", re.I)

# What the sdist holds: these folders and files of the repository, and PKG-INFO.
# hatchling adds `.gitignore` to every sdist (and applies it when it builds the
# wheel from it), and a build hook (`hatch_build.py`) when there is one.
SDIST_FOLDERS = ("src/", "tests/", "docs/")
SDIST_FILES = {
    "pyproject.toml",
    "README.md",
    "CHANGELOG.md",
    "LICENSE",
    "mkdocs.yml",
    ".gitignore",
    "hatch_build.py",
}
# What a wheel's .dist-info holds besides the license.
DIST_INFO = {"METADATA", "WHEEL", "RECORD", "entry_points.txt", "licenses/LICENSE"}


def _checkout_files() -> list[str]:
    """The repository's files as a clone of it holds them: what git tracks, and
    what it would (untracked, not ignored), that exists. Outside a git checkout
    (an unpacked sdist), the files of the folders and files the sdist holds."""
    try:
        proc = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            timeout=60,
        )
    except OSError:
        proc = None
    if proc is not None and proc.returncode == 0 and proc.stdout:
        names = proc.stdout.decode().split("\0")
    else:
        names = [
            str(p.relative_to(ROOT))
            for folder in SDIST_FOLDERS
            for p in (ROOT / folder).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        ] + [n for n in SDIST_FILES if (ROOT / n).is_file()]
    return sorted(n for n in names if n and (ROOT / n).is_file())


def _litter(checkout: Path) -> None:
    """What a builder's tree holds besides the repository: virtual environments
    under other names than `.venv` (with absolute symlinks, which a safe
    extraction of an sdist refuses), build output, bytecode, editor and OS files,
    notes."""
    for name in ("venv", "b"):
        venv.EnvBuilder(symlinks=True, with_pip=False).create(checkout / name)
        site = checkout / name / "lib" / "site-packages" / "somepkg"
        site.mkdir(parents=True)
        (site / "__init__.py").write_text("")
    for name, text in {
        "notes.txt": "todo\n",
        "scratch.py": "print('scratch')\n",
        ".env": "SECRET=1\n",
        ".DS_Store": "",
        ".idea/workspace.xml": "<project/>\n",
        "build/lib/typecheck_guard/__init__.py": "",
        "dist/typecheck_guard-0.0.0.tar.gz": "",
        "benchmarks/results.json": "{}\n",
        "src/typecheck_guard/__pycache__/__init__.cpython-311.pyc": "",
        "src/typecheck_guard.egg-info/PKG-INFO": "",
        "tests/__pycache__/conftest.cpython-311-pytest-8.0.pyc": "",
        "tests/.hypothesis/examples/x": "",
        "docs/.DS_Store": "",
    }.items():
        path = checkout / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


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


def _unpack(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as tar:
        # The "data" filter (safe extraction, which `python -m build` uses: it
        # refuses absolute links) is in Python 3.10.12 and later.
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(into, **safe)
    (source,) = into.iterdir()
    return source


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A copy of the repository with litter around it, and the repository's files."""
    files = _checkout_files()
    copy = tmp_path_factory.mktemp("checkout") / "typecheck-guard"
    for name in files:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    _litter(copy)
    return copy, files


@pytest.fixture(scope="module")
def dists(
    checkout: tuple[Path, list[str]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, Path]:
    """The sdist from the littered checkout, and the wheel built from the unpacked
    sdist, as `python -m build` makes them: so the sdist must be complete."""
    pytest.importorskip("hatchling", reason="the `test` extra installs hatchling")
    out = tmp_path_factory.mktemp("dist")
    sdist = _build("sdist", checkout[0], out)
    source = _unpack(sdist, tmp_path_factory.mktemp("sdist"))
    wheel = _build("wheel", source, out)
    return sdist, wheel


def _sdist_names(sdist: Path) -> list[str]:
    with tarfile.open(sdist) as tar:
        return [
            m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile() or m.issym()
        ]


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return [n for n in zf.namelist() if not n.endswith("/")]


def _metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.parser.Parser().parsestr(zf.read(name).decode())


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _intended_wheel(files: list[str]) -> set[str]:
    """The package's files, what pyproject.toml adds to the wheel by name
    (`force-include`: a start-up `.pth`, say), and the .dist-info."""
    package = {
        n.removeprefix("src/") for n in files if n.startswith("src/typecheck_guard/")
    }
    wheel = _pyproject()["tool"]["hatch"]["build"]["targets"]["wheel"]
    added = set(wheel.get("force-include", {}).values())
    dist_info = f"typecheck_guard-{typecheck_guard.__version__}.dist-info/"
    return package | added | {dist_info + n for n in DIST_INFO}


def test_the_sdist_holds_what_it_lists_and_nothing_else(checkout, dists):
    _, files = checkout
    sdist, _ = dists
    intended = {n for n in files if n.startswith(SDIST_FOLDERS) or n in SDIST_FILES}
    intended.add("PKG-INFO")
    names = _sdist_names(sdist)
    assert len(names) == len(set(names))
    assert set(names) - intended == set(), "in the sdist, not meant to be"
    assert intended - set(names) == set(), "meant for the sdist, missing"
    for needed in ("src/typecheck_guard/py.typed", "LICENSE", "CHANGELOG.md"):
        assert needed in names


def test_the_wheel_holds_the_package_and_nothing_else(checkout, dists, tmp_path):
    littered, files = checkout
    _, from_sdist = dists
    intended = _intended_wheel(files)
    # Built from the sdist (`python -m build`), and straight from the littered
    # checkout (`pip install .`).
    from_checkout = _build("wheel", littered, tmp_path)
    for wheel in (from_sdist, from_checkout):
        names = _wheel_names(wheel)
        assert len(names) == len(set(names))
        assert set(names) - intended == set(), f"in {wheel.name}, not meant to be"
        assert intended - set(names) == set(), f"meant for {wheel.name}, missing"


def test_twine_check_passes_on_both(dists):
    sdist, wheel = dists
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(sdist), str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        # Colour codes would hide "PASSED" from the assertion.
        env={**os.environ, "NO_COLOR": "1", "TERM": "dumb"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


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
    assert meta["Description-Content-Type"] == "text/markdown"


def test_mkdocs_agrees_with_the_project_urls(dists):
    _, wheel = dists
    urls = dict(u.split(", ", 1) for u in _metadata(wheel).get_all("Project-URL"))
    assert urls == _pyproject()["project"]["urls"]
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    assert re.search(r"^site_url: (\S+)$", mkdocs, re.M)[1] == urls["Documentation"]
    assert re.search(r"^repo_url: (\S+)$", mkdocs, re.M)[1] == urls["Source"]
    assert urls["Changelog"] == urls["Documentation"] + "changelog/"
    assert urls["Issues"] == urls["Source"] + "/issues"


def test_the_start_up_hook_ships_at_the_wheel_s_root(dists):
    # site-packages runs a `.pth` file found at its top level, in every process.
    _, wheel = dists
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read("typecheck_guard.pth").decode()
    assert text == (ROOT / "src" / "typecheck_guard.pth").read_text()


def test_no_bookkeeping_words_in_file_names(dists):
    sdist, wheel = dists
    names = _sdist_names(sdist) + _wheel_names(wheel)
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


MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_the_readmes_links_work_on_the_package_index():
    # The package index shows README.md without the repository around it: a
    # relative link there leads nowhere. Links into the documentation name its
    # pages on the documentation site, and each such page exists.
    docs_site = _pyproject()["project"]["urls"]["Documentation"]
    links = MARKDOWN_LINK.findall((ROOT / "README.md").read_text())
    assert links
    assert [link for link in links if not link.startswith("https://")] == []
    for link in links:
        if link.startswith(docs_site):
            page = link.removeprefix(docs_site).split("#")[0].rstrip("/")
            assert (ROOT / "docs" / f"{page or 'index'}.md").is_file(), link


def _changelog_sections() -> list[tuple[str, list[str], str]]:
    """CHANGELOG.md's `## ` sections: the title, its `### ` groups, the text."""
    text = (ROOT / "CHANGELOG.md").read_text()
    sections = []
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        groups = re.findall(r"^### (.+)$", body, re.M)
        sections.append((title.strip(), groups, body))
    return sections


def test_the_changelog_has_unreleased_on_top_in_keep_a_changelogs_groups():
    sections = _changelog_sections()
    assert sections[0][0] == "UNRELEASED"
    allowed = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]
    for title, groups, _ in sections:
        assert groups, title
        assert set(groups) <= set(allowed), title
        # In Keep a Changelog's order, each once.
        assert groups == sorted(groups, key=allowed.index), title


def test_the_version_is_not_claimed_released_before_it_is():
    version = Version(typecheck_guard.__version__)
    released = [title for title, _, _ in _changelog_sections()[1:]]
    if version.is_devrelease or version.is_prerelease:
        # `X.dev0` until X is tagged: then the UNRELEASED notes become X's.
        assert not any(t.split()[0] == version.base_version for t in released)
    else:
        assert released and released[0].split()[0] == str(version)
    # The citation names the version this README describes.
    for page in (ROOT / "README.md", ROOT / "docs" / "index.md"):
        cited = re.findall(r"^\s*version = \{(.+)\},$", page.read_text(), re.M)
        assert cited == [typecheck_guard.__version__], page.name


# What users don't see: our private modules, the test suite, benchmark and
# maintenance scripts.
INTERNAL = re.compile(
    r"typecheck_guard\._|`_[a-z]\w*\.py|\b(tests|benchmarks|scripts)/"
)


def test_the_changelog_speaks_to_users():
    found = [
        f"{title}: {line.strip()}"
        for title, _, body in _changelog_sections()
        for line in body.splitlines()
        if INTERNAL.search(line)
    ]
    assert found == []
