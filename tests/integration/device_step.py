"""A data-parallel train step on 8 (fake, CPU) devices, run by `test_devices.py` in a
subprocess because the device count is fixed when JAX starts:

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/device_step.py

The state is that of jaxtyping's issue #213: a nested, typechecked `flax.struct`
dataclass with metadata fields, donated to a jitted step whose batch is sharded
over a "data" axis. Every way of running it (no plugin, `install()`, `unflatten_safe(step)`,
`with unflatten_safe():`) runs under `jax.jit` with `NamedSharding`s and under
`shard_map`, once per checker. Prints one JSON object: per run, the checks counted
per cache-hit call, a digest of the final state's bytes, whether the output
shardings are the input ones, and whether the donated inputs were consumed.
"""

# No `from __future__ import annotations`: `State.params` refers to `Params`, a class
# local to `make_classes`, which a string annotation could not be resolved to.
import functools as ft
import hashlib
import json
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxtyping import Array, Float, Int, PyTree, jaxtyped

import typecheck_guard

CALLS = 6  # cache-hit calls counted per run


class Counter:
    def __init__(self, decorate):
        self.decorate = decorate
        self.calls = 0

    def __call__(self, fn):
        checked = self.decorate(fn)

        @ft.wraps(checked)
        def counted(*args, **kwargs):
            self.calls += 1
            return checked(*args, **kwargs)

        return counted


def checker(name):
    if name == "beartype":
        from beartype import beartype

        return Counter(beartype)
    from typeguard import typechecked

    return Counter(typechecked)


def make_classes(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Params:
        w: Float[Array, "d h"]
        b: Float[Array, " h"]

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class State:
        params: Params
        momentum: PyTree[Float[Array, "..."]]
        step: Int[Array, ""]
        # Metadata, as in jaxtyping's issue #213: in the treedef, never on a device.
        names: tuple = struct.field(pytree_node=False, default=("w", "b"))
        lr: float = struct.field(pytree_node=False, default=0.05)

    return Params, State


def loss(params, x, y):
    return jnp.mean((jnp.tanh(x @ params.w + params.b).sum(-1) - y) ** 2)


def update(state, grads):
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, state.momentum, grads)
    params = jax.tree.map(lambda p, m: p - state.lr * m, state.params, momentum)
    return state.replace(params=params, momentum=momentum, step=state.step + 1)


def _jax_version():
    return tuple(int(p) for p in jax.__version__.split(".")[:2])


# Before jax 0.8, `jit` broadcast `in_shardings`/`out_shardings` prefixes over the
# arguments' pytree by building it with placeholder leaves through its constructor
# (`api_util.flatten_axes`), which a typechecked class rejects, with or without us.
# There, the step takes its shardings from its committed inputs instead.
EXPLICIT_SHARDINGS = _jax_version() >= (0, 8)


def jit_step(mesh):
    replicated = NamedSharding(mesh, P())
    batch = NamedSharding(mesh, P("data"))

    def step(state, x, y):
        # XLA inserts the all-reduce of the gradient over the data axis.
        return update(state, jax.grad(loss)(state.params, x, y))

    if not EXPLICIT_SHARDINGS:
        return jax.jit(step, donate_argnums=0)
    return jax.jit(
        step,
        in_shardings=(replicated, batch, batch),
        out_shardings=replicated,
        donate_argnums=0,
    )


def shard_map_step(mesh):
    shard_map = getattr(jax, "shard_map", None)
    if shard_map is None:  # jax < 0.7
        from jax.experimental.shard_map import shard_map as experimental

        # Its replication check rejects `grad` of replicated parameters against
        # a sharded loss (fixed by the varying-axes types of jax.shard_map).
        shard_map = ft.partial(experimental, check_rep=False)

    def local(state, x, y):
        grads = jax.lax.pmean(jax.grad(loss)(state.params, x, y), "data")
        return update(state, grads)

    def mapped(f):
        return shard_map(
            f, mesh=mesh, in_specs=(P(), P("data"), P("data")), out_specs=P()
        )

    if EXPLICIT_SHARDINGS:
        return jax.jit(mapped(local), donate_argnums=0)

    # Before jax 0.8, shard_map broadcasts its specs the same way (see above), so
    # there the state crosses the shard_map boundary as its list of leaves; the
    # jitted step still takes and returns the typechecked state.
    def step(state, x, y):
        leaves, treedef = jax.tree.flatten(state)

        def on_leaves(leaves, x, y):
            out = local(jax.tree.unflatten(treedef, leaves), x, y)
            return jax.tree.leaves(out)

        out = mapped(on_leaves)(leaves, x, y)
        return jax.tree.unflatten(treedef, out)

    return jax.jit(step, donate_argnums=0)


