"""Classes typechecked by import hooks: jaxtyping's `install_import_hook` and
`beartype.claw`. Their checks are not written in the code, but install() and
unflatten_safe must treat them like any other."""

import importlib
import sys
import textwrap
import uuid
import warnings

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import install_import_hook

import typecheck_guard
from helpers import count_beartype_calls, counted_beartype, requires, run_cached

SOURCE = textwrap.dedent(
    """
    import jax
    from flax import struct
    from jaxtyping import Array, Float

    @struct.dataclass
    class State:
        x: Float[Array, " n"]
        y: Float[Array, " n"]

    @jax.jit
    def step(s):
        return s.replace(x=s.x + 1)
    """
)


def _import(tmp_path, monkeypatch):
    name = f"hooked_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def _loop(step, state):
    for _ in range(10):
        state = step(state)
    jax.block_until_ready(state)


# Without install(), the unguarded loop checks on every call, on purpose.
@pytest.mark.parametrize(
    "with_install",
    [pytest.param(False, marks=pytest.mark.allow_runtime_typechecks), True],
)
def test_jaxtyping_import_hook(tmp_path, monkeypatch, request, with_install):
    if with_install:
        request.getfixturevalue("installed")
    name = _import(tmp_path, monkeypatch)
    with install_import_hook(name, "helpers.counted_beartype"):
        mod = importlib.import_module(name)
    try:
        state = mod.step(mod.State(jnp.ones(3), jnp.ones(3)))
        with pytest.raises(Exception, match="Type-check error"):
            mod.State(jnp.ones(3), jnp.ones(4))
        # The checker calls per construction: jaxtyping 0.3 checks `__init__`'s
        # arguments, older releases the fields after it, with different counts.
        counted_beartype.calls = 0
        mod.State(jnp.ones(3), jnp.ones(3))
        per_construction = counted_beartype.calls
        assert per_construction > 0
        counted_beartype.calls = 0
        if with_install:
            run_cached(mod.step, state, 20)
        else:
            run_cached(typecheck_guard.unflatten_safe(mod.step), state, 20)
        assert counted_beartype.calls == 0
        run_cached(mod.step, state, 3)
        # 4 calls, each unflattening one State.
        assert counted_beartype.calls == (0 if with_install else 4 * per_construction)
    finally:
        sys.modules.pop(name, None)


# Without install(), the unguarded loop checks on every call, on purpose.
@pytest.mark.parametrize(
    "with_install",
    [pytest.param(False, marks=pytest.mark.allow_runtime_typechecks), True],
)
def test_beartype_claw(tmp_path, monkeypatch, request, with_install):
    from beartype.claw import beartype_package
    from beartype.roar import BeartypeException

    if with_install:
        request.getfixturevalue("installed")
    name = _import(tmp_path, monkeypatch)
    beartype_package(name)
    mod = importlib.import_module(name)
    try:
        state = mod.step(mod.State(jnp.ones(3), jnp.ones(3)))
        with pytest.raises(BeartypeException):
            mod.State(jnp.ones(3), jnp.ones((3, 3)))
        assert count_beartype_calls(_loop, mod.step, state) == (
            0 if with_install else 10
        )
        guarded = typecheck_guard.unflatten_safe(mod.step)
        guarded(state)
        assert count_beartype_calls(_loop, guarded, state) == 0
    finally:
        sys.modules.pop(name, None)


# The order of `install()` and jaxtyping's import hook. What matters is that
# `install()` runs before the hooked package is imported (when its classes are
# registered); whether the hook is set up before or after `install()` does not.
def test_import_hook_set_up_before_install(tmp_path, monkeypatch):
    name = _import(tmp_path, monkeypatch)
    with install_import_hook(name, "helpers.counted_beartype"):
        with warnings.catch_warnings():
            # The classes of earlier tests are still registered.
            warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
            typecheck_guard.install()  # after the hook, before the import
        mod = importlib.import_module(name)
    try:
        state = mod.step(mod.State(jnp.ones(3), jnp.ones(3)))
        counted_beartype.calls = 0
        with pytest.raises(Exception, match="Type-check error"):
            mod.State(jnp.ones(3), jnp.ones(4))
        assert counted_beartype.calls >= 1
        counted_beartype.calls = 0
        run_cached(mod.step, state, 20)
        assert counted_beartype.calls == 0
    finally:
        sys.modules.pop(name, None)


