"""The pytest plugin, tested by running pytest inside pytest (`pytester`).

Each inner session runs in this process, with its own recorder: what its tests run
is judged by its own `--typecheck-guard` mode, not by this suite's.
"""

import sys
import textwrap
import warnings

# Imported here so that pytester's in-process runs find them in `sys.modules` and
# don't re-execute them (which would register their pytree classes a second time).
import chex  # noqa: F401
import equinox  # noqa: F401
import flax.nnx  # noqa: F401
import flax.struct  # noqa: F401
import jax  # noqa: F401
import pytest

import typecheck_guard

# A flagged check at every transform and registration the issue names. The classes
# annotate only what Equinox's and NNX's placeholder trees keep (they rebuild nodes
# with booleans or None in place of arrays); the seed class goes through jax.jit.
FLAGGED = """
import functools as ft

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from beartype import beartype
from flax import nnx, struct
from jaxtyping import Array, ArrayLike, Float, Int, PyTree, jaxtyped
from typeguard import typechecked


# Seed 000, as reported: a jaxtyped flax.struct returned from jax.jit, no install().
@ft.partial(jaxtyped, typechecker=typechecked)
@struct.dataclass
class SeedNode:
    x: list[Int[ArrayLike, ""]]
    y: list[str | int | float] = struct.field(pytree_node=False)


@jax.jit
def seed_step(x: SeedNode):
    return x


@jax.tree_util.register_pytree_node_class
class CustomNode:
    @jaxtyped(typechecker=beartype)
    def __init__(self, x, scale: float):
        self.x = x
        self.scale = scale

    def tree_flatten(self):
        return (self.x,), self.scale

    @classmethod
    def tree_unflatten(cls, scale, children):
        return cls(*children, scale)


@chex.dataclass
class ChexState:
    x: jax.Array

    @jaxtyped(typechecker=beartype)
    def __post_init__(self) -> None:
        pass


TRANSFORMS = {"jit": jax.jit, "filter_jit": eqx.filter_jit, "nnx_jit": nnx.jit}


def test_seed_struct():
    x = SeedNode([1, 2, 3], ["a", 1, 2.0])
    seed_step(x)
    seed_step(x)


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_custom(transform):
    step = TRANSFORMS[transform](lambda s: s)
    state = step(step(CustomNode(jnp.ones(3), 0.5)))
    step(state)


@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
def test_chex(transform):
    step = TRANSFORMS[transform](lambda s: s)
    state = step(step(ChexState(x=jnp.ones(3))))
    step(state)
"""

# Nothing here runs a check per call.
CLEAN = """
import warnings

import typecheck_guard

with warnings.catch_warnings():
    # In-process, the classes of earlier inner sessions are still registered.
    warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
    typecheck_guard.install()  # before the classes: they unflatten through __new__

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from beartype import beartype
from flax import nnx, struct
from jaxtyping import Array, Float, PyTree, jaxtyped


@jaxtyped(typechecker=beartype)
@struct.dataclass
class Adapted:
    params: PyTree[Float[Array, "..."]]
    step: Float[Array, ""]


class Module(eqx.Module):
    w: Float[Array, "n"]

    @jaxtyped(typechecker=beartype)
    def __init__(self, w: Float[Array, "n"]):
        self.w = w


@jax.jit
@jaxtyped(typechecker=beartype)
def traced_only(x: Float[Array, "n"]) -> Float[Array, "n"]:
    return x * 2


def test_equinox_modules():
    for transform in (jax.jit, eqx.filter_jit, nnx.jit):
        step = transform(lambda m: m)
        step(step(step(Module(jnp.ones(3)))))


def test_installed_classes():
    step = jax.jit(lambda s: s.replace(step=s.step + 1))
    step(step(step(Adapted({"a": jnp.ones(2)}, jnp.zeros(())))))


def test_checks_only_while_tracing():
    for n in (2, 3, 3, 3):
        traced_only(jnp.ones(n))
"""

