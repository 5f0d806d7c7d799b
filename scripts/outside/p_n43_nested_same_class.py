# Region (family 2 neighbourhood): during JAX's rebuild of C, C's own __init__ /
# __post_init__ / default_factory / __setattr__ builds ANOTHER C from non-leaf data; that nested
# construction must stay checked (docs: "A construction nested inside it ... is checked").
# MODES: install block wrap
import common
from common import show, cbeartype
import dataclasses, jax, jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float, jaxtyped

LOG = []


def nested(K, bad):
    try:
        K(bad)
        LOG.append(f"{K.__name__} nested bad: passed")
    except Exception as e:
        LOG.append(f"{K.__name__} nested bad: {type(e).__name__}")


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class PostS:
    x: Float[Array, "n"]
    nest: bool = struct.field(pytree_node=False, default=False)

    def __post_init__(self):
        if self.nest:
            nested(lambda v: PostS(v), "bad")


@jax.tree_util.register_pytree_node_class
class InitC:
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, x: Float[Array, "n"], nest: bool = False):
        self.x, self.nest = x, nest
        if nest:
            nested(lambda v: InitC(v), "bad")

    def tree_flatten(self):
        return (self.x,), self.nest

    @classmethod
    def tree_unflatten(cls, nest, ch):
        return cls(ch[0], nest)


def fac():
    if FLAG["on"]:
        nested(lambda v: FacS(v), "bad")
    return 0


FLAG = {"on": False}


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass(frozen=True)
class FacS:
    x: Float[Array, "n"]
    k: int = 0
    extra: int = dataclasses.field(init=False, default_factory=fac)

    def __post_init__(self):
        pass


jax.tree_util.register_dataclass(FacS, data_fields=["x"], meta_fields=["k"])


@jax.tree_util.register_pytree_node_class
class SetC:
    def __init__(self, x, nest=False):
        self.nest = nest
        self.x = x

    @jaxtyped(typechecker=cbeartype)
    def __setattr__(self, name: str, value: object) -> None:
        if name == "x" and getattr(self, "nest", False):
            nested(lambda v: SetC(v, False).check(v), "bad")
        object.__setattr__(self, name, value)

    @jaxtyped(typechecker=cbeartype)
    def check(self, v: Float[Array, "n"]):
        return v

    def tree_flatten(self):
        return (self.x,), self.nest

    @classmethod
    def tree_unflatten(cls, nest, ch):
        return cls(ch[0], nest)


def main():
    cases = [("PostS", lambda: PostS(jnp.ones(2), True)), ("InitC", lambda: InitC(jnp.ones(2), True)),
             ("SetC", lambda: SetC(jnp.ones(2), True))]
    for name, make in cases:
        o = make()
        for how, fn in [("map", lambda o: jax.tree.map(lambda v: v, o)), ("jit", common.jit(lambda o: o))]:
            LOG.clear()
            show(f"{name} {how}", lambda: type(fn(o)).__name__, count=False)
            show(f"{name} {how} log", lambda: sorted(set(LOG)), count=False)
    o = FacS(jnp.ones(2))
    FLAG["on"] = True
    LOG.clear()
    show("FacS map", lambda: type(jax.tree.map(lambda v: v, o)).__name__, count=False)
    show("FacS map log", lambda: sorted(set(LOG)), count=False)

common.main(main)