@pytest.mark.allow_runtime_typechecks  # the late install() leaves the checks running
def test_hooked_package_imported_before_install(tmp_path, monkeypatch):
    name = _import(tmp_path, monkeypatch)
    with install_import_hook(name, "helpers.counted_beartype"):
        mod = importlib.import_module(name)
    try:
        with pytest.warns(
            typecheck_guard.UnadaptedClassesWarning, match="registered before install"
        ):
            typecheck_guard.install()
        assert mod.State in {r.cls for r in typecheck_guard.unadapted()}
        state = mod.step(mod.State(jnp.ones(3), jnp.ones(3)))
        counted_beartype.calls = 0
        run_cached(mod.step, state, 4)
        assert counted_beartype.calls >= 5  # on every call
        # The fix for classes registered before install(): unflatten_safe.
        guarded = typecheck_guard.unflatten_safe(mod.step)
        guarded(state)
        counted_beartype.calls = 0
        run_cached(guarded, state, 20)
        assert counted_beartype.calls == 0
    finally:
        sys.modules.pop(name, None)


# jaxtyping's pytest option `--jaxtyping-packages`, with ours. Both plugins act in
# `pytest_load_initial_conftests`, ours first: install(), then the import hook, then
# the conftest (which imports the hooked package).
HOOKED_PACKAGE = SOURCE

HOOKED_CONFTEST = """
import jax.numpy as jnp
import pytest

import mypkg


@pytest.fixture
def state():
    return mypkg.State(jnp.ones(3), jnp.ones(3))
"""

HOOKED_TESTS = """
import jax
import jax.numpy as jnp
import pytest

import mypkg
import typecheck_guard


def _steps(step, state):
    for _ in range(5):
        state = step(state)
    jax.block_until_ready(state)


def test_checked():
    # The import hook decorated mypkg.State: constructions are checked.
    with pytest.raises(Exception, match="Type-check error"):
        mypkg.State(jnp.ones(3), jnp.ones(4))


def test_step(state):
    _steps(mypkg.step, state)


def test_step_unflatten_safe(state):
    _steps(typecheck_guard.unflatten_safe(mypkg.step), state)
"""


def _hooked_project(pytester: pytest.Pytester) -> None:
    pytester.mkpydir("mypkg").joinpath("__init__.py").write_text(HOOKED_PACKAGE)
    pytester.makeconftest(HOOKED_CONFTEST)
    pytester.makepyfile(test_hooked=HOOKED_TESTS)


@requires(
    "jaxtyping",
    "0.3.0",
    "with older jaxtyping the option fails: 'jaxtyping cannot check these packages "
    "because they are already imported'",
)
def test_jaxtyping_packages_option_with_install_option(pytester: pytest.Pytester):
    _hooked_project(pytester)
    result = pytester.runpytest_subprocess(
        "--jaxtyping-packages=mypkg,beartype.beartype",
        "--typecheck-guard-install",
        "--typecheck-guard=strict",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["typecheck-guard: no typecheck ran in a jitted call outside tracing*"]
    )


@requires(
    "jaxtyping",
    "0.3.0",
    "with older jaxtyping the option fails: 'jaxtyping cannot check these packages "
    "because they are already imported'",
)
def test_jaxtyping_packages_option_without_install(pytester: pytest.Pytester):
    # The hooked classes keep JAX's registration: every step is flagged, unless
    # the step is wrapped in unflatten_safe.
    _hooked_project(pytester)
    result = pytester.runpytest_subprocess(
        "--jaxtyping-packages=mypkg,beartype.beartype",
        "--typecheck-guard=strict",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*mypkg.State.__init__ was typechecked by jaxtyping with beartype*",
            "FAILED test_hooked.py::test_step - typecheck_guard.RuntimeTypecheckError*",
        ]
    )


# A library's own code, checked because the import hook instruments all of it: a
# pytree node whose flatten function JAX calls on every call of a jitted function.
LIBRARY = """
import jax


@jax.tree_util.register_pytree_node_class
class Box:
    def __init__(self, x):
        self.x = x

    def tree_flatten(self) -> tuple:
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        obj = object.__new__(cls)
        obj.x = children[0]
        return obj
"""

LIBRARY_TESTS = """
import jax
import jax.numpy as jnp

import mylib


def test_box():
    step = jax.jit(lambda b: b)
    box = mylib.Box(jnp.ones(2))
    for _ in range(3):
        box = step(box)
"""


