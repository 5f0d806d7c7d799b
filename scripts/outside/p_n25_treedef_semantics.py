# Region: what JAX's registry holds for register_dataclass classes (they become custom nodes
# under install() on jax<=0.11): treedef equality/hash across classes and static values,
# unhashable static fields, jit cache sharing, jax.export serialization.
# MODES: install
import common
from common import show
import dataclasses, jax, jax.numpy as jnp, numpy as np
from jax import tree_util as tu


@tu.register_dataclass
@dataclasses.dataclass
class A:
    x: jax.Array
    s: object = dataclasses.field(default=0, metadata=dict(static=True))


@tu.register_dataclass
@dataclasses.dataclass
class B:
    x: jax.Array
    s: object = dataclasses.field(default=0, metadata=dict(static=True))


def td(o):
    return tu.tree_structure(o)


def main():
    x = jnp.ones(2)
    show("A==B treedef", lambda: td(A(x)) == td(B(x)), count=False)
    show("A,B hash eq (jax 0.10: equal treedefs, different hashes)", lambda: hash(td(A(x))) == hash(td(B(x))), count=False)
    f = jax.jit(lambda o: o)
    show("jit A then B: type", lambda: (type(f(A(x))).__name__, type(f(B(x))).__name__), count=False)
    show("static 1 vs True eq", lambda: td(A(x, 1)) == td(A(x, True)), count=False)
    show("static 1 vs True hash", lambda: hash(td(A(x, 1))) == hash(td(A(x, True))), count=False)
    g = jax.jit(lambda o: o)
    show("jit static 1 then True", lambda: (g(A(x, 1)).s, g(A(x, True)).s), count=False)
    show("static 1.0 vs 1 eq", lambda: td(A(x, 1.0)) == td(A(x, 1)), count=False)
    show("unhashable static flatten", lambda: len(jax.tree.leaves(A(x, [1]))), count=False)
    show("unhashable static eq", lambda: td(A(x, [1])) == td(A(x, [1])), count=False)
    show("unhashable static jit", lambda: jax.jit(lambda o: o)(A(x, [1])).s, count=False)
    show("array static eq", lambda: td(A(x, np.ones(2))) == td(A(x, np.ones(2))), count=False)
    show("array static jit", lambda: jax.jit(lambda o: o)(A(x, np.ones(2))).s.tolist(), count=False)
    show("nan static eq", lambda: td(A(x, float("nan"))) == td(A(x, float("nan"))), count=False)
    show("static tuple child order", lambda: td(A(x, (1, 2))).node_data(), count=False)
    show("treedef repr", lambda: repr(td(A(x, 3)))[:0], count=False)
    show("flatten_up_to", lambda: td(A(x)).flatten_up_to(A([1, 2])), count=False)
    show("tree_transpose", lambda: str(tu.tree_transpose(td([0, 0]), td(A(x)), [A(1), A(2)])), count=False)
    show("compose", lambda: td([0]).compose(td(A(x))).num_leaves, count=False)
    show("tree_util.all_leaves", lambda: tu.all_leaves([A(x)]), count=False)
    show("is_leaf on children", lambda: jax.tree.leaves(A(x, 1), is_leaf=lambda n: isinstance(n, jax.Array)), count=False)
    show("tree.map none leaf", lambda: jax.tree.map(lambda v: None, A(x)), count=False)
    show("tree.map with None field", lambda: jax.tree.map(lambda v: v, A(None)), count=False)
    show("structure of None field", lambda: td(A(None)).num_leaves, count=False)
    show("leaves_with_path", lambda: [tu.keystr(p) for p, _ in tu.tree_leaves_with_path(A(x))], count=False)
    show("broadcast_prefix", lambda: str(tu.tree_map(lambda a, b: b, A(1), A(x))), count=False)
    try:
        from jax import export
        exp = export.export(jax.jit(lambda o: A(o.x + 1)))(A(x))
        show("export out_tree", lambda: str(exp.out_tree), count=False)
        show("export serialize", lambda: len(exp.serialize()) > 0, count=False)
    except Exception as e:
        show("export", lambda: (_ for _ in ()).throw(e), count=False)

common.main(main)
