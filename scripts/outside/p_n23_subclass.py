# Region: inheritance.  A guarded __init__ inherited by / called via super() from a
# subclass; subclass and parent registered separately; constructions after the first
# unflatten of one class must still run every check they ran plain.
# MODES: install
import common
from common import show, cbeartype
import jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped


class Base:
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, x: Float[Array, "n"]):
        self.x = x

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


@jax.tree_util.register_pytree_node_class
class P(Base):
    pass


@jax.tree_util.register_pytree_node_class
class Q(Base):
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, x: Float[Array, "n"], y: Float[Array, "n"]):
        super().__init__(x)
        self.y = y

    def tree_flatten(self):
        return (self.x, self.y), None


@jax.tree_util.register_pytree_node_class
class R(P):  # inherits Base.__init__ through P
    pass


class Unreg(Base):  # never registered
    pass


def main():
    for first in ["P", "Q", "R"]:
        K = {"P": P, "Q": Q, "R": R}[first]
        show(f"unflatten {first}", lambda: type(jax.tree.map(lambda v: v, (K(jnp.ones(2), jnp.ones(2)) if K is Q else K(jnp.ones(2))))).__name__, count=False)
        for name, C in [("P", P), ("Q", Q), ("R", R), ("Unreg", Unreg), ("Base", Base)]:
            show(f"after {first}: {name} good", lambda: (C(jnp.ones(2), jnp.ones(2)) if C is Q else C(jnp.ones(2))).x.tolist())
            show(f"after {first}: {name} bad", lambda: (C(jnp.ones((2, 2)), jnp.ones(2)) if C is Q else C(jnp.ones((2, 2)))))
        show(f"after {first}: Q bad y", lambda: Q(jnp.ones(2), jnp.ones(3)))
        show(f"after {first}: Q kw", lambda: Q(x=jnp.ones(2), y=jnp.ones(2)).y.tolist())

common.main(main)
