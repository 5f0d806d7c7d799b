"""`install()` imports nothing: each part patches its library when the program imports
it, right after the library's own code runs, or at once if it is imported already.
The docs tell users to call `install()` first thing, so a program that configures
JAX or jaxtyping through the environment after it (`JAX_ENABLE_X64`,
`JAX_PLATFORMS`, `JAXTYPING_DISABLE`, ...) must get what it gets without us.

Each test runs a fresh interpreter (this one has JAX imported), and each way of
turning typecheck_guard on: `install()` in the program, `typecheck-guard run`,
`TYPECHECK_GUARD=install`, and `pytest --typecheck-guard-install`.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import typecheck_guard

SRC = str(Path(typecheck_guard.__file__).parents[1])

# What a program can configure only before it imports them.
LIBRARIES = (
    "jax",
    "jaxlib",
    "jaxtyping",
    "numpy",
    "ml_dtypes",
    "flax",
    "chex",
    "equinox",
    "typeguard",
    "beartype",
)

WAYS = ["call", "run", "variable"]


def _python(way: str, program: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("JAX", "TYPECHECK"))
    }
    env["PYTHONPATH"] = os.pathsep.join([SRC, env.get("PYTHONPATH", "")]).rstrip(
        os.pathsep
    )
    command = [sys.executable, str(program), way, *args]
    if way == "run":
        command[1:1] = ["-m", "typecheck_guard", "run"]
    if way == "variable":
        env["TYPECHECK_GUARD"] = "install"
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)


def _write(path: Path, source: str) -> Path:
    path.write_text(textwrap.dedent(source))
    return path


SEEN = f"""
import sys

if sys.argv[1] == "call":
    import typecheck_guard

    typecheck_guard.install()
print(sorted(m for m in {LIBRARIES!r} if m in sys.modules))
print(sys.modules["typecheck_guard"].installed() if "typecheck_guard" in sys.modules else None)
"""


@pytest.mark.parametrize("way", WAYS)
def test_install_imports_no_library(tmp_path: Path, way: str):
    proc = _python(way, _write(tmp_path / "seen.py", SEEN))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "[]\nTrue\n", "")


def test_the_pytest_option_imports_no_library_before_conftest(
    pytester, monkeypatch, tmp_path: Path
):
    # What the conftest finds imported is what other plugins imported (jaxtyping's
    # and typeguard's import theirs), with or without the option: never JAX.
    seen = tmp_path / "seen.txt"
    monkeypatch.setenv("SEEN", str(seen))
    monkeypatch.delenv("JAX_ENABLE_X64", raising=False)
    pytester.makeconftest(
        f"""
        import os
        import sys

        with open(os.environ["SEEN"], "a") as f:
            print(sorted(m for m in {LIBRARIES!r} if m in sys.modules), file=f)
        os.environ["JAX_ENABLE_X64"] = "1"  # configure JAX before anything imports it
        """
    )
    pytester.makepyfile(
        """
        import typecheck_guard

        def test_dtype():
            import jax.numpy as jnp

            assert jnp.ones(1).dtype == jnp.float64
            print("installed", typecheck_guard.installed())
        """
    )
    for options in ([], ["--typecheck-guard-install"]):
        result = pytester.runpytest_subprocess(*options, "-p", "no:cacheprovider", "-s")
        result.assert_outcomes(passed=1)
        assert f"installed {bool(options)}" in result.stdout.str()
    plain, installed = seen.read_text().splitlines()
    assert plain == installed and "'jax'" not in plain


# The reviewer's programs (JAX_ENABLE_X64 and JAX_NUMPY_RANK_PROMOTION,
# JAXTYPING_DISABLE, JAX_PLATFORMS) in one; only the last line differs by way.
CONFIGURED = """
import os
import sys

if sys.argv[1] == "call":
    import typecheck_guard

    typecheck_guard.install()

os.environ["JAX_ENABLE_X64"] = "1"
os.environ["JAX_NUMPY_RANK_PROMOTION"] = "raise"
os.environ["JAXTYPING_DISABLE"] = "1"  # the FAQ's production switch
os.environ["JAX_PLATFORMS"] = "tpu"  # not on this machine: JAX must refuse
import jax
import jax.numpy as jnp
import jaxtyping
import numpy as np
from beartype import beartype
from jaxtyping import Float, PyTree, jaxtyped


@jaxtyped(typechecker=beartype)
def f(x: Float[np.ndarray, "n"], tree: PyTree[Float[np.ndarray, "n"]]):
    return "ran"


print("x64", jax.config.jax_enable_x64, jnp.result_type(1.0))
print("rank promotion", jax.config.jax_numpy_rank_promotion)
bad = np.ones((2, 2), np.int32)
print("jaxtyping", jaxtyping.config.jaxtyping_disable, f(bad, {"a": bad}))
try:
    print("backend", jax.default_backend())
except RuntimeError as e:
    print("backend", type(e).__name__)

from jax._src import tree_util as src
from typecheck_guard._adapt._jax import funnel_name

