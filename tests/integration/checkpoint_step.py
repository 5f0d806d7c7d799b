"""Save or restore an orbax checkpoint of a typechecked flax.struct train state, with
or without the plugin, for `test_serialization.py`, which runs each step in its own
interpreter so that "without the plugin" means it was never installed:

    python tests/checkpoint_step.py save|restore on|off DIRECTORY [SOURCE]

`save` trains a few jitted steps and writes `DIRECTORY/ckpt` (orbax) and
`DIRECTORY/state.msgpack` (flax.serialization). `restore` reads `SOURCE/ckpt` into a
freshly initialised state. Both print one JSON object describing the state.

With the plugin ("on") the classes are typechecked (beartype) and adapted by
`install()`. Without it ("off") they are the same classes, registered by JAX, with
no checker: orbax (0.12.8) builds trees with `None` leaves through `tree_map`
while it saves and restores, which a typechecked constructor rejects, so a
typechecked flax.struct can't be checkpointed by orbax without the plugin at all.
"""

import functools as ft
import hashlib
import json
import pathlib
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from flax import serialization, struct
from jaxtyping import Array, Float, Int, PyTree, jaxtyped


def define(typecheck):
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
        name: str = struct.field(pytree_node=False, default="run")

    return Params, State


def initial(Params, State, scale):
    w = jnp.arange(12, dtype=jnp.float32).reshape(4, 3) * scale
    params = Params(w, jnp.full(3, scale, dtype=jnp.float32))
    return State(params, {"w": w * 0, "b": params.b * 0}, jnp.zeros((), jnp.int32))


@jax.jit
def step(state):
    grads = jax.tree.map(lambda p: jnp.sin(p) * 0.1, state.params)
    momentum = {
        "w": 0.9 * state.momentum["w"] + grads.w,
        "b": 0.9 * state.momentum["b"] + grads.b,
    }
    params = state.params.replace(
        w=state.params.w - momentum["w"], b=state.params.b - momentum["b"]
    )
    return state.replace(params=params, momentum=momentum, step=state.step + 1)


def describe(state, checks):
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]:
        a = np.asarray(leaf)
        h.update(jax.tree_util.keystr(path).encode())
        h.update(str((a.dtype, a.shape)).encode())
        h.update(a.tobytes())
    return {
        "digest": h.hexdigest(),
        "step": int(state.step),
        "type": type(state).__name__,
        "params_type": type(state.params).__name__,
        "name": state.name,
        "checks": checks,
    }


def main():
    action, plugin, directory = sys.argv[1:4]
    directory = pathlib.Path(directory)
    from beartype import beartype

    calls = 0

    def typecheck(fn):
        checked = beartype(fn)

        def counted(*args, **kwargs):
            nonlocal calls
            calls += 1
            return checked(*args, **kwargs)

        return counted

    if plugin == "off":
        # No checker without the plugin (see the module docstring).
        typecheck = ft.partial(lambda fn: fn)

    if plugin == "on":
        import typecheck_guard

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
            typecheck_guard.install()
    Params, State = define(typecheck)
    if plugin == "on":
        assert (
            typecheck_guard._adapt._register.adapted_how(State)
            == "flax.struct.dataclass"
        )
    checkpointer = ocp.StandardCheckpointer()
    if action == "save":
        state = initial(Params, State, 0.5)
        for _ in range(3):
            state = step(state)
        state = jax.block_until_ready(state)
        calls = 0
        checkpointer.save(directory / "ckpt", state)
        checkpointer.wait_until_finished()
        (directory / "state.msgpack").write_bytes(serialization.to_bytes(state))
        out = describe(state, calls)
    else:
        source = pathlib.Path(sys.argv[4])
        target = initial(Params, State, 0.0)
        calls = 0
        restored = checkpointer.restore(source / "ckpt", target)
        restore_checks, calls = calls, 0
        # `serialization.from_bytes` restores numpy arrays, which `Float[Array, ...]`
        # rightly rejects: a restore is a construction (`.replace`), and is checked.
        raw = serialization.msgpack_restore((source / "state.msgpack").read_bytes())
        from_bytes = serialization.from_state_dict(
            target, jax.tree.map(jnp.asarray, raw)
        )
        out = describe(restored, restore_checks)
        out["msgpack"] = describe(from_bytes, None)["digest"]
        out["from_state_dict_checks"] = calls
        # The restored state is a working state: it steps, and is checked as usual.
        out["stepped"] = int(step(restored).step)
    checkpointer.close()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
