# Known family 4: a guarded class defined in __main__ cloudpickled by value.
# MODES: install
import common
from common import show, cbeartype
import dataclasses, jax, jax.numpy as jnp, cloudpickle, pickle
from jaxtyping import Array, Float, jaxtyped


from beartype import beartype


@jax.tree_util.register_pytree_node_class
class P:
    @beartype
    def __init__(self, x: Float[Array, "n"]):
        self.x = x

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


def main():
    show("cloudpickle class before", lambda: len(cloudpickle.dumps(P)) > 0, count=False)
    jax.tree.map(lambda v: v, P(jnp.ones(2)))
    show("cloudpickle class after", lambda: pickle.loads(cloudpickle.dumps(P)).__name__, count=False)
    show("cloudpickle instance after", lambda: pickle.loads(cloudpickle.dumps(P(jnp.ones(2)))).x.tolist(), count=False)
    show("roundtrip class construct", lambda: pickle.loads(cloudpickle.dumps(P))(jnp.ones(2)).x.tolist())
    show("roundtrip class bad", lambda: pickle.loads(cloudpickle.dumps(P))(jnp.ones((2, 2))))

common.main(main)