print("patched", hasattr(getattr(src, funnel_name("register_pytree_node")), "__typecheck_guard_original__"))
"""


def test_the_environment_set_after_install_is_what_jax_and_jaxtyping_read(
    tmp_path: Path,
):
    program = _write(tmp_path / "configured.py", CONFIGURED)
    plain = _python("plain", program)
    assert plain.returncode == 0, plain.stderr
    *lines, patched = plain.stdout.splitlines()
    assert lines == [
        "x64 True float64",
        "rank promotion raise",
        "jaxtyping True ran",
        "backend RuntimeError",
    ]
    assert patched == "patched False"
    for way in WAYS:
        proc = _python(way, program)
        assert proc.returncode == 0, (way, proc.stderr)
        assert proc.stdout.splitlines() == [*lines, "patched True"], way


UNDONE = """
import sys

import typecheck_guard

before = list(sys.meta_path)
typecheck_guard.install()
assert sys.meta_path[1:] == before, sys.meta_path  # first, the others as they were
typecheck_guard.uninstall()
assert sys.meta_path == before, sys.meta_path

import chex
import jax
from chex._src import dataclass
from jax._src import tree_util as src
from jaxtyping import PyTree

from typecheck_guard._adapt._jax import funnel_name

print(hasattr(getattr(src, funnel_name("register_pytree_node")), "__typecheck_guard_original__"))
# chex's own registration function is its `functools.cache` wrapper.
print(hasattr(dataclass.register_dataclass_type_with_jax_tree_util, "cache_info"))
print(type(PyTree).__dict__["__instancecheck__"].__module__)
"""


def test_uninstall_before_jax_is_imported_leaves_nothing_waiting(tmp_path: Path):
    proc = _python("plain", _write(tmp_path / "undone.py", UNDONE))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "False",
        "True",
        "jaxtyping._pytree_type",
    ]


UNTOUCHED = """
import sys

import typecheck_guard

if sys.argv[1] == "call":
    typecheck_guard.install()
ours = [f for f in sys.meta_path if type(f).__module__.startswith("typecheck_guard")]
print("hook", len(ours))
import chex
import jax
from jaxtyping import PyTree

for module in (jax, sys.modules["chex._src.dataclass"], sys.modules["jaxtyping._pytree_type"]):
    loader = module.__loader__
    print(
        module.__name__,
        type(loader).__name__,
        module.__spec__.loader is loader,
        "exec_module" in vars(loader),
    )
# Gone once nothing waits.
print("hook", sum(type(f).__module__.startswith("typecheck_guard") for f in sys.meta_path))
print("installed", typecheck_guard.installed())
"""


def test_the_hook_leaves_loaders_and_specs_alone_and_goes(tmp_path: Path):
    program = _write(tmp_path / "untouched.py", UNTOUCHED)
    plain = _python("plain", program)
    installed = _python("call", program)
    assert plain.returncode == installed.returncode == 0, installed.stderr
    assert installed.stdout.splitlines() == [
        "hook 1",
        *plain.stdout.splitlines()[1:4],
        "hook 0",
        "installed True",
    ]
    assert plain.stdout.splitlines()[1:4] == [
        "jax SourceFileLoader True False",
        "chex._src.dataclass SourceFileLoader True False",
        "jaxtyping._pytree_type SourceFileLoader True False",
    ]


SWITCHED_OFF = """
import sys
import warnings

import typecheck_guard
from typecheck_guard._compat import _versions

if sys.argv[1] == "call":
    typecheck_guard.install()
_versions.SUPPORTED["chex"] = ("99.0", None)  # no chex is this new
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import chex  # the warning points here
for w in caught:
    if w.category is typecheck_guard.PartsDisabledWarning:
        print(w.filename == __file__, w.lineno, "chex.dataclass classes" in str(w.message))
from chex._src import dataclass
# chex's own registration function is its `functools.cache` wrapper.
print(hasattr(dataclass.register_dataclass_type_with_jax_tree_util, "cache_info"))
"""


def test_a_part_that_cant_work_warns_at_its_librarys_import(tmp_path: Path):
    program = _write(tmp_path / "off.py", SWITCHED_OFF)
    line = (
        program.read_text()
        .splitlines()
        .index("    import chex  # the warning points here")
        + 1
    )
    proc = _python("call", program)
    assert proc.returncode == 0, proc.stderr
    # At the program's `import chex`; chex is left as it is, the rest installed.
    assert proc.stdout.splitlines() == [f"True {line} True", "True"]


def test_under_the_variable_it_is_a_line_even_under_w_error(tmp_path: Path):
    program = _write(tmp_path / "off.py", SWITCHED_OFF)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX")}
    env["TYPECHECK_GUARD"] = "install"
    env["PYTHONPATH"] = os.pathsep.join([SRC, env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-W", "error", str(program), "variable"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["True"]
    assert proc.stderr.startswith("typecheck_guard: PartsDisabledWarning: ")
    assert "\n- chex.dataclass classes still re-run" in proc.stderr
