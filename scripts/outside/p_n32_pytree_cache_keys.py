# New: the PyTree verdict cache (on with install()) keys on the argument's treedef, so a
# PyTree[...] check now hashes and compares user aux data / dict keys, which plain jaxtyping
# never does: aux whose __eq__ raises or counts, unhashable aux, unsortable dict keys.
# MODES: install
import common
from common import show
import jax, jax.numpy as jnp, numpy as np
from beartype import beartype
from jaxtyping import Array, Float, PyTree, jaxtyped

EQ = {"n": 0}


class Aux:
    def __init__(self, v):
        self.v = v

    def __eq__(self, o):
        EQ["n"] += 1
        if isinstance(o, Aux) and o.v != self.v:
            raise RuntimeError("Aux compared with a different Aux")
        return isinstance(o, Aux) and o.v == self.v

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
def takes(t: PyTree[Float[Array, "n"]]):
    return "ok"


def main():
    x = jnp.ones(3)
    show("aux 1", lambda: takes([Node(x, Aux(1))]), count=False)
    show("aux 2 (eq raises)", lambda: takes([Node(x, Aux(2))]), count=False)
    show("aux 1 again", lambda: takes([Node(x, Aux(1))]), count=False)
    show("eq calls", lambda: EQ["n"], count=False)
    show("unhashable aux", lambda: takes([Node(x, [1, 2])]), count=False)
    show("unhashable aux again", lambda: takes([Node(x, [1, 2])]), count=False)
    show("array aux", lambda: takes([Node(x, np.ones(2))]), count=False)
    show("array aux 2", lambda: takes([Node(x, np.zeros(2))]), count=False)
    show("unsortable dict keys", lambda: takes({1: x, "a": x}), count=False)
    show("unsortable dict keys again", lambda: takes({"a": x, 1: x}), count=False)
    show("isinstance eq-raising", lambda: (isinstance([Node(x, Aux(3))], PyTree[Float[Array, "n"]]),
                                           isinstance([Node(x, Aux(4))], PyTree[Float[Array, "n"]])), count=False)
    show("bad leaf still fails", lambda: takes([Node(jnp.ones(3, jnp.int32), Aux(1))]), count=False)

common.main(main)
