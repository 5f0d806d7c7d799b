# Region: typecheck_guard.check(tree) -- "what JAX's own unflatten would have run, raising the
# checker's own error".  plain: jax.tree.map(identity) (JAX's own unflatten, checked);
# install: typecheck_guard.check(tree).  Same pass/fail and error type expected.
# MODES: install
import common
from common import show
import dataclasses, jax, jax.numpy as jnp, chex
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped

if common.MODE == "plain":
    CHECK = lambda t: (jax.tree.map(lambda v: v, t), "checked")[1]
else:
    import typecheck_guard
    CHECK = lambda t: (typecheck_guard.check(t), "checked")[1]


@jax.tree_util.register_pytree_node_class
class Casting:
    @jaxtyped(typechecker=beartype)
    def __init__(self, x: Float[Array, "n"]):
        self.x = x

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(jnp.asarray(ch[0], jnp.float32))  # the unflatten fixes the dtype


@jaxtyped(typechecker=beartype)
@struct.dataclass
class St:
    x: Float[Array, "n"]
    tag: str = struct.field(pytree_node=False, default="t")


@jaxtyped(typechecker=beartype)
@chex.dataclass
class Ch:
    x: Float[Array, "n"]


@dataclasses.dataclass
class PostFix:
    x: jax.Array

    @jaxtyped(typechecker=beartype)
    def __post_init__(self):
        assert self.x.dtype == jnp.float32


jax.tree_util.register_dataclass(PostFix, data_fields=["x"], meta_fields=[])


@jax.tree_util.register_pytree_node_class
class Lenient:
    @jaxtyped(typechecker=beartype)
    def __init__(self, x: Float[Array, "n"]):
        self.x = x

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        obj = object.__new__(cls)  # no constructor: nothing checked on unflatten
        obj.x = ch[0]
        return obj


def main():
    i2 = jnp.ones(2, jnp.int32)
    # build trees holding int leaves WITHOUT running any check (object.__new__), identical in both modes
    def raw(cls, **fields):
        o = object.__new__(cls)
        for k, v in fields.items():
            object.__setattr__(o, k, v)
        return o
    cases = {
        "Casting int": raw(Casting, x=i2),
        "St int": raw(St, x=i2, tag="t"),
        "St ok": St(jnp.ones(2)),
        "Ch int": raw(Ch, x=i2),
        "PostFix int": raw(PostFix, x=i2),
        "Lenient int": raw(Lenient, x=i2),
        "nested list": [raw(St, x=i2, tag="t"), St(jnp.ones(2))],
        "None field": raw(St, x=None, tag="t"),
        "dict of ok": {"a": St(jnp.ones(2)), "b": Casting(jnp.ones(2))},
    }
    for name, t in cases.items():
        show(name, lambda: CHECK(t), count=False)
    show("inside jit", lambda: jax.jit(lambda v: (CHECK(raw(St, x=v, tag="t")), 0)[1])(i2), count=False)

common.main(main)
