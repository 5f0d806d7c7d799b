# Region: guarded __setattr__ / __post_init__: after JAX rebuilds an object, the rebuilt
# object's own later attribute writes (and its explicit __post_init__ call) must be checked.
# MODES: install block
import common
from common import show, Counted
import dataclasses, jax, jax.numpy as jnp, chex
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped

CA = Counted(jax.Array, "CA")


@jax.tree_util.register_pytree_node_class
class Cust:
    def __init__(self, x):
        self.x = x

    @beartype
    def __setattr__(self, name: str, value: CA) -> None:
        object.__setattr__(self, name, value)

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DC:
    x: jax.Array

    @beartype
    def __setattr__(self, name: str, value: CA) -> None:
        object.__setattr__(self, name, value)


@dataclasses.dataclass
class DCPost:
    x: jax.Array

    @jaxtyped(typechecker=beartype)
    def __post_init__(self):
        assert isinstance(self.x, CA)


jax.tree_util.register_dataclass(DCPost, data_fields=["x"], meta_fields=[])


@chex.dataclass(mappable_dataclass=False)
class Ch:
    x: jax.Array

    @beartype
    def __setattr__(self, name: str, value: CA) -> None:
        object.__setattr__(self, name, value)


def main():
    for w in (Cust(jnp.ones(2)), DC(jnp.ones(2)), Ch(x=jnp.ones(2))):  # warm beartype's first-violation path
        try:
            w.x = "bad"
        except Exception:
            pass
    for name, o in [("Cust", Cust(jnp.ones(2))), ("DC", DC(jnp.ones(2))), ("Ch", Ch(x=jnp.ones(2))), ("DCPost", DCPost(jnp.ones(2)))]:
        r = jax.tree.map(lambda v: v, o)
        j = common.jit(lambda v: v)(o)
        for lab, obj in [("rebuilt", r), ("jitted", j), ("original", o)]:
            if name == "DCPost":
                obj.x = "bad"
                show(f"{name} {lab} post_init bad", lambda: obj.__post_init__())
            else:
                show(f"{name} {lab} setattr bad", lambda: setattr(obj, "x", "bad"))
                show(f"{name} {lab} setattr good", lambda: setattr(obj, "x", jnp.zeros(2)))

common.main(main)
