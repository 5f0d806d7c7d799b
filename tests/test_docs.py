"""The documentation's code runs.

Every ```python block of `README.md` and of a page under `docs/` is executed, in
page order, as one script in a fresh interpreter (a page reads as one session, so
later blocks may use earlier names). A line `<!-- test: new process -->` before a block starts a new
script, for an example that needs a fresh process (e.g. code that runs before
`install()`). `<!-- test: requires typecheck_guard.NAME -->` anywhere in a page marks
it as needing a public name that is not in every branch yet: the page is then an
expected failure (strict) until the name exists. Shell commands go in ```bash
blocks and output in ```text blocks; they are not run.

`mkdocs build --strict` itself runs in `.ci/run`.
"""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import typecheck_guard
from helpers import requires

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
NEW_PROCESS = "<!-- test: new process -->"
REQUIRES = re.compile(r"<!-- test: requires typecheck_guard\.(\w+) -->")
# Pages whose examples use a library feature newer than our floor: skipped on older
# releases (the oldest-versions CI session), with the reason, which pytest's summary
# lists (`-rs` in pyproject.toml).
NEEDS = {
    "how-to/flax-struct.md": (
        "jaxtyping",
        "0.3.3",
        "a typechecked TrainState subclass: older jaxtyping can't resolve optax's "
        "`ArrayTree` forward reference",
    ),
    # The page says so too.
    "how-to/nnx.md": (
        "flax",
        "0.10.4",
        "older `nnx.Rngs` subclasses `typing.Mapping`, which beartype reports as a "
        "deprecated PEP 484 hint",
    ),
}


def scripts(text: str) -> list[str]:
    out = []
    for part in text.split(NEW_PROCESS):
        blocks = [textwrap.dedent(b) for b in FENCE.findall(part)]
        if blocks:
            out.append("\n\n".join(blocks))
    return out


def _pages() -> list:
    params = []
    # The README's examples are the first a new user runs.
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        text = page.read_text()
        if not FENCE.search(text):
            continue
        missing = [n for n in REQUIRES.findall(text) if not hasattr(typecheck_guard, n)]
        marks = (
            [
                pytest.mark.xfail(
                    reason=f"needs typecheck_guard.{', '.join(missing)}", strict=True
                )
            ]
            if missing
            else []
        )
        name = str(page.relative_to(DOCS if page.is_relative_to(DOCS) else ROOT))
        if name in NEEDS:
            marks.append(requires(*NEEDS[name]))
        params.append(pytest.param(page, id=name, marks=marks))
    return params


@pytest.mark.parametrize("page", _pages())
def test_examples_run(page: Path, tmp_path: Path) -> None:
    for i, script in enumerate(scripts(page.read_text())):
        path = tmp_path / f"example_{i}.py"
        path.write_text(script)
        proc = subprocess.run(
            # A UserWarning (UnadaptedClassesWarning among them) the page does not
            # expect is a bug in the page.
            [sys.executable, "-W", "error::UserWarning", str(path)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, (
            f"{page.relative_to(ROOT)}, script {i}:\n{script}\n--- stderr ---\n"
            f"{proc.stderr}"
        )


def test_scripts_split_on_marker() -> None:
    text = (
        "```python\na = 1\n```\ntext\n```bash\nls\n```\n"
        f"{NEW_PROCESS}\n```python\nb = 2\n```\n"
    )
    assert scripts(text) == ["a = 1\n", "b = 2\n"]


def test_every_page_is_in_the_nav() -> None:
    nav = set(
        re.findall(r":\s*([\w\-/]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    )
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md")}
    assert pages == nav
    # `#only-light` / `#only-dark` pick the image for the palette; the file is the
    # part before it.
    for image in re.findall(
        r"\]\((images/[^)#]+)[^)]*\)", (DOCS / "performance.md").read_text()
    ):
        assert (DOCS / image).is_file(), image
