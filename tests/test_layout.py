"""The package's layout is its architecture: sub-packages with a README each, imports
that only go down the layers the READMEs name, no import cycle, a public surface of
re-exports only, and `import typecheck_guard` imports no JAX."""

import ast
import subprocess
import sys
from pathlib import Path

import typecheck_guard

PACKAGE = Path(typecheck_guard.__file__).parent
TESTS = Path(__file__).parent

# What each sub-package may import of ours (besides itself and `_errors`), lowest
# layer first. Each README says the same under "Never imports".
LAYERS = {
    "_compat": set(),
    "_cache": {"_compat"},
    "_unflatten": {"_cache", "_compat"},
    "_adapt": {"_unflatten", "_compat"},
    "_guard": {"_unflatten", "_compat"},
    "_profile": {"_guard", "_unflatten", "_adapt", "_cache", "_compat"},
    "_tools": {"_profile", "_adapt", "_compat", "_install", "_startup"},
}

PUBLIC = {
    "check",
    "install",
    "installed",
    "uninstall",
    "PartsDisabledWarning",
    "UnadaptedClassesWarning",
    "register_dataclass",
    "unflatten_safe",
    "unadapted",
    "UnadaptedClass",
    "cache_pytree_checks",
    "pytree_cache_info",
    "clear_pytree_cache",
    "PyTreeCacheInfo",
    "runtime_checks",
    "RuntimeTypecheckError",
    "profile",
    "Profile",
    "Site",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of ours that `name` imports, wherever the import statement is
    (module level, inside a function, under `TYPE_CHECKING`)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            elif node.module and node.module.split(".")[0] == "typecheck_guard":
                target = node.module
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.add(sub if sub in modules else target)
        elif isinstance(node, ast.Import):
            out.update(
                a.name for a in node.names if a.name.split(".")[0] == "typecheck_guard"
            )
    return out & set(modules)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_no_import_cycle():
    graph = _graph()
    # Depth-first search for a back edge; report the cycle it closes.
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise AssertionError("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_sub_packages_import_only_the_layers_below():
    wrong = []
    for module, targets in _graph().items():
        layer = _layer(module)
        if layer not in LAYERS:
            continue
        allowed = LAYERS[layer] | {layer, "_errors"}
        for target in targets:
            if target != "typecheck_guard" and _layer(target) not in allowed:
                wrong.append(f"{module} imports {target}")
    assert not wrong, "\n".join(sorted(wrong))


def test_every_sub_package_has_a_readme_and_a_test_folder():
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert packages == sorted(LAYERS)
    for name in packages:
        readme = (PACKAGE / name / "README.md").read_text()
        assert "Never imports" in readme, name
        # `_tools/` is tested in `tests/tools/`, `_adapt/` in `tests/adapt/`, ...
        assert (TESTS / name.lstrip("_")).is_dir(), name


def test_sub_package_inits_export_nothing():
    for init in PACKAGE.glob("*/__init__.py"):
        body = ast.parse(init.read_text()).body
        code = [n for n in body if not isinstance(n, ast.Expr)]
        assert not code, f"{init} should hold only its docstring"


def test_public_surface_is_re_exports_only():
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    exported = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                # `from ._x import name as name`: the explicit re-export form.
                assert alias.asname == alias.name, ast.unparse(node)
                exported.add(alias.name)
        elif isinstance(node, ast.Assign):
            assert [t.id for t in node.targets] == ["__version__"]  # type: ignore[attr-defined]
        else:
            assert isinstance(node, ast.Expr), ast.unparse(node)
    assert exported == PUBLIC
    for name in PUBLIC:
        assert getattr(typecheck_guard, name) is not None


def test_import_does_not_import_jax():
    code = (
        "import sys, typecheck_guard\n"
        "typecheck_guard.pytree_cache_info(); typecheck_guard.clear_pytree_cache()\n"
        "print(sorted(m for m in ('jax', 'jaxlib', 'jaxtyping', 'numpy', 'flax', "
        "'equinox', 'chex', 'beartype', 'typeguard') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
