# New region: registration functions' own behaviour (errors, return values, late lookups).
# MODES: install
import common
from common import show
import dataclasses, functools, jax, jax.numpy as jnp
from jax import tree_util as tu


def fl(o):
    return (o.x,), None


class A:
    def __init__(self, x):
        self.x = x


def main():
    class C1(A): pass
    show("unflatten None", lambda: tu.register_pytree_node(C1, fl, None), count=False)
    show("use C1", lambda: jax.tree.map(lambda v: v, C1(1)).x, count=False)
    class C2(A): pass
    show("unflatten int", lambda: tu.register_pytree_node(C2, fl, 5), count=False)
    show("use C2", lambda: jax.tree.map(lambda v: v, C2(1)), count=False)
    class C3(A): pass
    show("flatten None", lambda: tu.register_pytree_node(C3, None, lambda a, c: C3(*c)), count=False)
    show("use C3", lambda: jax.tree.map(lambda v: v, C3(1)), count=False)
    class C4(A): pass
    tu.register_pytree_node(C4, fl, lambda a, c: C4(*c))
    show("dup", lambda: tu.register_pytree_node(C4, fl, lambda a, c: C4(*c)), count=False)
    show("builtin dup", lambda: tu.register_pytree_node(tuple, fl, lambda a, c: c), count=False)
    show("return value", lambda: tu.register_pytree_node(type("C5", (A,), {}), fl, lambda a, c: a), count=False)
    show("class decorator returns", lambda: (lambda K: K.__name__)(tu.register_pytree_node_class(type("C6", (A,), {
        "tree_flatten": lambda s: ((s.x,), None), "tree_unflatten": classmethod(lambda k, a, c: k(*c))}))), count=False)
    show("no tree_unflatten", lambda: tu.register_pytree_node_class(type("C7", (A,), {"tree_flatten": fl})), count=False)
    # register_dataclass errors
    @dataclasses.dataclass
    class DC:
        a: int
        b: int
    show("rd missing field", lambda: tu.register_dataclass(DC, data_fields=["a"], meta_fields=[]), count=False)
    @dataclasses.dataclass
    class DC2:
        a: int
        b: int
    show("rd unknown field", lambda: tu.register_dataclass(DC2, data_fields=["a", "b", "c"], meta_fields=[]), count=False)
    class ND:
        pass
    show("rd not dataclass", lambda: tu.register_dataclass(ND), count=False)
    show("rd not dataclass fields", lambda: tu.register_dataclass(ND, data_fields=["a"], meta_fields=[]), count=False)
    @dataclasses.dataclass
    class DC3:
        a: int
        b: int = dataclasses.field(init=False, default=0)
    show("rd init=False in data", lambda: (tu.register_dataclass(DC3, data_fields=["a", "b"], meta_fields=[]),
                                           jax.tree.map(lambda v: v, DC3(1)))[1], count=False)
    @dataclasses.dataclass
    class DC4:
        a: int
        b: int
    show("rd overlap", lambda: tu.register_dataclass(DC4, data_fields=["a", "b"], meta_fields=["b"]), count=False)
    @dataclasses.dataclass
    class DC5:
        a: int
        b: int
    show("rd drop and data", lambda: tu.register_dataclass(DC5, data_fields=["a", "b"], meta_fields=[], drop_fields=["b"]), count=False)
    @dataclasses.dataclass
    class DC6:
        a: int
        b: int = 0
    show("rd drop with default", lambda: (tu.register_dataclass(DC6, data_fields=["a"], meta_fields=[], drop_fields=["b"]),
                                          jax.tree.map(lambda v: v + 1, DC6(1, 5)))[1], count=False)
    @dataclasses.dataclass
    class DC7:
        a: int
        b: int
    show("rd drop no default", lambda: (tu.register_dataclass(DC7, data_fields=["a"], meta_fields=[], drop_fields=["b"]),
                                        jax.tree.map(lambda v: v + 1, DC7(1, 5)))[1], count=False)
    show("rd data_fields str", lambda: tu.register_dataclass(dataclasses.dataclass(type("DC8", (), {"__annotations__": {"ab": int}})),
                                                             data_fields="ab", meta_fields=[]), count=False)
    show("rd returns", lambda: (lambda K: K.__name__)(tu.register_dataclass(dataclasses.dataclass(type("DC9", (), {"__annotations__": {"a": int}})))), count=False)
    show("rd as decorator with args", lambda: (lambda K: K.__name__)(functools.partial(tu.register_dataclass, data_fields=["a"], meta_fields=[])(dataclasses.dataclass(type("DC10", (), {"__annotations__": {"a": int}})))), count=False)
    show("register_static", lambda: (tu.register_static(type("St", (), {"__hash__": lambda s: 0, "__eq__": lambda s, o: True})),)[0], count=False)
    show("register_pytree_with_keys", lambda: tu.register_pytree_with_keys(
        type("WK", (A,), {}), lambda o: (((tu.GetAttrKey("x"), o.x),), None), lambda a, c: None), count=False)

common.main(main)
