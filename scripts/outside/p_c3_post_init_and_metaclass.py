# Row-1 evidence: "Its __post_init__ ... part of it", yet "A construction made inside a constructor
# (another instance of the same class ... built by ... a __post_init__) is checked".
#  - chex.dataclass / flax.struct / register_dataclass with a __post_init__ that builds a spare
#    instance of the same class with bad values during an unflatten
#  - a metaclass __call__ added AFTER registration, building a spare
#  - a metaclass whose __call__ IS a function the unflatten names
# MODES: install
import common
from common import show, out, cbeartype, CHECKS, MODE
import dataclasses
import jax, jax.numpy as jnp
import chex
from flax import struct
from jaxtyping import Array, Float, jaxtyped

BAD = "not an array"
FLAG = {"spare": False, "never": False}
SPARES = []


def attempt(thunk):
    try:
        thunk()
        return "built"
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


def spare_of(cls):
    if FLAG["spare"]:
        FLAG["spare"] = False  # once
        SPARES.append(attempt(lambda: cls(BAD)))


@jaxtyped(typechecker=cbeartype)
@chex.dataclass
class CX:
    value: Float[Array, " n"]

    def __post_init__(self):
        spare_of(CX)


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class FS:
    value: Float[Array, " n"]

    def __post_init__(self):
        spare_of(FS)


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class RD:
    value: Float[Array, " n"]

    def __post_init__(self):
        spare_of(RD)


jax.tree_util.register_dataclass(RD, data_fields=["value"], meta_fields=[])


class Meta(type):
    pass


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class MM(metaclass=Meta):
    value: Float[Array, " n"]

    def tree_flatten(self):
        return (self.value,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(ch[0])


jax.tree_util.register_pytree_node_class(MM)


def meta_call(cls, *a, **k):
    obj = type.__call__(cls, *a, **k)
    spare_of(cls)
    return obj


class Meta2(type):
    __call__ = meta_call


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class MN(metaclass=Meta2):
    value: Float[Array, " n"]

    def tree_flatten(self):
        return (self.value,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        if FLAG["never"]:
            return meta_call(cls, ch[0])  # names meta_call
        return cls(ch[0])


jax.tree_util.register_pytree_node_class(MN)


def rebuild(label, obj):
    SPARES.clear()
    FLAG["spare"] = True
    try:
        r = attempt(lambda: jax.tree.map(lambda v: v + 1, obj))
    finally:
        FLAG["spare"] = False
    out(label + " rebuild", r)
    out(label + " spares", SPARES)


def unadapted_names():
    if MODE != "install":
        return
    import typecheck_guard
    try:
        u = typecheck_guard.unadapted()
        print("INFO unadapted:", sorted(str(getattr(e, "cls", e))[:80] for e in u), flush=True)
    except Exception as e:  # noqa: BLE001
        print("INFO unadapted error", e)


def main():
    x = jnp.ones(2)
    for K in (CX, FS, RD, MM, MN):
        jax.tree.map(lambda v: v, K(value=x))
    for K in (CX, FS, RD):
        rebuild(K.__name__ + " __post_init__ spare", K(value=x))
    unadapted_names()
    Meta.__call__ = meta_call  # added after registration and first unflatten
    rebuild("MM metaclass __call__ added later", MM(x))
    rebuild("MN metaclass __call__ = named fn", MN(x))
    unadapted_names()


common.main(main)
