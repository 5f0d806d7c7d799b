# Region: checker off-switches (jaxtyping_disable, __no_type_check__) toggled around the
# class's first unflatten; uninstall() mid-program (classes registered before/after it).
# MODES: install
import common
from common import show, cbeartype
import dataclasses, jax, jax.numpy as jnp, jaxtyping
from flax import struct
from jaxtyping import Array, Float, jaxtyped


def make():
    @jax.tree_util.register_pytree_node_class
    class C:
        @jaxtyped(typechecker=cbeartype)
        def __init__(self, x: Float[Array, "n"]):
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, ch):
            return cls(*ch)

    @jaxtyped(typechecker=cbeartype)
    @struct.dataclass
    class S:
        x: Float[Array, "n"]

        def __post_init__(self):
            object.__setattr__(self, "x", self.x * 1)
    return C, S


def main():
    C, S = make()
    for K in (C, S):
        n = K.__name__
        jaxtyping.config.update("jaxtyping_disable", True)
        show(f"{n} disabled bad", lambda: type(K(jnp.ones((2, 2)))).__name__)
        show(f"{n} disabled unflatten", lambda: type(jax.tree.map(lambda v: v, K(jnp.ones(2)))).__name__, count=False)
        show(f"{n} disabled bad after", lambda: type(K(jnp.ones((2, 2)))).__name__)
        jaxtyping.config.update("jaxtyping_disable", False)
        show(f"{n} enabled bad", lambda: K(jnp.ones((2, 2))))
        show(f"{n} enabled good", lambda: type(K(jnp.ones(2))).__name__)
        K.__init__.__no_type_check__ = True
        show(f"{n} no_type_check bad", lambda: type(K(jnp.ones((2, 2)))).__name__)
        del K.__init__.__no_type_check__
        show(f"{n} no_type_check removed bad", lambda: K(jnp.ones((2, 2))))
    if common.MODE == "install":
        import typecheck_guard
        typecheck_guard.uninstall()
    C2, S2 = make()
    for K in (C2, S2, C, S):
        n = K.__name__ + ("2" if K in (C2, S2) else "")
        show(f"{n} post-uninstall unflatten", lambda: type(jax.tree.map(lambda v: v, K(jnp.ones(2)))).__name__, count=False)
        show(f"{n} post-uninstall bad", lambda: K(jnp.ones((2, 2))))
        show(f"{n} post-uninstall good", lambda: type(K(jnp.ones(2))).__name__)
    show("flatten_one_level after uninstall", lambda: type(jax.tree_util.flatten_one_level(S2(jnp.ones(2)))[0]).__name__, count=False)

common.main(main)
