# Family B3 (row 1 "exactly this class"): constructions of a class OTHER than the one being
# unflattened, made by an unflatten, that share the guarded __init__ (defined on a base):
#  - Base.tree_unflatten builds a Sub (Sub inherits Base's checked __init__, Sub is not a node)
#  - Sub registered too, inheriting tree_unflatten: unflatten of a Sub
#  - a Generic class called through its alias cls[int](...) (typing frames in between)
#  - a metaclass __call__ that builds a spare instance with other args
# Claim attacked: only "JAX is unflattening exactly this class ... its own code makes this
# construction" is skipped; others checked as plain.
# MODES: install
import common
from common import show, out, cbeartype
import dataclasses
from typing import Generic, TypeVar
import jax, jax.numpy as jnp
from jaxtyping import Array, Float, jaxtyped

T = TypeVar("T")
MODE = {"bad_sub": False}


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class Base:
    x: Float[Array, " n"]
    tag: str

    def tree_flatten(self):
        return (self.x,), self.tag

    @classmethod
    def tree_unflatten(cls, tag, ch):
        if tag == "make-sub":  # a polymorphic unflatten: aux says which subclass
            return Sub("not an array" if MODE["bad_sub"] else ch[0], tag)
        return cls(ch[0], tag)


jax.tree_util.register_pytree_node_class(Base)


class Sub(Base):  # inherits Base's checked __init__; not registered
    pass


@jax.tree_util.register_pytree_node_class
class Sub2(Base):  # registered, inherits tree_unflatten and __init__
    pass


class Meta(type):
    def __call__(cls, *a, **k):
        obj = super().__call__(*a, **k)
        if k.pop("spare", False) is False and getattr(cls, "_spare", False):
            try:
                type.__call__(cls, "spare-bad", "s")  # a spare instance with bad args
                SPARE.append("built")
            except Exception as e:  # noqa: BLE001
                SPARE.append(type(e).__name__)
        return obj


SPARE = []


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class M(metaclass=Meta):
    x: Float[Array, " n"]
    tag: str
    _spare = False

    def tree_flatten(self):
        return (self.x,), self.tag

    @classmethod
    def tree_unflatten(cls, tag, ch):
        return cls(ch[0], tag)


jax.tree_util.register_pytree_node_class(M)


@jaxtyped(typechecker=cbeartype)
@dataclasses.dataclass
class G(Generic[T]):
    x: Float[Array, " n"]
    tag: str

    def tree_flatten(self):
        return (self.x,), self.tag

    @classmethod
    def tree_unflatten(cls, tag, ch):
        return cls[int](ch[0] if tag != "bad" else "not an array", tag)


jax.tree_util.register_pytree_node_class(G)


def main():
    b = Base(jnp.ones(2), "make-sub")
    jax.tree.map(lambda v: v, b)  # first unflatten
    MODE["bad_sub"] = True
    show("Base unflatten builds bad Sub", lambda: type(jax.tree.map(lambda v: v, b)).__name__)
    MODE["bad_sub"] = False
    show("Base unflatten builds good Sub", lambda: type(jax.tree.map(lambda v: v, b)).__name__)
    s2 = Sub2(jnp.ones(2), "t")
    show("Sub2 tree.map", lambda: jax.tree.map(lambda v: v + 1, s2))
    show("Sub2 tree.map ints", lambda: jax.tree.map(lambda v: v.astype(jnp.int32), s2))
    show("Sub2(bad)", lambda: Sub2("no", "t"))
    show("Base(bad) after", lambda: Base("no", "t"))
    show("Sub(bad) after", lambda: Sub("no", "t"))
    m = M(jnp.ones(2), "t")
    jax.tree.map(lambda v: v, m)
    M._spare = True
    SPARE.clear()
    show("M tree.map with spare", lambda: jax.tree.map(lambda v: v, m))
    out("M spare", SPARE)
    M._spare = False
    g = G(jnp.ones(2), "ok")
    show("G tree.map", lambda: jax.tree.map(lambda v: v, g))
    gb = G(jnp.ones(2), "bad")
    show("G unflatten builds bad through alias", lambda: jax.tree.map(lambda v: v, gb))
    show("G[int](bad) after", lambda: G[int]("no", "t"))


common.main(main)
