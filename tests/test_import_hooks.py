"""Classes typechecked by import hooks: jaxtyping's `install_import_hook` and
`beartype.claw`. Their checks are not written in the code, but install() and
unflatten_safe must treat them like any other."""

import importlib
import sys
import textwrap
import uuid

import jax
import jax.numpy as jnp
import pytest
from jaxtyping import install_import_hook

import typecheck_guard
from helpers import count_beartype_calls, counted_beartype, run_cached

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
