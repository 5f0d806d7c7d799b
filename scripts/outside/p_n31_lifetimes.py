# Region: object lifetimes -- does anything the plugin keeps (marks, guards, caches, the
# object "being built") hold a rebuilt object, its aux data, or an input alive?
# MODES: install block wrap
import common
from common import show, cbeartype
import dataclasses, gc, weakref, jax, jax.numpy as jnp, chex
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped


class Aux:
    def __init__(self, v):
        self.v = v

    def __eq__(self, o):
        return isinstance(o, Aux) and o.v == self.v

    def __hash__(self):
        return hash(self.v)


@jax.tree_util.register_pytree_node_class
class Cust:
    @jaxtyped(typechecker=cbeartype)
    def __init__(self, x: Float[Array, "n"], aux: Aux):
        self.x, self.aux = x, aux

    def tree_flatten(self):
        return (self.x,), self.aux

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(ch[0], aux)


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class St:
    x: Float[Array, "n"]
    aux: Aux = struct.field(pytree_node=False, default=None)

    def __post_init__(self):
        object.__setattr__(self, "tag", 1)


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class Fast:
    x: Float[Array, "n"]
    aux: Aux = struct.field(pytree_node=False, default=None)


@jaxtyped(typechecker=cbeartype)
@chex.dataclass(mappable_dataclass=False)
class Ch:
    x: Float[Array, "n"]

    def __post_init__(self):
        self.tag = 1


@jaxtyped(typechecker=cbeartype)
def takes(t: PyTree[Float[Array, "n"]]):
    return 0


def main():
    for name, make in [("Cust", lambda: Cust(jnp.ones(2), Aux(1))), ("St", lambda: St(jnp.ones(2), Aux(1))),
                       ("Fast", lambda: Fast(jnp.ones(2), Aux(1))), ("Ch", lambda: Ch(x=jnp.ones(2)))]:
        o = make()
        for how, fn in [("map", lambda o: jax.tree.map(lambda v: v + 1, o)), ("jit", common.jit(lambda o: o)),
                        ("unflatten", lambda o: jax.tree.unflatten(jax.tree.structure(o), jax.tree.leaves(o)))]:
            r = fn(o)
            wr = weakref.ref(r)
            wa = weakref.ref(r.aux) if hasattr(r, "aux") and r.aux is not None else None
            del r
            gc.collect()
            show(f"{name} {how} rebuilt alive", lambda: wr() is not None, count=False)
        c = make()
        wc = weakref.ref(c)
        wa = weakref.ref(c.aux) if hasattr(c, "aux") else None
        del c
        gc.collect()
        show(f"{name} built alive", lambda: wc() is not None, count=False)
        o2 = make()
        wo = weakref.ref(o2)
        common.jit(lambda o: o)(o2)
        del o2
        gc.collect()
        show(f"{name} jit input alive", lambda: wo() is not None, count=False)
    k = Aux(7)  # hashable, weakref-able: a dict key inside a PyTree[...] argument
    wk = weakref.ref(k)
    takes({k: jnp.ones(3)})
    del k
    gc.collect()
    show("dict key of PyTree-checked arg alive", lambda: wk() is not None, count=False)
    a = Aux(8)  # static aux of a node inside a PyTree[...] argument
    wa = weakref.ref(a)
    takes([Cust(jnp.ones(3), a)])
    del a
    gc.collect()
    show("aux of PyTree-checked arg alive", lambda: wa() is not None, count=False)
    b = Aux(9)  # static field of a construction
    wb = weakref.ref(b)
    Fast(jnp.ones(2), b)
    St(jnp.ones(2), b)
    del b
    gc.collect()
    show("static field of construction alive", lambda: wb() is not None, count=False)


common.main(main)