MARKED = """
import jax
import jax.numpy as jnp
import pytest
from beartype import beartype
from jaxtyping import jaxtyped


@jax.tree_util.register_pytree_node_class
class Node:
    @jaxtyped(typechecker=beartype)
    def __init__(self, x, scale: float):
        self.x = x
        self.scale = scale

    def tree_flatten(self):
        return (self.x,), self.scale

    @classmethod
    def tree_unflatten(cls, scale, children):
        return cls(*children, scale)


STEP = jax.jit(lambda s: s)


@pytest.mark.allow_runtime_typechecks
def test_marked():
    STEP(STEP(STEP(Node(jnp.ones(2), 1.0))))


def test_unmarked():
    STEP(STEP(STEP(Node(jnp.ones(2), 1.0))))
"""


def _ran(result: pytest.RunResult) -> str:
    return result.stdout.str()


def test_strict_flags_every_registration_and_transform(pytester: pytest.Pytester):
    pytester.makepyfile(test_flagged=FLAGGED)
    result = pytester.runpytest("--typecheck-guard=strict", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=7)
    out = _ran(result)
    expected = {
        "test_seed_struct": (
            "test_flagged.SeedNode.__init__",
            "jaxtyping with typeguard",
            "jax.jit(test_flagged.seed_step)",
        ),
    }
    for transform, label in (
        ("jit", "jax.jit"),
        ("filter_jit", "equinox.filter_jit"),
        ("nnx_jit", "flax.nnx.jit"),
    ):
        expected[f"test_custom[{transform}]"] = (
            "test_flagged.CustomNode.__init__",
            "jaxtyping with beartype",
            f"{label}(test_flagged.test_custom.<locals>.<lambda>)",
        )
        expected[f"test_chex[{transform}]"] = (
            "test_flagged.ChexState.__post_init__",
            "jaxtyping with beartype",
            f"{label}(test_flagged.test_chex.<locals>.<lambda>)",
        )
    for test, (checked, checker, jitted) in expected.items():
        # Each failure names the class, the checker, the jitted function and the
        # line of the call that ran the check.
        result.stdout.fnmatch_lines(
            [f"*{checked} was typechecked by {checker} while {jitted} was called*"]
        )
        assert f"FAILED test_flagged.py::{test} - typecheck_guard.Runtime" in out
    assert "called at test_flagged.py:" in out
    assert "typecheck_guard.install()" in out
    # The session summary: one line per site, with counts and times.
    result.stdout.fnmatch_lines(
        [
            "*typecheck-guard: typechecks run at dispatch time*",
            "*checks*time*site*",
            "*typecheck-guard: * runtime typechecks flagged at * sites, * ms steady-state + * ms in first checks (one-time setup) (--typecheck-guard=strict: the tests that ran them failed).",
        ]
    )


def test_strict_passes_clean_code(pytester: pytest.Pytester):
    pytester.makepyfile(test_clean=CLEAN)
    result = pytester.runpytest("--typecheck-guard=strict", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "typecheck-guard: no typecheck ran in a jitted call outside tracing (--typecheck-guard=strict)."
        ]
    )
    typecheck_guard.uninstall()


