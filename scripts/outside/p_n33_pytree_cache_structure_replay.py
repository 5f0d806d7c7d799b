# New: the PyTree cache (install()) replays a cached structure binding ("T") from the
# first call instead of binding the current argument's treedef; visible when aux equality
# is not transitive (a tolerance __eq__).
# MODES: install
import common
from common import show
import jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, PyTree, jaxtyped


class Tol:
    def __init__(self, v):
        self.v = v

    def __eq__(self, o):
        return isinstance(o, Tol) and abs(o.v - self.v) < 1.0

    def __hash__(self):
        return 0


@jax.tree_util.register_pytree_node_class
class Node:
    def __init__(self, x, aux):
        self.x, self.aux = x, aux

    def tree_flatten(self):
        return (self.x,), self.aux

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(ch[0], aux)


@jaxtyped(typechecker=beartype)
def same(t: PyTree[Float[Array, "n"], "T"], u: PyTree[Float[Array, "n"], "T"]):
    return "ok"


def main():
    x = jnp.ones(3)
    show("first (0.0, 0.0)", lambda: same(Node(x, Tol(0.0)), Node(x, Tol(0.0))), count=False)
    show("second (0.8, 1.6)", lambda: same(Node(x, Tol(0.8)), Node(x, Tol(1.6))), count=False)

common.main(main)
