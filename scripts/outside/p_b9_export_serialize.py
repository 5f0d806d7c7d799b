# Family B9 (treedef kind, jax.export): a flax.struct / register_dataclass class whose check
# passes on JAX's placeholders, exported with jax.export and serialized.  Plain: the class is a
# dataclass node, which jax.export serializes; with install() it becomes a custom node.
# Claim attacked: "same treedefs ... jax.export.register_pytree_node_serialization works as before";
# docs say a treedef holding such a node compares unequal, but not that export.serialize breaks.
# MODES: install
import common
from common import show
import dataclasses
import jax, jax.numpy as jnp
from jax import export
from beartype import beartype
from jaxtyping import jaxtyped
from flax import struct


@jaxtyped(typechecker=beartype)
@struct.dataclass
class S:  # checked, but accepts placeholders
    x: object


@jaxtyped(typechecker=beartype)
@dataclasses.dataclass
class R:
    x: object


jax.tree_util.register_dataclass(R, data_fields=["x"], meta_fields=[])


@struct.dataclass
class U:  # no check at all
    x: object


def main():
    for C in (S, R, U):
        n = C.__name__
        E = {}
        show(n + " export", lambda: str(E.setdefault("e", export.export(jax.jit(lambda q: C(q.x * 7)))(C(jnp.ones(2)))).out_tree), count=False)
        if "e" not in E:
            continue
        show(n + " register serialization", lambda: export.register_pytree_node_serialization(
            C, serialized_name="m." + n, serialize_auxdata=lambda a: b"", deserialize_auxdata=lambda b: ()) is C, count=False)
        B = {}
        show(n + " serialize", lambda: len(B.setdefault("b", E["e"].serialize())) > 0, count=False)
        if "b" in B:
            show(n + " deserialize call", lambda: export.deserialize(B["b"]).call(C(jnp.ones(2))), count=False)
        show(n + " call", lambda: E["e"].call(C(jnp.ones(2))), count=False)


common.main(main)
