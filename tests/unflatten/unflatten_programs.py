"""Programs run by `test_unflatten_differential.py` in separate processes, once plain
and once inside `typecheck_guard.unflatten_safe()`:

    python tests/unflatten_programs.py plain|block

Prints one JSON object: program name -> its outcome, `"raised"` when a typecheck
failed, else a digest of the values it returned. The constructions that must stay
checked are here next to the unflattens that must not be; the test compares the two
runs program by program.
"""

import hashlib
import json
import sys
from typing import Annotated

import jax
import jax.numpy as jnp
import numpy as np
from beartype import beartype
from beartype.roar import BeartypeException
from beartype.vale import Is
from flax import struct
from jaxtyping import Array, Float, TypeCheckError, jaxtyped

import typecheck_guard

Positive = Annotated[Float[Array, " n"], Is[lambda x: bool((x > 0).all())]]


@jaxtyped(typechecker=beartype)
@struct.dataclass
class State:
    x: Float[Array, " n"]
    y: Float[Array, " n"]


@jaxtyped(typechecker=beartype)
@struct.dataclass
class Validated:
    x: Positive  # pyright: ignore[reportInvalidTypeForm]


@jaxtyped(typechecker=beartype)
@struct.dataclass
class Keyed:
    d: dict[str, Float[Array, "3"]]


class Point:
    @jaxtyped(typechecker=beartype)
    def __init__(self, x: Float[Array, "3"]):
        self.x = x

    @classmethod
    def from_parts(cls, aux, children):
        return cls(*children)


jax.tree_util.register_pytree_node(Point, lambda p: ((p.x,), None), Point.from_parts)

good = State(jnp.ones(3), jnp.ones(3))
bad_y = jnp.ones(4)
step = jax.jit(lambda s: s.replace(x=s.x + 1))


def _host(x):
    try:
        State(x, jnp.ones(4))
    except (TypeCheckError, BeartypeException):
        return np.float32(-1.0)
    return np.float32(1.0)


PROGRAMS = {
    # Constructions: checked with or without the plugin.
    "direct": lambda: State(jnp.ones(3), bad_y),
    "traced": lambda: jax.jit(lambda: State(jnp.ones(3), bad_y))(),
    "eval_shape(lambda)": lambda: jax.eval_shape(lambda: State(jnp.ones(3), bad_y)),
    "tree.map(cls)": lambda: jax.tree.map(State, [jnp.ones(3)], [bad_y]),
    "jit(cls)": lambda: jax.jit(State)(x=jnp.ones(3), y=bad_y),
    "replace": lambda: good.replace(y=bad_y),
    "from_parts by hand": lambda: Point.from_parts(None, [jnp.ones(5)]),
    "callback": lambda: jax.jit(
        lambda x: jax.pure_callback(_host, jax.ShapeDtypeStruct((), jnp.float32), x)
    )(jnp.ones(3)),
    "validator": lambda: (Validated(jnp.ones(3)), Validated(-jnp.ones(3))),
    "dict order": lambda: (
        Keyed({"a": jnp.ones(3), "b": jnp.ones(4)}),
        Keyed({"b": jnp.ones(4), "a": jnp.ones(3)}),
    ),
    # Unflattens of good values: the same values with or without the plugin.
    "jitted steps": lambda: [step(good) for _ in range(3)][-1],
    "tree.map": lambda: jax.tree.map(lambda v: v * 2, good),
    "from_parts by JAX": lambda: jax.tree.map(lambda v: v + 1, Point(jnp.ones(3))).x,
    "grad": lambda: jax.grad(lambda s: jnp.sum(s.x * s.y))(good),
    # Placeholder trees: only these may differ (they raise without the plugin).
    "tree.map(None)": lambda: jax.tree.map(lambda _: None, good),
    "eval_shape(init)": lambda: jax.eval_shape(lambda: State(jnp.ones(3), jnp.ones(3))),
}


def digest(value):
    leaves = jax.tree.leaves(value, is_leaf=lambda v: v is None)
    h = hashlib.sha256(str(jax.tree.structure(value)).encode())
    for leaf in leaves:
        if hasattr(leaf, "shape") and not isinstance(leaf, jax.ShapeDtypeStruct):
            h.update(np.asarray(leaf).tobytes())
        else:
            h.update(repr(leaf).encode())
    return h.hexdigest()


def run_all():
    out = {}
    for name, program in PROGRAMS.items():
        try:
            value = jax.block_until_ready(program())
        except (TypeCheckError, BeartypeException):
            out[name] = "raised"
            continue
        out[name] = digest(value)
    return out


if __name__ == "__main__":
    if sys.argv[1] == "block":
        with typecheck_guard.unflatten_safe():
            result = run_all()
    else:
        result = run_all()
    json.dump(result, sys.stdout)
