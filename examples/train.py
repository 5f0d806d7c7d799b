"""A small training loop with a typechecked train state, as many JAX projects write
it: the example of "Why is my training slower with typechecking?".

    typecheck-guard profile train.py            # where the typecheck time goes
    typecheck-guard profile --install train.py  # what remains with install()
    typecheck-guard run train.py                # train with install() in effect
"""

import argparse

import jax
import jax.numpy as jnp
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped


@jaxtyped(typechecker=beartype)
@struct.dataclass
class TrainState:
    params: PyTree[Float[Array, "..."]]
    momentum: PyTree[Float[Array, "..."]]
    step: Float[Array, ""]


def init(key: Array, width: int, depth: int) -> TrainState:
    params = {}
    for i, k in enumerate(jax.random.split(key, depth)):
        params[f"layer{i}"] = {
            "w": jax.random.normal(k, (width, width)) / jnp.sqrt(width),
            "b": jnp.zeros(width),
        }
    momentum = jax.tree.map(jnp.zeros_like, params)
    return TrainState(params, momentum, jnp.zeros(()))


def loss_fn(params: dict, x: Array, y: Array) -> Array:
    for layer in params.values():
        x = jnp.tanh(x @ layer["w"] + layer["b"])
    return jnp.mean((x - y) ** 2)


@jax.jit
def train_step(state: TrainState, x: Array, y: Array) -> TrainState:
    grads = jax.grad(loss_fn)(state.params, x, y)
    momentum = jax.tree.map(lambda m, g: 0.9 * m + g, state.momentum, grads)
    params = jax.tree.map(lambda p, m: p - 1e-2 * m, state.params, momentum)
    return state.replace(params=params, momentum=momentum, step=state.step + 1)


@jaxtyped(typechecker=beartype)
def param_norm(params: PyTree[Float[Array, "..."]]) -> Float[Array, ""]:
    return jnp.sqrt(sum(jnp.sum(p**2) for p in jax.tree.leaves(params)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--depth", type=int, default=16)
    args = parser.parse_args()

    key_init, key_x, key_y = jax.random.split(jax.random.key(0), 3)
    state = init(key_init, args.width, args.depth)
    x = jax.random.normal(key_x, (64, args.width))
    y = jax.random.normal(key_y, (64, args.width))
    for i in range(args.steps):
        state = train_step(state, x, y)
        if i % 100 == 0:
            print(f"step {i}: |params| = {float(param_norm(state.params)):.3f}")
            # A copy of the state for evaluation, off the device's buffers.
            snapshot = jax.tree.map(jnp.copy, state)
    del snapshot
    print(f"done: {int(state.step)} steps")


if __name__ == "__main__":
    main()
