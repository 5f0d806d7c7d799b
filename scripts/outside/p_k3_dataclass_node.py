# Known family 3: generated dataclass flatten/unflatten vs JAX's dataclass node.
# MODES: install
import common
from common import show, out
import dataclasses, jax, jax.numpy as jnp
from flax import struct

CALLS = []


@dataclasses.dataclass
class D:
    a: jax.Array
    m: int
    b: jax.Array

    def __post_init__(self):  # does work: marked cls(**fields) route
        CALLS.append("post")


jax.tree_util.register_dataclass(D, data_fields=["a", "b"], meta_fields=["m"])


@dataclasses.dataclass
class E:
    a: jax.Array
    m: int
    b: jax.Array


jax.tree_util.register_dataclass(E, data_fields=["a", "b"], meta_fields=["m"])


class KwLog(type):
    def __call__(cls, *a, **k):
        CALLS.append(("kwargs order", list(k)))
        return super().__call__(*a, **k)


@dataclasses.dataclass
class G(metaclass=KwLog):
    a: jax.Array
    m: int
    b: jax.Array


jax.tree_util.register_dataclass(G, data_fields=["a", "b"], meta_fields=["m"])


@struct.dataclass
class F:
    b: jax.Array
    a: jax.Array
    s: str = struct.field(pytree_node=False, default="s")


def main():
    for name, obj in [("D", D(jnp.ones(1), 3, jnp.zeros(1))), ("E", E(jnp.ones(1), 3, jnp.zeros(1))),
                      ("F", F(jnp.ones(1), jnp.zeros(1)))]:
        show(f"{name} flatten_one_level", lambda: (lambda r: (type(r[0]).__name__, len(r[0]), r[1]))(
            jax.tree_util.flatten_one_level(obj)), count=False)
        show(f"{name} flatten_one_level_with_keys", lambda: (lambda r: (type(r[0]).__name__, [jax.tree_util.keystr((k,)) for k, _ in r[0]], r[1]))(
            jax.tree_util.flatten_one_level_with_keys(obj)), count=False)
        show(f"{name} keypaths", lambda: [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(obj)[0]], count=False)
        show(f"{name} node_data", lambda: jax.tree_util.tree_structure(obj).node_data(), count=False)
        show(f"{name} vars order after unflatten", lambda: list(vars(jax.tree.map(lambda v: v, obj))), count=False)
        show(f"{name} treedef children", lambda: jax.tree_util.tree_structure(obj).children(), count=False)
        show(f"{name} num_nodes", lambda: jax.tree_util.tree_structure(obj).num_nodes, count=False)
    show("post calls", lambda: len([c for c in CALLS if c == "post"]), count=False)
    CALLS.clear()
    jax.tree.map(lambda v: v, G(jnp.ones(1), 3, jnp.zeros(1)))
    show("G rebuild kwargs order", lambda: [c for c in CALLS if c != "post"], count=False)

common.main(main)
