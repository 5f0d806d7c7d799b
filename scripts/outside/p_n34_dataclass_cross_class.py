# New (treedef family): two register_dataclass classes with the same fields: plain JAX's
# dataclass node treats their treedefs as equal; with install() they are custom nodes and differ.
# Visible in tree.map over both, PyTree[..., "T"] structure checks, flatten_up_to.
# MODES: install
import common
from common import show
import dataclasses, jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, PyTree, jaxtyped


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class A:
    x: jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class B:
    x: jax.Array


@jaxtyped(typechecker=beartype)
def same(t: PyTree[Float[Array, "n"], "T"], u: PyTree[Float[Array, "n"], "T"]):
    return "ok"


def main():
    x = jnp.ones(2)
    show("treedef eq", lambda: jax.tree.structure(A(x)) == jax.tree.structure(B(x)), count=False)
    show("tree.map(A, B)", lambda: jax.tree.map(lambda a, b: a + b, A(x), B(x)), count=False)
    show("flatten_up_to", lambda: jax.tree.structure(A(0)).flatten_up_to(B(x)), count=False)
    show("PyTree T", lambda: same(A(x), B(x)), count=False)
    show("tree.map list", lambda: jax.tree.map(lambda a, b: a, [A(x)], [B(x)]), count=False)

common.main(main)