def initial(Params, State, mesh):
    replicated = NamedSharding(mesh, P())
    key = jax.random.PRNGKey(0)
    params = Params(jax.random.normal(key, (4, 3)), jnp.zeros(3, dtype=jnp.float32))
    state = State(
        params, jax.tree.map(jnp.zeros_like, params), jnp.zeros((), jnp.int32)
    )
    # Not `jax.device_put(state, replicated)`: before jax 0.8, broadcasting a
    # sharding prefix over a pytree builds the tree with placeholder leaves through
    # its constructor, which a typechecked class rejects (with or without us).
    return jax.tree.map(lambda leaf: jax.device_put(leaf, replicated), state)


def batch(mesh, i):
    sharding = NamedSharding(mesh, P("data"))
    x = jnp.arange(16 * 4, dtype=jnp.float32).reshape(16, 4) / (50.0 + i)
    y = jnp.linspace(-1.0, 1.0, 16, dtype=jnp.float32) * (i % 3)
    return jax.device_put(x, sharding), jax.device_put(y, sharding)


def digest(state):
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(state):
        a = np.asarray(leaf)
        h.update(str((a.dtype, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def run(Params, State, typecheck, mesh, kind, how):
    step = jit_step(mesh) if kind == "jit" else shard_map_step(mesh)
    if how == "guarded-call":
        step = typecheck_guard.unflatten_safe(step)
    state = initial(Params, State, mesh)
    expected = [leaf.sharding for leaf in jax.tree.leaves(state)]
    block = typecheck_guard.unflatten_safe() if how == "with-block" else None
    donated = True
    if block is not None:
        block.__enter__()
    try:
        # Two warm-up calls: the trace, and the first cache hit (the `with` form
        # checks each new signature once).
        for i in range(2):
            state = step(state, *batch(mesh, i))
        typecheck.calls = 0
        for i in range(2, 2 + CALLS):
            before = jax.tree.leaves(state)
            state = step(state, *batch(mesh, i))
            donated = donated and all(leaf.is_deleted() for leaf in before)
        state = jax.block_until_ready(state)
        checks = typecheck.calls
    finally:
        if block is not None:
            block.__exit__(None, None, None)
    got = [leaf.sharding for leaf in jax.tree.leaves(state)]
    return {
        "checks": checks,
        "digest": digest(state),
        "shardings_preserved": all(
            g.is_equivalent_to(e, np.ndim(leaf))
            for g, e, leaf in zip(got, expected, jax.tree.leaves(state), strict=True)
        ),
        "sharding_kind": sorted({type(g).__name__ for g in got}),
        "donated": donated,
        "step": int(state.step),
        "type": type(state).__name__,
        "params_type": type(state.params).__name__,
    }


def main():
    assert jax.device_count() == 8, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("data",))
    out = {"devices": jax.device_count(), "explicit_shardings": EXPLICIT_SHARDINGS}
    kinds = ("jit", "shard_map")
    for name in ("beartype", "typeguard"):
        typecheck = checker(name)
        # Classes defined before install(): JAX's own registration.
        Plain = make_classes(typecheck)
        for kind in kinds:
            for how in ("plain", "guarded-call", "with-block"):
                out[f"{name}/{kind}/{how}"] = run(*Plain, typecheck, mesh, kind, how)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
            typecheck_guard.install()
        try:
            Adapted = make_classes(typecheck)
            assert typecheck_guard._adapt._register.adapted_how(Adapted[1]) is not None
            for kind in kinds:
                out[f"{name}/{kind}/install"] = run(
                    *Adapted, typecheck, mesh, kind, "install"
                )
            # An adapted class unflattens without its constructor, so broadcasting a
            # sharding prefix over it works on every jax (see EXPLICIT_SHARDINGS).
            state = initial(*Adapted, mesh)
            typecheck.calls = 0
            put = jax.device_put(state, NamedSharding(mesh, P()))
            out[f"{name}/install/device_put_prefix"] = {
                "checks": typecheck.calls,
                "digest_equal": digest(put) == digest(state),
            }
        finally:
            typecheck_guard.uninstall()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