def test_marker_exempts_a_test(pytester: pytest.Pytester):
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest("--typecheck-guard=strict", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["FAILED test_marked.py::test_unmarked - *"])
    # Both tests' checks are counted. The flagged site has a line of its own, the
    # marked test's site only a share of the one line for allowed sites ...
    result.stdout.fnmatch_lines(
        [
            "*test_marked.Node.__init__*; 1 test",
            "typecheck-guard: * allowed checks at 1 site (0 in host callbacks, 1 in "
            "tests marked allow_runtime_typechecks), * ms; -v lists them.",
        ]
    )
    assert ", allowed" not in _ran(result)
    # ... and -v lists it.
    result = pytester.runpytest(
        "--typecheck-guard=strict", "-p", "no:cacheprovider", "-v"
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_marked.Node.__init__*; 1 test*, allowed"])
    assert "-v lists them" not in _ran(result)


def test_warn_reports_in_the_summary_and_fails_nothing(pytester: pytest.Pytester):
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest("--typecheck-guard=warn", "-p", "no:cacheprovider")
    # No Python warning: the report is the plugin's own summary.
    result.assert_outcomes(passed=2)
    assert "RuntimeTypecheckWarning" not in _ran(result)
    assert "warnings summary" not in _ran(result)
    result.stdout.fnmatch_lines(
        [
            "*typecheck-guard: typechecks run at dispatch time*",
            "typecheck_guard: a typecheck ran at dispatch time, not at trace time.",
            "- test_marked.Node.__init__ was typechecked by jaxtyping with beartype*",
            "*(--typecheck-guard=warn: reported here; no test fails for it)",
            "in: test_marked.py::test_unmarked",
            "typecheck-guard: * runtime typechecks flagged at 1 site, * "
            "(--typecheck-guard=warn: reported above, no test failed for them).",
        ]
    )


@pytest.mark.parametrize("ini", ["[pytest]\nfilterwarnings = error\n", None])
def test_warn_never_fails_a_test_under_filterwarnings_error(
    pytester: pytest.Pytester, ini: str | None
):
    # `filterwarnings = error` is the norm (Equinox's suite, ours): a warning the
    # suite escalates would turn every flagged test into a failure.
    pytester.makepyfile(test_marked=MARKED)
    if ini is not None:
        pytester.makeini(ini)
    else:
        pytester.makepyprojecttoml(
            '[tool.pytest.ini_options]\nfilterwarnings = ["error"]\n'
        )
    for args in ([], ["-W", "error"], ["--typecheck-guard-callbacks=warn"]):
        result = pytester.runpytest(
            "--typecheck-guard=warn", *args, "-p", "no:cacheprovider"
        )
        result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*no test failed for them*"])


@pytest.mark.allow_runtime_typechecks  # the inner session, off, leaves its checks to us
def test_off_does_nothing(pytester: pytest.Pytester):
    pytester.makepyfile(test_marked=MARKED)
    for args in (["--typecheck-guard=off"], []):
        result = pytester.runpytest(*args, "-p", "no:cacheprovider")
        result.assert_outcomes(passed=2)
        assert "typecheck-guard:" not in _ran(result)
        assert "RuntimeTypecheck" not in _ran(result)


def test_off_imports_and_patches_nothing(pytester: pytest.Pytester):
    # A fresh interpreter: with the plugin off, pytest's startup imports no jax.
    pytester.makepyfile(
        test_startup="""
        import sys

        def test_nothing_imported():
            assert "typecheck_guard._guard._jitwrap" not in sys.modules
            assert "jax" not in sys.modules, sorted(m for m in sys.modules if "jax" in m)
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize("mode", ["warn", "strict"])
def test_warn_and_strict_import_nothing_before_conftest(
    pytester: pytest.Pytester, mode: str
):
    # A fresh interpreter: a conftest that configures JAX through the environment,
    # as JAX's docs say (before anything imports it), gets what it set, and the
    # guard still watches the jitted calls the tests make. (jaxtyping is imported
    # by pytest itself, through jaxtyping's own plugin.)
    pytester.makeconftest(
        """
        import os, sys

        IMPORTED = sorted(m for m in ("jax", "equinox", "flax") if m in sys.modules)
        os.environ["JAX_ENABLE_X64"] = "1"
        """
    )
    pytester.makepyfile(
        test_env="""
        import jax
        import jax.numpy as jnp

        from conftest import IMPORTED

        def test_configured():
            assert IMPORTED == []
            assert jnp.ones(1).dtype == jnp.float64
            assert type(jax.jit(lambda x: x)).__name__ == "Jitted"
        """
    )
    result = pytester.runpytest_subprocess(
        f"--typecheck-guard={mode}", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1)


def test_ini_mirror(pytester: pytest.Pytester):
    pytester.makepyfile(test_marked=MARKED)
    pytester.makeini("[pytest]\ntypecheck_guard = strict\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["typecheck-guard: strict"])  # the report header
    # The command line wins over the ini file.
    result = pytester.runpytest("--typecheck-guard=warn", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*(--typecheck-guard=warn: reported above*"])


def test_pyproject_mirror(pytester: pytest.Pytester):
    pytester.makepyfile(test_marked=MARKED)
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\ntypecheck_guard = "strict"\n'
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)


def test_unknown_value_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile(test_marked=MARKED)
    result = pytester.runpytest("--typecheck-guard=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--typecheck-guard: invalid choice: 'sometimes' (choose from *off*warn*strict*"
        ]
    )

    pytester.makeini("[pytest]\ntypecheck_guard = sometimes\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*typecheck_guard = 'sometimes' in *tox.ini*: the plugin's modes are 'off'*'warn' and 'strict'*"
        ]
    )


def test_a_swallowed_error_still_fails_the_test(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_swallow=MARKED
        + textwrap.dedent(
            """
            def test_swallows():
                try:
                    STEP(STEP(STEP(Node(jnp.ones(2), 1.0))))
                except Exception:
                    pass
            """
        )
    )
    result = pytester.runpytest(
        "--typecheck-guard=strict", "-p", "no:cacheprovider", "-k", "swallows"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*_ test_swallows _*",
            "typecheck_guard: a typecheck ran at dispatch time, not at trace time.",
            "- test_swallow.Node.__init__ was typechecked by *",
        ]
    )


def test_jitted_in_conftest_and_fixtures_is_covered(pytester: pytest.Pytester):
    # The plugin switches the guard on before conftest files are imported.
    pytester.makeconftest(
        MARKED.replace("@pytest.mark.allow_runtime_typechecks", "").split(
            "def test_marked"
        )[0]
        + textwrap.dedent(
            """
            @pytest.fixture
            def state():
                state = STEP(STEP(Node(jnp.ones(2), 1.0)))
                yield STEP(state)  # setup: flagged
            """
        )
    )
    pytester.makepyfile(
        test_fixture="""
        def test_uses_fixture(state):
            pass
        """
    )
    result = pytester.runpytest("--typecheck-guard=strict", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*conftest.Node.__init__ was typechecked*called at conftest.py:*"]
    )
    # Our hook wrappers are hidden from the traceback.
    assert "_pytest_plugin.py" not in _ran(result)


def test_plugin_is_registered_under_pytest11():
    from importlib.metadata import entry_points

    (entry,) = [
        e for e in entry_points(group="pytest11") if e.name == "typecheck_guard"
    ]
    assert entry.value == "typecheck_guard._pytest_plugin"
    assert sys.modules.get(entry.value) is not None


# `--typecheck-guard-install`: the classes of a conftest and of a test module,
# typechecked flax.struct dataclasses, each counted by its own checker.
INSTALL_CONFTEST = """
import functools as ft

import jax
import jax.numpy as jnp
import pytest
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped

CHECKS = [0]


def counted(fn):
    checked = beartype(fn)

    @ft.wraps(checked)
    def wrapper(*args, **kwargs):
        CHECKS[0] += 1
        return checked(*args, **kwargs)

    return wrapper


@jaxtyped(typechecker=counted)
@struct.dataclass
class State:
    params: PyTree[Float[Array, "..."]]
    step: Float[Array, ""]


def steps(step, state, n=5):
    state = step(step(state))  # the trace, and the first cache hit
    CHECKS[0] = 0
    for _ in range(n):
        state = step(state)
    jax.block_until_ready(state)
    return CHECKS[0]


@pytest.fixture
def state():
    return State({"w": jnp.ones(3), "b": jnp.zeros(2)}, jnp.zeros(()))
"""

INSTALL_TESTS = """
import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import Array, Float, jaxtyped

from conftest import CHECKS, State, counted, steps


@jaxtyped(typechecker=counted)
@struct.dataclass
class Local:
    x: Float[Array, " n"]


def test_conftest_class(state):
    print("checks on 5 steps, conftest.State:", steps(jax.jit(lambda s: s.replace(step=s.step + 1)), state))


def test_module_class():
    print("checks on 5 steps, Local:", steps(jax.jit(lambda s: s.replace(x=2 * s.x)), Local(jnp.ones(3))))


def test_constructions_are_checked():
    CHECKS[0] = 0
    with pytest.raises(Exception, match="step"):
        State({"w": jnp.ones(3)}, jnp.zeros(3))
    with pytest.raises(Exception, match="x"):
        Local(jnp.ones((2, 2)))
    print("checks on 2 bad constructions:", CHECKS[0])
"""


def _install_project(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(INSTALL_CONFTEST)
    pytester.makepyfile(test_steps=INSTALL_TESTS)


def _assert_installed(result: pytest.RunResult) -> None:
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines_random(
        [
            "*checks on 5 steps, conftest.State: 0",
            "*checks on 5 steps, Local: 0",
            "*checks on 2 bad constructions: [1-9]*",
            "typecheck-guard: install() before collection",
            "typecheck-guard: no typecheck ran in a jitted call outside tracing (--typecheck-guard=strict).",
        ]
    )


def test_install_option_before_conftest_and_test_modules(pytester: pytest.Pytester):
    # A fresh interpreter: in this process, jax and flax are imported and our
    # classes registered already.
    _install_project(pytester)
    result = pytester.runpytest_subprocess(
        "--typecheck-guard-install",
        "--typecheck-guard=strict",
        "-s",
        "-p",
        "no:cacheprovider",
    )
    _assert_installed(result)


def test_install_ini(pytester: pytest.Pytester):
    _install_project(pytester)
    # A TOML boolean, which pytest hands us as the string "True".
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\ntypecheck_guard_install = true\ntypecheck_guard = "strict"\n'
    )
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    _assert_installed(result)


def test_without_install_strict_flags_the_steps(pytester: pytest.Pytester):
    _install_project(pytester)
    pytester.makeini("[pytest]\ntypecheck_guard_install = false\n")
    result = pytester.runpytest_subprocess(
        "--typecheck-guard=strict", "-s", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines_random(
        [
            "*conftest.State.__init__ was typechecked by jaxtyping with beartype*",
            "*test_steps.Local.__init__ was typechecked by jaxtyping with beartype*",
        ]
    )
    assert "install() before collection" not in _ran(result)


def test_install_ini_bad_value_is_a_usage_error(pytester: pytest.Pytester):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    pytester.makeini("[pytest]\ntypecheck_guard_install = sometimes\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*typecheck_guard_install in *tox.ini*: *'sometimes'*. The option is a boolean: "
            "write `typecheck_guard_install = true` (or false)*"
        ]
    )
    assert not typecheck_guard.installed()


def test_install_option_in_process_leaves_an_enclosing_install(
    pytester: pytest.Pytester, installed: None
):
    # An inner session does not undo an install() it did not make.
    pytester.makepyfile(
        test_inner="""
        import typecheck_guard

        def test_installed():
            assert typecheck_guard.installed()
        """
    )
    result = pytester.runpytest("--typecheck-guard-install", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert typecheck_guard.installed()


def test_install_option_in_process_is_undone(pytester: pytest.Pytester):
    pytester.makepyfile(
        test_inner="""
        import typecheck_guard

        def test_installed():
            assert typecheck_guard.installed()
        """
    )
    assert not typecheck_guard.installed()
    with warnings.catch_warnings():
        # This process may have registered the classes of earlier tests.
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        result = pytester.runpytest(
            "--typecheck-guard-install", "-p", "no:cacheprovider"
        )
    result.assert_outcomes(passed=1)
    assert not typecheck_guard.installed()


def test_install_option_reports_classes_registered_before_it(pytester: pytest.Pytester):
    # A plugin that imports the user's classes runs before our hook: install() is
    # too late for them, and says so in the warnings summary.
    pytester.makepyfile(
        early_plugin="""
        from beartype import beartype
        from flax import struct
        from jaxtyping import Array, Float, jaxtyped

        @jaxtyped(typechecker=beartype)
        @struct.dataclass
        class Early:
            x: Float[Array, " n"]
        """,
        test_nothing="def test_nothing():\n    pass\n",
    )
    result = pytester.runpytest_subprocess(
        "-p", "early_plugin", "--typecheck-guard-install", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*UnadaptedClassesWarning: typecheck_guard.install(): 1 pytree class(es) "
            "registered before install() *: Early.*"
        ]
    )


# A typechecked function inside a host callback: it runs on every call, by design.
CALLBACKS = """
import jax
import jax.numpy as jnp
from beartype import beartype
from jaxtyping import ArrayLike, Float, jaxtyped


@jaxtyped(typechecker=beartype)
def progress(x: Float[ArrayLike, ""]) -> None:
    pass


@jax.jit
def step(x):
    jax.debug.callback(progress, x)
    return x + 1


def test_callback():
    x = jnp.zeros(())
    for _ in range(3):
        x = step(x)
    jax.effects_barrier()
"""


def test_callback_checks_are_counted_not_flagged_by_default(pytester):
    pytester.makepyfile(test_callbacks=CALLBACKS)
    result = pytester.runpytest("--typecheck-guard=strict", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "typecheck-guard: 3 allowed checks at 1 site (1 in host callbacks, 0 in "
            "tests marked allow_runtime_typechecks), * ms; -v lists them.",
            # Nothing reads like a failure when every check was allowed.
            "typecheck-guard: nothing flagged (--typecheck-guard=strict): every "
            "typecheck at dispatch time was allowed.",
        ]
    )
    result = pytester.runpytest(
        "--typecheck-guard=strict", "-p", "no:cacheprovider", "-v"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "      3 * ms  test_callbacks.progress (jaxtyping with beartype) in "
            "jax.debug.callback(test_callbacks.progress) at test_callbacks.py:*; "
            "1 test*; host callback, allowed"
        ]
    )


def test_callback_checks_fail_under_callbacks_strict(pytester):
    pytester.makepyfile(test_callbacks=CALLBACKS)
    result = pytester.runpytest(
        "--typecheck-guard=strict",
        "--typecheck-guard-callbacks=strict",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "typecheck-guard: strict, host callbacks: strict",
            "- test_callbacks.progress was typechecked by jaxtyping with beartype "
            "inside a host callback, jax.debug.callback(test_callbacks.progress) "
            "(defined at test_callbacks.py:*), so it runs each time JAX calls the "
            "callback (3 checks*",
            "(--typecheck-guard-callbacks=strict)",
        ]
    )
    assert "flatten or unflatten" not in _ran(result)


def test_callback_checks_warn_under_the_ini_value(pytester):
    pytester.makepyfile(test_callbacks=CALLBACKS)
    pytester.makeini(
        "[pytest]\ntypecheck_guard = strict\ntypecheck_guard_callbacks = warn\n"
        "filterwarnings = error\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*inside a host callback*",
            "(--typecheck-guard-callbacks=warn: reported here; no test fails for it)",
        ]
    )

    pytester.makeini(
        "[pytest]\ntypecheck_guard = strict\ntypecheck_guard_callbacks = sometimes\n"
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*typecheck_guard_callbacks = 'sometimes' in *tox.ini*'allow'*'warn'*'strict'*"
        ]
    )
