"""Pickled treedefs under `install()` (`_adapt/_pickling.py`): written as JAX alone
writes them, read as the kind each class has in the reading process.

Between processes (installed or not, with or without typecheck_guard), in
tests/integration/test_children.py; here, what one process can show: the pickled
form, round trips, a pickle of the other kind read right, and `uninstall()`.
"""

import copy
import dataclasses
import pickle
import sys
import warnings

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from typecheck_guard._adapt import _jax

pytestmark = pytest.mark.skipif(
    not _jax.dataclass_unflatten_calls_init(),
    reason=f"jax {jax.__version__}'s own dataclass unflatten calls no __init__: "
    "install() leaves register_dataclass, and pickles, alone",
)

PyTreeDef = jax.tree_util.PyTreeDef


def _publish(cls, name):
    # pickle finds a class by module and qualified name.
    cls.__qualname__ = cls.__name__ = name
    cls.__module__ = __name__
    setattr(sys.modules[__name__], name, cls)
    return cls


def _kinds(treedef):
    return [node[0] for node in treedef.__getstate__()[1]]


def _plain_kinds():
    """The kinds JAX gives a custom node and a dataclass node."""
    custom = _kinds(jax.tree.structure(jax.tree_util.Partial(len)))[-1]

    @dataclasses.dataclass
    class Probe:
        x: int

    jax.tree_util.register_dataclass(Probe, data_fields=["x"], meta_fields=[])
    return custom, _kinds(jax.tree.structure(Probe(1)))[-1]


def _classes(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Point:
        x: Float[Array, " n"]
        tag: str = struct.field(pytree_node=False, default="t")

    # Every field has a default: read as the wrong kind, JAX would build
    # `Defaults()` from nothing, silently.
    @struct.dataclass
    class Defaults:
        a: int = 1
        b: int = 2

    return _publish(Point, "Point"), _publish(Defaults, "Defaults")


def test_installed_pickles_are_plain_jax_s(installed, typecheck):
    custom, dataclass = _plain_kinds()
    Point, Defaults = _classes(typecheck)
    tree = {"p": Point(jnp.ones(2), "u"), "d": Defaults(7, 8)}
    leaves, treedef = jax.tree.flatten(tree)
    # In this process both classes are custom nodes ...
    assert "CustomNode" in str(treedef)
    state = PyTreeDef.__getstate__(treedef)
    nodes = {node[3]: node for node in state[1] if node[3] is not None}
    # ... and their pickle says what JAX alone says: dataclass nodes, with the
    # static fields' values as node data.
    assert nodes[Point][0] == nodes[Defaults][0] == dataclass != custom
    assert nodes[Point][2] == ("u",) and nodes[Defaults][2] == ()
    typecheck.reset()
    for clone in (
        pickle.loads(pickle.dumps(treedef)),
        copy.deepcopy(treedef),
        copy.copy(treedef),
    ):
        assert clone == treedef and hash(clone) == hash(treedef)
        back = clone.unflatten(leaves)
        assert back["p"].tag == "u" and back["p"].x.tolist() == [1.0, 1.0]
        # Not `Defaults()`: the values pickled with it.
        assert (back["d"].a, back["d"].b) == (7, 8)
    assert typecheck.calls == 0  # unflattened without a check, as in this process


def test_custom_nodes_and_explicit_registrations_keep_their_kind(installed):
    custom, _ = _plain_kinds()

    @jax.tree_util.register_pytree_node_class
    class Node:
        def __init__(self, x):
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    # An explicit `typecheck_guard.register_dataclass` is a custom node in every
    # process that defines the class, installed or not.
    @typecheck_guard.register_dataclass
    @dataclasses.dataclass
    class Mine:
        x: int

    _publish(Node, "Node")
    _publish(Mine, "Mine")
    for obj in (Node(1), Mine(1)):
        treedef = jax.tree.structure(obj)
        assert _kinds(treedef)[-1] == custom
        assert pickle.loads(pickle.dumps(treedef)) == treedef


def test_a_pickle_of_the_other_kind_is_read_as_this_process_s(typecheck):
    # A class registered before install() is JAX's dataclass node here; a process
    # where it was registered after install() (say, a child started with
    # TYPECHECK_GUARD=install) could have pickled it as a custom node.
    custom, dataclass = _plain_kinds()
    Point, _ = _classes(typecheck)
    leaves, treedef = jax.tree.flatten(Point(jnp.ones(2), "u"))
    registry, nodes = PyTreeDef.__getstate__(treedef)
    assert nodes[-1][0] == dataclass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    other = PyTreeDef.__new__(PyTreeDef)
    other.__setstate__((registry, [*nodes[:-1], (custom, *nodes[-1][1:])]))
    # Read as a dataclass node (unflattening it as a custom one would crash).
    assert _kinds(other)[-1] == dataclass
    assert other == treedef
    assert other.unflatten(leaves).tag == "u"


def test_malformed_pickles_get_jax_s_own_error(installed):
    from jax._src.tree_util import default_registry

    with pytest.raises(Exception, match="Malformed pickled PyTreeDef"):
        PyTreeDef.__new__(PyTreeDef).__setstate__((default_registry, [(0, 0)]))


def test_uninstall_puts_jax_s_methods_back():
    before = dict(vars(PyTreeDef))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    assert vars(PyTreeDef)["__getstate__"] is not before["__getstate__"]
    assert vars(PyTreeDef)["__setstate__"] is not before["__setstate__"]
    typecheck_guard.uninstall()
    for name in ("__getstate__", "__setstate__"):
        assert vars(PyTreeDef)[name] is before[name], name


def test_jax_export_of_a_struct_class(installed, typecheck):
    export = pytest.importorskip("jax.export")
    if not hasattr(export, "register_pytree_node_serialization"):
        pytest.skip("jax.export.register_pytree_node_serialization is jax >= 0.4.32")
    Point, _ = _classes(typecheck)
    export.register_pytree_node_serialization(
        Point,
        serialized_name=f"{__name__}.Point.{typecheck.name}",
        serialize_auxdata=lambda aux: "|".join(aux).encode(),
        deserialize_auxdata=lambda data: (data.decode(),),
    )
    exported = export.export(jax.jit(lambda p: jax.tree.map(lambda v: v * 2, p)))(
        Point(jnp.ones(2), "u")
    )
    restored = export.deserialize(exported.serialize())
    point = Point(jnp.ones(2), "u")
    typecheck.reset()
    out = restored.call(point)
    assert type(out) is Point and out.tag == "u" and out.x.tolist() == [2.0, 2.0]
    assert typecheck.calls == 0
