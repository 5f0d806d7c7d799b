"""Every public name has an entry in the API reference (`docs/api.md`), and every
entry there names a public name.

The public names are `typecheck_guard/__init__.py`'s re-exports (`from ._x import
name as name`) and its `__all__` if it has one; we read them from the source and
check them against the module, so that a name imported the other way is noticed.
"""

import ast
import re
import types
from pathlib import Path

import typecheck_guard

ROOT = Path(__file__).parents[1]
INIT = ROOT / "src" / "typecheck_guard" / "__init__.py"
ENTRY = re.compile(r"^::: typecheck_guard\.(\w+)\s*$", re.M)


def _reexported() -> set[str]:
    names = set()
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.ImportFrom):
            names |= {a.name for a in node.names if a.asname == a.name}
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names |= set(ast.literal_eval(node.value))
    return names


def _public() -> set[str]:
    return {
        name
        for name, value in vars(typecheck_guard).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


def test_the_public_names_are_the_reexports():
    assert _reexported() == _public()
    assert "check" in _public()


def test_every_public_name_has_a_reference_entry():
    documented = ENTRY.findall((ROOT / "docs" / "api.md").read_text())
    assert len(documented) == len(set(documented)), "an entry twice"
    assert sorted(_public() - set(documented)) == [], "public, with no entry"
    assert sorted(set(documented) - _public()) == [], "an entry for no public name"
