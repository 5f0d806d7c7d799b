# New region: AOT stages and eval_shape on typechecked states (checks that pass on
# placeholder leaves, so the plain run works), install / wrap / block.
# MODES: install wrap block
import common
from common import show, cbeartype
import dataclasses, pickle, jax, jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float, jaxtyped


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class S:
    x: object
    n: int = struct.field(pytree_node=False, default=0)


@jax.tree_util.register_pytree_node_class
class N:
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, x: object, n: int):
        self.x, self.n = x, n

    def tree_flatten(self):
        return (self.x,), self.n

    @classmethod
    def tree_unflatten(cls, n, ch):
        return cls(ch[0], n)


def step(s):
    return s.replace(x=s.x * 2) if isinstance(s, S) else N(s.x * 2, s.n + 1)


def main():
    for name, obj in [("S", S(jnp.ones(2), 1)), ("N", N(jnp.ones(2), 1))]:
        j = common.jit(step)
        show(f"{name} call", lambda: j(obj), count=False)
        lowered = j.lower(obj)
        show(f"{name} lowered type", lambda: type(lowered).__name__, count=False)
        show(f"{name} in_avals", lambda: str(lowered.in_avals), count=False)
        show(f"{name} out_info", lambda: str(lowered.out_info), count=False)
        show(f"{name} in_tree", lambda: str(lowered.in_tree), count=False)
        show(f"{name} out_tree", lambda: str(lowered.out_tree), count=False)
        comp = lowered.compile()
        show(f"{name} compiled type", lambda: type(comp).__name__, count=False)
        show(f"{name} compiled call", lambda: comp(obj), count=False)
        show(f"{name} compiled out_tree", lambda: str(comp.out_tree), count=False)
        show(f"{name} compiled input_shardings", lambda: str(comp.input_shardings)[:80], count=False)
        show(f"{name} traced", lambda: type(j.trace(obj)).__name__, count=False)
        show(f"{name} traced out_info", lambda: str(j.trace(obj).out_info), count=False)
        show(f"{name} eval_shape", lambda: str(jax.eval_shape(step, obj)), count=False)
        show(f"{name} jit.eval_shape", lambda: str(j.eval_shape(obj)), count=False)
        show(f"{name} export", lambda: str(jax.export.export(jax.jit(step))(obj).out_tree), count=False)
        show(f"{name} construct bad", lambda: (S(jnp.ones(2), "bad") if name == "S" else N(jnp.ones(2), "bad")))

common.main(main)
