# Family B1 (fast-path proof): a dataclass field whose class attribute is a data descriptor
# ("descriptor-typed field", documented by the dataclasses module).  The generated __init__
# writes `self.x = x` (or object.__setattr__ when frozen), which goes through the descriptor's
# __set__.  Claim attacked: "object.__new__ + field writes where that provably equals
# cls(**fields)" / "same vars() in the same order".  Plain: unflatten stores via __set__.
# MODES: install
import common
from common import show, out
import dataclasses, pickle, copy
import jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float, jaxtyped
from flax import struct

LOG = []


class Scaled:
    """Data descriptor: stores value*2 under _name, logs every set."""

    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, owner=None):
        if obj is None:
            return 1.0  # the dataclass default read at class creation
        return getattr(obj, self.name)

    def __set__(self, obj, value):
        LOG.append(self.name)
        object.__setattr__(obj, self.name, value * 2)


@jaxtyped(typechecker=beartype)
@struct.dataclass
class S:
    x: Float[Array, " n"] = Scaled()


@jaxtyped(typechecker=beartype)
@dataclasses.dataclass
class R:
    x: Float[Array, " n"] = Scaled()


jax.tree_util.register_dataclass(R, data_fields=["x"], meta_fields=[])


def main():
    for C in (S, R):
        n = C.__name__
        LOG.clear()
        s = C(jnp.ones(2))
        out(f"{n} built vars", sorted(vars(s)))
        out(f"{n} built x", s.x.tolist())
        LOG.clear()
        t = jax.tree.map(lambda v: v, s)
        out(f"{n} tree.map x", t.x.tolist())
        out(f"{n} tree.map vars", sorted(vars(t)))
        out(f"{n} tree.map descriptor sets", list(LOG))
        LOG.clear()
        f = common.jit(lambda q: q)
        u = f(s)
        u = f(s)
        out(f"{n} jit x", u.x.tolist())
        out(f"{n} jit sets", list(LOG))
        out(f"{n} copy x", copy.copy(t).x.tolist())
        out(f"{n} eq", bool((t.x == s.x * 2).all()))


common.main(main)
