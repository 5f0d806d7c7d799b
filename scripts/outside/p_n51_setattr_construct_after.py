# Region: constructions whose check is in a checked __setattr__ (the generated __init__ writes
# fields through it), after the class's first unflatten, for each registration route.
# MODES: install block
import common
from common import show, Counted
import dataclasses, jax, jax.numpy as jnp, chex
from beartype import beartype
from flax import struct

CA = Counted(jax.Array, "CA")


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class DC:
    x: jax.Array
    y: jax.Array

    @beartype
    def __setattr__(self, name: str, value: CA) -> None:
        object.__setattr__(self, name, value)


@chex.dataclass(mappable_dataclass=False)
class Ch:
    x: jax.Array
    y: jax.Array

    @beartype
    def __setattr__(self, name: str, value: CA) -> None:
        object.__setattr__(self, name, value)


@jax.tree_util.register_pytree_node_class
class Cu:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    @beartype
    def __setattr__(self, name: str, value: CA) -> None:
        object.__setattr__(self, name, value)

    def tree_flatten(self):
        return (self.x, self.y), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


def main():
    for K in (DC, Ch, Cu):
        n = K.__name__
        mk = (lambda a, b: K(x=a, y=b)) if K is Ch else (lambda a, b: K(a, b))
        try:
            mk("warm", "up")
        except Exception:
            pass
        show(f"{n} bad before", lambda: mk(jnp.ones(1), "bad"))
        show(f"{n} unflatten", lambda: type(jax.tree.map(lambda v: v, mk(jnp.ones(1), jnp.ones(1)))).__name__, count=False)
        show(f"{n} jit", lambda: type(common.jit(lambda o: o)(mk(jnp.ones(1), jnp.ones(1)))).__name__, count=False)
        show(f"{n} bad after", lambda: mk(jnp.ones(1), "bad"))
        show(f"{n} good after", lambda: type(mk(jnp.ones(1), jnp.ones(1))).__name__)
        show(f"{n} trace bad after", lambda: jax.jit(lambda v: (mk(v, "bad"), 0)[1])(jnp.ones(1)))

common.main(main)
