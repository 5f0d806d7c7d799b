"""Adapters: one module per library whose pytree registration `install()` patches.

Each exposes `patch(stack: contextlib.ExitStack) -> None`, which checks the library's
version and the shape of what it is about to patch, patches it, and pushes the undo
onto `stack`. Flax needs no adapter of its own: `flax.struct.dataclass` (and so
`PyTreeNode` and `TrainState`) registers through `jax.tree_util.register_dataclass`,
looked up at call time, which the JAX adapter patches.
"""
