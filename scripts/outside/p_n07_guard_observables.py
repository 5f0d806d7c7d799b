# New region: what the generated guard on __init__/__post_init__/__setattr__ answers
# to introspection after the class's first unflatten (substitute must be indistinguishable).
# MODES: install
import common
from common import show, cbeartype
import dataclasses, inspect, typing, pickle, copy, jax, jax.numpy as jnp, chex
from beartype import beartype
from flax import struct
from jaxtyping import Array, Float, jaxtyped


@jax.tree_util.register_pytree_node_class
class Node:
    """Node doc."""

    @jaxtyped(typechecker=cbeartype)
    def __init__(self, x: Float[Array, "n"], *, scale: float = 2.0, tag: str = "t"):
        """init doc"""
        self.x, self.scale, self.tag = x, scale, tag

    def tree_flatten(self):
        return (self.x,), (self.scale, self.tag)

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(ch[0], scale=aux[0], tag=aux[1])


Node.__init__.custom_attr = "kept"


@jaxtyped(typechecker=cbeartype)
@struct.dataclass
class Post:
    x: Float[Array, "n"]
    y: Float[Array, "n"] = None

    def __post_init__(self):
        if self.y is None:
            object.__setattr__(self, "y", self.x * 0)


@jax.tree_util.register_pytree_node_class
class SetA:
    def __init__(self, x):
        self.x = x

    @beartype
    def __setattr__(self, name: str, value: jax.Array) -> None:
        object.__setattr__(self, name, value)

    def tree_flatten(self):
        return (self.x,), None

    @classmethod
    def tree_unflatten(cls, aux, ch):
        return cls(*ch)


@jaxtyped(typechecker=cbeartype)
@chex.dataclass
class Ch:
    x: Float[Array, "n"]

    def __post_init__(self):
        self.x = self.x * 1


def describe(C, meth):
    f = C.__dict__.get(meth)
    g = getattr(C, meth)
    r = {}
    for k in ["__name__", "__qualname__", "__module__", "__doc__", "__defaults__", "__kwdefaults__"]:
        r[k] = repr(getattr(g, k, "<missing>"))
    r["annotations"] = repr(getattr(g, "__annotations__", None))
    r["dict_keys"] = sorted(getattr(g, "__dict__", {}))
    r["sig"] = str(inspect.signature(g))
    r["sig_nofollow"] = (lambda: str(inspect.signature(g, follow_wrapped=False)))() if True else None
    r["class_sig"] = str(inspect.signature(C)) if meth == "__init__" else None
    r["type"] = type(f).__name__
    r["isfunction"] = inspect.isfunction(g)
    r["co_varnames"] = getattr(getattr(g, "__code__", None), "co_varnames", None)
    r["co_argcount"] = getattr(getattr(g, "__code__", None), "co_argcount", None)
    r["wrapped_chain"] = []
    h = g
    while hasattr(h, "__wrapped__") and len(r["wrapped_chain"]) < 6:
        h = h.__wrapped__
        r["wrapped_chain"].append(getattr(h, "__qualname__", type(h).__name__))
    try:
        r["hints"] = repr(typing.get_type_hints(g))
    except Exception as e:
        r["hints"] = "EXC " + type(e).__name__
    try:
        r["source_first"] = inspect.getsource(g).strip().splitlines()[0]
    except Exception as e:
        r["source_first"] = "EXC " + type(e).__name__
    try:
        r["pickle"] = pickle.loads(pickle.dumps(g)) is g
    except Exception as e:
        r["pickle"] = "EXC " + type(e).__name__
    r["copy"] = copy.deepcopy(g) is g
    return r


def main():
    objs = {"Node": (Node, Node(jnp.ones(2)), ["__init__"]),
            "Post": (Post, Post(jnp.ones(2)), ["__init__", "__post_init__"]),
            "SetA": (SetA, SetA(jnp.ones(2)), ["__setattr__"]),
            "Ch": (Ch, Ch(x=jnp.ones(2)), ["__init__", "__post_init__"])}
    for name, (C, obj, meths) in objs.items():
        jax.tree.map(lambda v: v, obj)  # first unflatten: guards go in
        for m in meths:
            for k, v in describe(C, m).items():
                show(f"{name}.{m} {k}", lambda: v, count=False)
        show(f"{name} vars(C) keys", lambda: sorted(vars(C)), count=False)
        show(f"{name} mro", lambda: [k.__name__ for k in C.__mro__], count=False)

common.main(main)
