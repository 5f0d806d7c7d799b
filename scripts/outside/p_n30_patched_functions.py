# Region: the patched registration functions (substitute 3) -- their own observables and
# call forms (positional args, keywords, decorator forms).
# MODES: install
import common
from common import show
import dataclasses, inspect, pickle, jax, jax.numpy as jnp, chex
from jax import tree_util as tu
import flax.struct


def describe(name, f):
    show(f"{name} sig", lambda: str(inspect.signature(f)), count=False)
    show(f"{name} names", lambda: (f.__name__, f.__qualname__, f.__module__), count=False)
    show(f"{name} doc", lambda: (f.__doc__ or "")[:60], count=False)
    show(f"{name} pickle", lambda: pickle.loads(pickle.dumps(f)) is f, count=False)
    show(f"{name} isfunction", lambda: inspect.isfunction(f), count=False)
    show(f"{name} has __wrapped__", lambda: hasattr(f, "__wrapped__"), count=False)


def main():
    for name in ["register_pytree_node", "register_pytree_with_keys", "register_pytree_node_class",
                 "register_pytree_with_keys_class", "register_dataclass", "register_static"]:
        describe(name, getattr(tu, name))
    describe("jax.tree_util.register_dataclass alias", jax.tree_util.register_dataclass)
    import jax._src.tree_util as jtu_src
    show("src is public", lambda: jtu_src.register_dataclass is tu.register_dataclass, count=False)
    show("src pytree_node is public", lambda: jtu_src.register_pytree_node is tu.register_pytree_node, count=False)
    describe("chex.dataclass", chex.dataclass)
    describe("flax.struct.dataclass", flax.struct.dataclass)

    @dataclasses.dataclass
    class P1:
        a: jax.Array
        m: int = 0
    show("rd positional", lambda: type(tu.register_dataclass(P1, ["a"], ["m"])).__name__, count=False)
    show("rd positional use", lambda: tu.tree_structure(P1(jnp.ones(1), 2)).num_leaves, count=False)

    @dataclasses.dataclass
    class P2:
        a: jax.Array
    show("rd nodetype kw", lambda: tu.register_dataclass(nodetype=P2, data_fields=["a"], meta_fields=[]).__name__, count=False)

    @dataclasses.dataclass
    class P3:
        a: jax.Array
    show("rd explicit None", lambda: tu.register_dataclass(P3, data_fields=None, meta_fields=None).__name__, count=False)
    show("rd no args decorator form", lambda: tu.register_dataclass(data_fields=["a"], meta_fields=[])(dataclasses.dataclass(type("P4", (), {"__annotations__": {"a": jax.Array}}))).__name__, count=False)
    show("rd tuple fields", lambda: tu.register_dataclass(dataclasses.dataclass(type("P5", (), {"__annotations__": {"a": jax.Array}})), data_fields=("a",), meta_fields=()).__name__, count=False)
    show("rd generator fields", lambda: tu.register_dataclass(dataclasses.dataclass(type("P6", (), {"__annotations__": {"a": jax.Array}})), data_fields=(x for x in ["a"]), meta_fields=iter([])).__name__, count=False)
    show("rpn kw names", lambda: tu.register_pytree_node(nodetype=type("K1", (), {}), flatten_func=lambda o: ((), None), unflatten_func=lambda a, c: None), count=False)
    show("rpn flatten_with_keys kw", lambda: tu.register_pytree_node(type("K2", (), {}), lambda o: ((), None), lambda a, c: None, flatten_with_keys_func=lambda o: ((), None)), count=False)
    show("rpn extra positional", lambda: tu.register_pytree_node(type("K3", (), {}), lambda o: ((), None), lambda a, c: None, lambda o: ((), None)), count=False)
    show("rpn wrong arity", lambda: tu.register_pytree_node(type("K4", (), {}), lambda o: ((), None)), count=False)

common.main(main)
