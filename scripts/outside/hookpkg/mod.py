import jax
from jaxtyping import Array, Float


@jax.tree_util.register_pytree_node_class
class Q:
    def __init__(self, x: Float[Array, "n"]):
        self.x = x

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)


@jax.jit
def step(q):
    return Q(q.x + 1)
