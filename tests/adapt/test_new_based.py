"""Equinox modules and Flax NNX pytrees already unflatten through `__new__`: they
must keep running zero checks per cache-hit jitted call, with or without install()."""

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jaxtyping import Array, Float, jaxtyped

from helpers import requires, run_cached


def _module(typecheck):
    @jaxtyped(typechecker=typecheck)
    class Linear(eqx.Module):
        weight: Float[Array, "o i"]
        bias: Float[Array, " o"]

    return Linear


def _nnx_pytree(typecheck):
    class Params(nnx.Pytree):
        @jaxtyped(typechecker=typecheck)
        def __init__(self, w: Float[Array, " n"]):
            self.w = nnx.data(w) if hasattr(nnx, "data") else w

    return Params


@pytest.mark.parametrize("with_install", [False, True])
@pytest.mark.parametrize("jit", ["jax.jit", "eqx.filter_jit"])
def test_equinox_module(typecheck, request, with_install, jit):
    if with_install:
        request.getfixturevalue("installed")
    Linear = _module(typecheck)
    wrap = jax.jit if jit == "jax.jit" else eqx.filter_jit

    @wrap
    def step(m):
        return Linear(m.weight * 0.5, m.bias + 1)

    m = step(Linear(jnp.ones((2, 3)), jnp.zeros(2)))
    typecheck.reset()
    m = run_cached(step, m, 20)
    assert typecheck.calls == 0
    with pytest.raises(typecheck.errors):
        Linear(jnp.ones((2, 3)), jnp.zeros(3))


@requires("flax", "0.11.1", "flax.nnx.Pytree")
@pytest.mark.parametrize("with_install", [False, True])
@pytest.mark.parametrize("jit", ["jax.jit", "nnx.jit"])
def test_nnx_pytree(typecheck, request, with_install, jit):
    if with_install:
        request.getfixturevalue("installed")
    Params = _nnx_pytree(typecheck)
    wrap = jax.jit if jit == "jax.jit" else nnx.jit

    @wrap
    def step(p):
        return Params(p.w * 0.5)

    p = step(Params(jnp.ones(3)))
    typecheck.reset()
    run_cached(step, p, 20)
    assert typecheck.calls == 0
    with pytest.raises(typecheck.errors):
        Params(jnp.ones((2, 2)))