@requires(
    "jaxtyping",
    "0.3.0",
    "with older jaxtyping the option fails: 'jaxtyping cannot check these packages "
    "because they are already imported'",
)
def test_checks_the_import_hook_added_to_a_library_say_so(pytester: pytest.Pytester):
    pytester.mkpydir("mylib").joinpath("__init__.py").write_text(LIBRARY)
    pytester.makepyfile(test_library=LIBRARY_TESTS)
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    result = pytester.runpytest_subprocess(
        "--jaxtyping-packages=mylib,beartype.beartype",
        "--typecheck-guard=warn",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*mylib.Box.tree_flatten (jaxtyping with beartype) in "
            "jax.jit(test_library.test_box.<locals>.<lambda>) at test_library.py:*",
            # Its flatten and unflatten functions, on each of the 3 calls.
            "typecheck_guard: 6 checks of mylib's own code ran at dispatch time, at "
            "2 sites in 1 test (the most time: *).",
            "They are checked because jaxtyping's import hook instruments every "
            "function of mylib (pytest --jaxtyping-packages=mylib,..., or "
            "install_import_hook)*narrow --jaxtyping-packages to the modules you "
            "want checked.",
        ]
    )


# A package of custom nodes under jaxtyping's import hook: the hook checks every
# function, the node's own `tree_flatten` and `tree_unflatten` included, which JAX's
# registry calls on every dispatch and rebuild. With `install()` those belong to the
# rebuild, as the constructor's check does; what `__post_init__`'s body calls is the
# body's, checked as without us.
NODES = textwrap.dedent(
    """
    import dataclasses
    import jax
    from jaxtyping import Array, Float

    @jax.tree_util.register_pytree_node_class
    class Node:
        def __init__(self, x: Float[Array, " n"], y: Float[Array, " n"]):
            self.x = x
            self.y = y

        def tree_flatten(self) -> tuple[tuple[Float[Array, " n"], ...], None]:
            return (self.x, self.y), None

        @classmethod
        def tree_unflatten(cls, aux: None, children: tuple) -> "Node":
            return cls(*children)

    def _size(x: Float[Array, " n"]) -> int:
        return x.shape[0]

    @dataclasses.dataclass
    class Dataset:
        x: Float[Array, " n"]
        y: Float[Array, " n"]

        def __post_init__(self) -> None:
            if hasattr(self.x, "shape"):
                self.n = _size(self.x)

    jax.tree_util.register_pytree_node(
        Dataset,
        lambda d: ((d.x, d.y), None),
        lambda aux, children: Dataset(*children),
    )

    @jax.jit
    def step(node):
        return Node(node.x + 1, node.y)

    @jax.jit
    def step_dataset(d):
        return Dataset(d.x + 1, d.y)
    """
)


# The helper that `__post_init__` calls checks at dispatch, with or without us.
@pytest.mark.allow_runtime_typechecks
@pytest.mark.parametrize("with_install", [False, True])
def test_an_import_hooked_nodes_own_flatten_and_unflatten(
    tmp_path, monkeypatch, request, with_install
):
    if with_install:
        request.getfixturevalue("installed")
    name = f"hooked_nodes_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(NODES)
    monkeypatch.syspath_prepend(str(tmp_path))
    with install_import_hook(name, "helpers.counted_beartype"):
        mod = importlib.import_module(name)
    try:
        node = mod.step(mod.Node(jnp.ones(3), jnp.ones(3)))
        data = mod.step_dataset(mod.Dataset(jnp.ones(3), jnp.ones(3)))
        with pytest.raises(Exception, match="Type-check error"):
            mod.Node(jnp.ones(3), jnp.ones((3, 3)))
        with pytest.raises(Exception, match="Type-check error"):
            mod.Node.tree_unflatten(None, (jnp.ones(3), "not an array"))
        counted_beartype.calls = 0
        mod._size(jnp.ones(3))
        per_helper = counted_beartype.calls
        counted_beartype.calls = 0
        run_cached(mod.step, node, 10)
        # Without install(): per call, the input's flatten and the output's
        # unflatten and constructor; with it, none.
        if with_install:
            assert counted_beartype.calls == 0
        else:
            assert counted_beartype.calls >= 30
        counted_beartype.calls = 0
        run_cached(mod.step_dataset, data, 10)
        # The helper that `__post_init__` calls stays checked, once per rebuild:
        # the body runs, as without us, and what it calls is checked.
        if with_install:
            assert counted_beartype.calls == 11 * per_helper  # run_cached: 1 + 10
        else:
            assert counted_beartype.calls > 11 * per_helper
    finally:
        sys.modules.pop(name, None)
