"""`install()` covers every class registered after it: JAX's registry holds the
class's own unflatten, wrapped to mark "JAX is unflattening this class", and only the
construction that unflatten makes skips its check. Counted with a wrapped checker."""

import functools as ft
import inspect
import sys
import threading
import warnings

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from helpers import run_cached
from typecheck_guard._unflatten._guards import unflattening
from typecheck_guard._unflatten._state import marks

# Every way a custom node's unflatten can build the instance.
STYLES = [
    "classmethod",
    "staticmethod",
    "closure",
    "partial",
    "lambda",
    "new_and_setattr",
    "new_and_init",
    "temporary",
]


def _node(typecheck, style):
    class Point:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, " n"]):
            self.x = x

        def flatten(self):
            return (self.x,), None

        @classmethod
        def from_classmethod(cls, aux, children):
            return cls(*children)

        @staticmethod
        def from_staticmethod(aux, children):
            return Point(*children)

    def build(aux, children, cls):
        return cls(*children)

    def new_and_setattr(aux, children):
        obj = object.__new__(Point)
        obj.x = children[0]
        return obj

    def new_and_init(aux, children):
        obj = Point.__new__(Point)
        obj.__init__(*children)
        return obj

    def temporary(aux, children):
        first = Point(*children)
        return Point(first.x)

    unflatten = {
        "classmethod": Point.from_classmethod,
        "staticmethod": Point.from_staticmethod,
        "closure": lambda aux, children: build(aux, children, Point),
        "partial": ft.partial(build, cls=Point),
        "lambda": lambda aux, children: Point(*children),
        "new_and_setattr": new_and_setattr,
        "new_and_init": new_and_init,
        "temporary": temporary,
    }[style]
    jax.tree_util.register_pytree_node(Point, Point.flatten, unflatten)
    return Point


@pytest.mark.parametrize("style", STYLES)
def test_every_unflatten_style_runs_no_check_and_every_construction_does(
    installed, typecheck, style
):
    Point = _node(typecheck, style)
    typecheck.reset()
    p = Point(jnp.ones(3))
    constructed = typecheck.calls
    assert constructed > 0
    typecheck.reset()
    step = jax.jit(lambda p: jax.tree.map(lambda v: v * 2, p))
    out = run_cached(step, p, n=5)
    q = jax.tree.map(lambda v: v + 1, out)
    leaves, treedef = jax.tree.flatten(q)
    jax.tree.unflatten(treedef, leaves)
    assert typecheck.calls == 0
    assert type(q) is Point and q.x.tolist() == [65.0] * 3
    # Constructions, the user calling the registered unflatten, JAX calling the
    # class as a function: checked, as without us.
    for bad in (
        lambda: Point(jnp.ones((2, 2))),
        lambda: jax.tree_util.tree_map(Point, [jnp.ones((2, 2))]),
        lambda: jax.jit(Point)(jnp.ones((2, 2))),
    ):
        with pytest.raises(typecheck.errors):
            bad()


def test_a_registered_unflatten_called_by_the_user_is_checked(installed, typecheck):
    Point = _node(typecheck, "classmethod")
    with pytest.raises(typecheck.errors):
        Point.from_classmethod(None, [jnp.ones((2, 2))])


def _nested(typecheck, where):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Inner:
        x: Float[Array, " n"]

    @jax.tree_util.register_pytree_node_class
    class Outer:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, " n"]):
            self.x = x
            if where == "init":
                self.inner = Inner(x[None])  # rejected: a 2-d array
            elif where == "same-class" and x.ndim == 1:
                self.twin = Outer(x[None])  # another Outer, rejected

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    return Outer


@pytest.mark.parametrize("where", ["init", "same-class"])
def test_constructions_nested_in_an_unflatten_are_checked(installed, typecheck, where):
    Outer = _nested(typecheck, where)
    with pytest.raises(typecheck.errors):
        Outer(jnp.ones(2))
    obj = object.__new__(Outer)
    obj.x = jnp.ones(2)
    with pytest.raises(typecheck.errors):  # JAX's unflatten: the nested one raises
        jax.tree.map(lambda v: v, obj)


def test_post_init_classes_run_post_init_but_not_the_check(installed, typecheck):
    calls = []

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Validated:
        x: Float[Array, " n"]

        def __post_init__(self):
            calls.append(1)
            object.__setattr__(self, "norm", (self.x**2).sum())

    typecheck.reset()
    v = Validated(jnp.ones(4))
    per_construction = typecheck.calls
    typecheck.reset()
    out = run_cached(jax.jit(lambda s: s.replace(x=s.x * 2)), v, n=3)
    # `.replace` while tracing: a construction, checked once; no unflatten checked.
    assert typecheck.calls == per_construction
    assert float(out.norm) == 4 * 16**2 and len(calls) > 4


def test_a_node_inside_a_node_marks_each_level(installed, typecheck):
    seen = []

    def watched(name, cls):
        def unflatten(aux, children):
            seen.append((name, unflattening(sys._getframe())))
            return cls(*children)

        return unflatten

    class Leafy:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, ""]):
            self.x = x

    class Holder:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, leafy: Leafy):
            self.leafy = leafy

    jax.tree_util.register_pytree_node(
        Leafy, lambda o: ((o.x,), None), watched("leafy", Leafy)
    )
    jax.tree_util.register_pytree_node(
        Holder, lambda o: ((o.leafy,), None), watched("holder", Holder)
    )
    tree = Holder(Leafy(jnp.ones(())))
    typecheck.reset()
    jax.tree.map(lambda v: v, tree)
    assert seen == [("leafy", Leafy), ("holder", Holder)]
    assert typecheck.calls == 0 and unflattening(sys._getframe()) is None
    assert marks.state == [None]


def test_an_exception_inside_an_unflatten_restores_the_mark(installed, typecheck):
    class Picky:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, " n"]):
            if x.shape[0] > 2:
                raise ValueError("too long")
            self.x = x

    jax.tree_util.register_pytree_node(
        Picky, lambda o: ((o.x,), None), lambda aux, children: Picky(*children)
    )
    p = Picky(jnp.ones(2))
    with pytest.raises(ValueError, match="too long"):
        jax.tree.map(lambda v: jnp.ones(3), p)
    assert marks.state == [None]


def test_marks_are_per_thread(installed, typecheck):
    Point = _node(typecheck, "classmethod")
    entered, release = threading.Event(), threading.Event()
    in_other_thread = []

    def slow_unflatten_elsewhere():
        entered.wait()
        in_other_thread.append(unflattening(sys._getframe()))
        release.set()

    class Slow:
        def __init__(self, x):
            self.x = x

    def unflatten(aux, children):
        entered.set()
        release.wait(5)
        return Slow(*children)

    jax.tree_util.register_pytree_node(Slow, lambda o: ((o.x,), None), unflatten)
    thread = threading.Thread(target=slow_unflatten_elsewhere)
    thread.start()
    jax.tree.map(lambda v: v, Slow(jnp.ones(1)))
    thread.join()
    assert in_other_thread == [None]
    typecheck.reset()
    point = Point(jnp.ones(1))
    per_construction = typecheck.calls
    jax.tree.map(lambda v: v, point)
    assert typecheck.calls == per_construction


def test_new_based_libraries_get_no_wrapper(installed):
    import equinox as eqx
    from jax._src.tree_util import _registry

    class Module(eqx.Module):
        x: jax.Array

    Module(jnp.ones(1))
    assert not hasattr(_registry[Module].from_iter, "__typecheck_guard_plain__")


def test_check_gives_the_check_back(installed, typecheck):
    Point = _node(typecheck, "classmethod")

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class State:
        point: Point
        y: Float[Array, " n"]

    state = State(Point(jnp.ones(2)), jnp.ones(2))
    assert typecheck_guard.check(state) is state
    as_int = jax.tree.map(lambda v: v.astype(jnp.int32), state)  # no check: by design
    with pytest.raises(typecheck.errors):
        typecheck_guard.check(as_int)
    with pytest.raises(typecheck.errors):
        jax.jit(lambda s: typecheck_guard.check(jax.tree.map(lambda v: v[None], s)))(
            state
        )
    typecheck.reset()
    jax.jit(lambda s: typecheck_guard.check(s).y)(state)
    assert typecheck.calls > 0  # at trace time


def test_check_is_checked_inside_an_unflatten_safe_block(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Early:
        x: Float[Array, " n"]

    with typecheck_guard.unflatten_safe():
        as_int = jax.tree.map(lambda v: v.astype(jnp.int32), Early(jnp.ones(2)))
        with pytest.raises(typecheck.errors):
            typecheck_guard.check(as_int)


# What changes in a treedef, stated in docs/how-it-works and tested here.


def test_treedefs_and_keypaths_of_a_marked_class(installed, typecheck):
    Point = _node(typecheck, "classmethod")
    p = Point(jnp.ones(2))
    treedef = jax.tree.structure(p)
    # Equal to the treedef of any other instance, same keypaths as JAX's own node.
    assert treedef == jax.tree.structure(Point(jnp.zeros(2)))
    assert [k for k, _ in jax.tree_util.tree_flatten_with_path(p)[0]] == [
        (jax.tree_util.FlattenedIndexKey(0),)
    ]
    assert "CustomNode" in str(treedef)


_PICKLES = """
import pickle, sys
import jax, jax.numpy as jnp
mode, action, path = sys.argv[1:]
if mode == "install":
    import typecheck_guard
    typecheck_guard.install()
from flax import struct

@jax.tree_util.register_pytree_node_class
class Node:
    def __init__(self, x):
        self.x = x
    def tree_flatten(self):
        return (self.x,), None
    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

@struct.dataclass
class Data:
    x: jax.Array

if action == "dump":
    trees = (Node(jnp.ones(1)), Data(jnp.ones(1)))
    with open(path, "wb") as f:
        pickle.dump([jax.tree.structure(t) for t in trees], f)
else:
    with open(path, "rb") as f:
        node, data = pickle.load(f)
    print(type(node.unflatten([1])).__name__)
    sys.stdout.flush()
    print(type(data.unflatten([1])).__name__)
"""


@pytest.mark.parametrize(
    "dump, load", [("install", "install"), ("plain", "plain"), ("install", "plain")]
)
def test_pickled_treedefs_between_processes(tmp_path, dump, load):
    """Treedefs pickle between any processes, installed or not: a custom node's is
    the same in both; a dataclass's is written as JAX alone writes it, and read as
    the kind its class has in the process that reads it (`_adapt/_pickling.py`;
    every pair, across spawn and subprocess, in tests/integration/test_children.py)."""
    import subprocess
    import sys

    script = tmp_path / "pickles.py"
    script.write_text(_PICKLES)
    path = str(tmp_path / "treedefs.pkl")
    run = [sys.executable, str(script)]
    subprocess.run([*run, dump, "dump", path], check=True, capture_output=True)
    out = subprocess.run([*run, load, "load", path], capture_output=True, text=True)
    lines = out.stdout.split()
    assert out.returncode == 0 and lines == ["Node", "Data"], out.stderr[-2000:]


def test_a_dataclass_becomes_a_custom_node(installed):
    from jax._src.tree_util import _registry

    @struct.dataclass
    class D:
        x: jax.Array

    d = D(jnp.ones(1))
    assert "CustomNode" in str(jax.tree.structure(d))
    paths = [
        jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(d)[0]
    ]
    assert paths == [".x"]
    assert _registry[D].from_iter.__typecheck_guard_plain__ is not None


def test_jax_export_serialization_of_a_marked_class(installed, typecheck):
    export = pytest.importorskip("jax.export")
    if not hasattr(export, "register_pytree_node_serialization"):
        pytest.skip("jax.export.register_pytree_node_serialization is jax >= 0.4.32")
    Point = _node(typecheck, "classmethod")
    export.register_pytree_node_serialization(
        Point,
        serialized_name=f"{__name__}.Point.{typecheck.name}",
        serialize_auxdata=lambda aux: b"",
        deserialize_auxdata=lambda data: None,
    )
    exported = export.export(jax.jit(lambda p: jax.tree.map(lambda v: v * 2, p)))(
        Point(jnp.ones(2))
    )
    restored = export.deserialize(exported.serialize())
    point = Point(jnp.ones(2))
    typecheck.reset()
    out = restored.call(point)
    assert type(out) is Point and out.x.tolist() == [2.0, 2.0]
    assert typecheck.calls == 0


def test_the_probe_of_jax_s_own_dataclass_unflatten(monkeypatch, caplog):
    from typecheck_guard._adapt import _jax

    assert _jax.dataclass_unflatten_calls_init()  # every jax we support, today
    monkeypatch.setattr(_jax, "dataclass_unflatten_calls_init", lambda: False)
    original = jax.tree_util.register_dataclass
    with caplog.at_level("INFO", logger="typecheck_guard"), warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    try:
        assert jax.tree_util.register_dataclass is original
        assert "left as it is" in caplog.text
    finally:
        typecheck_guard.uninstall()


def test_after_uninstall_its_classes_are_checked_again(typecheck):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    Point = _node(typecheck, "classmethod")
    typecheck.reset()
    point = Point(jnp.ones(2))
    per_construction = typecheck.calls
    jax.tree.map(lambda v: v, point)
    assert typecheck.calls == per_construction
    typecheck_guard.uninstall()
    from typecheck_guard._unflatten._guards import is_guard

    assert not is_guard(Point.__init__)
    jax.tree.map(lambda v: v, point)
    assert typecheck.calls == 2 * per_construction


def test_jax_export_accepts_a_wrapped_jitted_function():
    export = pytest.importorskip("jax.export")
    step = typecheck_guard.unflatten_safe(jax.jit(lambda x: x * 2))
    exported = export.export(step)(jnp.ones(2))
    assert exported.call(jnp.ones(2)).tolist() == [2.0, 2.0]


def test_a_class_checked_after_its_first_unflatten_is_guarded_then(
    installed, typecheck
):
    class Late:
        def __init__(self, x: Float[Array, " n"]):
            self.x = x

    jax.tree_util.register_pytree_node(
        Late, lambda o: ((o.x,), None), lambda aux, children: Late(*children)
    )
    late = Late(jnp.ones(2))
    jax.tree.map(lambda v: v, late)  # unchecked: its unflatten sets no mark
    Late.__init__ = jaxtyped(typechecker=typecheck)(Late.__init__)
    typecheck.reset()
    late = Late(jnp.ones(2))
    per_construction = typecheck.calls
    assert per_construction > 0
    jax.tree.map(lambda v: v, late)
    assert typecheck.calls == per_construction  # the unflatten checked nothing
    with pytest.raises(typecheck.errors):
        Late(jnp.ones((2, 2)))


SIGNATURES = {
    "defaults": "def __init__(self, x: Float[Array, ' n'], scale: float = 2.0):",
    "keyword_only": "def __init__(self, x: Float[Array, ' n'], *, scale: float = 2.0):",
    "positional_only": "def __init__(self, x: Float[Array, ' n'], /, scale: float = 2.0):",
    "star_args": "def __init__(self, x: Float[Array, ' n'], *rest, scale: float = 2.0, **extra):",
    "other_self": "def __init__(this, x: Float[Array, ' n'], scale: float = 2.0):",
}


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_the_generated_guard_keeps_every_signature(installed, typecheck, name):
    me = "this" if name == "other_self" else "self"
    source = (
        "class Sig:\n"
        f"    {SIGNATURES[name]}\n"
        f"        {me}.x = x * scale\n"
        f"        {me}.scale = scale\n"
    )
    namespace = {"Float": Float, "Array": Array}
    exec(source, namespace)
    Sig = namespace["Sig"]
    Sig.__init__ = checked = jaxtyped(typechecker=typecheck)(Sig.__init__)
    jax.tree_util.register_pytree_node(
        Sig,
        lambda o: ((o.x,), o.scale),
        lambda scale, children: Sig(children[0] / scale, scale=scale),
    )
    s = Sig(jnp.ones(2), scale=3.0)
    typecheck.reset()
    out = jax.tree.map(lambda v: v, s)
    assert typecheck.calls == 0
    # One guard shape, `(self, /, *args, **kwargs)`, which reads as the method.
    from typecheck_guard._unflatten._guards import is_guard

    assert is_guard(Sig.__init__)
    assert inspect.signature(Sig.__init__) == inspect.signature(checked)
    assert vars(out).keys() == vars(s).keys() and out.scale == 3.0
    assert out.x.tolist() == [3.0, 3.0]
    with pytest.raises(typecheck.errors):
        Sig(jnp.ones((2, 2)))
    assert Sig.__init__.__name__ == "__init__"


def _post_init_checked_class(route: str, typecheck) -> type:
    """A dataclass whose generated `__init__` is unchecked and whose `__post_init__`
    is checked: the guard's entry point is that unchecked `__init__`."""

    def __post_init__(self) -> None:
        pass

    if route == "struct":

        @struct.dataclass
        class Post:
            x: jax.Array
            n: int = struct.field(pytree_node=False, default=1)

    else:
        import dataclasses

        @dataclasses.dataclass(frozen=True)
        class Post:
            x: jax.Array
            n: int = dataclasses.field(default=1, metadata=dict(static=True))

        jax.tree_util.register_dataclass(Post, data_fields=["x"], meta_fields=["n"])
    # The checker itself (the counting wrapper would sit above it, and block).
    Post.__post_init__ = typecheck._decorate(__post_init__)
    return Post


@pytest.mark.parametrize("form", ["install", "unflatten_safe"])
@pytest.mark.parametrize("route", ["struct", "register_dataclass"])
def test_an_unchecked_init_guarded_for_its_checked_post_init_reads_as_itself(
    typecheck, route, form
):
    # (Review round 36.) The guard on an unchecked `__init__`, there because the
    # class's `__post_init__` is checked, read as `(*args, **kwargs)` once the class
    # had been unflattened: `inspect.signature(cls)` too, which reads `__init__`.
    import typing

    from typecheck_guard._unflatten._guards import is_guard

    if form == "install":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
            typecheck_guard.install()
    Post = _post_init_checked_class(route, typecheck)
    original = Post.__init__
    before = (inspect.signature(Post), inspect.signature(Post.__init__))
    hints = typing.get_type_hints(Post.__init__)
    post = Post(jnp.ones(2))
    if form == "install":
        jax.jit(lambda p: p)(post)
    else:
        with typecheck_guard.unflatten_safe():
            jax.jit(lambda p: p)(post)
    assert is_guard(Post.__init__)
    assert (inspect.signature(Post), inspect.signature(Post.__init__)) == before
    assert typing.get_type_hints(Post.__init__) == hints
    assert inspect.unwrap(Post.__init__) is original
    # What is set on it is there to read, as on the original.
    Post.__init__.mark = "set"
    assert Post.__init__.mark == "set"
    assert Post(jnp.ones(2)).n == 1


def test_check_runs_the_checks_in_the_order_jax_unflattens(typecheck):
    # (Review round 36.) `check` went outermost first; JAX's unflatten builds a
    # node's children before the node, so where both failed plain JAX raised the
    # child's error and `check` the parent's, and side effects ran in another order.
    import dataclasses

    order: list[str] = []

    def make(name: str) -> type:
        @jaxtyped(typechecker=typecheck)
        @struct.dataclass
        class Node:
            x: Float[Array, " n"]
            kids: tuple = ()

            def __post_init__(self) -> None:
                order.append(name)

        return Node

    Outer, Left, Right, Leaf = (make(n) for n in ("Outer", "Left", "Right", "Leaf"))
    x = jnp.ones(2)
    tree = Outer(x, (Left(x, (Leaf(x),)), Right(x)))

    def plain_and_check(tree):
        """What plain JAX's unflatten ran (it is the oracle: nothing installed),
        then what `check` ran, each as (the `__post_init__`s in order, raised)."""
        out = []
        for run in (
            lambda: jax.tree.map(lambda v: v, tree),
            lambda: typecheck_guard.check(tree),
        ):
            order.clear()
            try:
                run()
                raised = False
            except typecheck.errors:
                raised = True
            out.append((list(order), raised))
        return out

    plain, ours = plain_and_check(tree)
    assert plain == (["Leaf", "Left", "Right", "Outer"], False)
    assert ours == plain
    # Left and Outer both fail: plain JAX builds Leaf, then fails at Left. (Built
    # with jaxtyping's checks switched off.)
    import jaxtyping

    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        bad = dataclasses.replace(
            tree,
            x=x[None],
            kids=(dataclasses.replace(tree.kids[0], x=x[None]), Right(x)),
        )
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
    plain, ours = plain_and_check(bad)
    # (jaxtyping 0.2 checks a dataclass after its `__post_init__`: Left's ran.)
    assert plain[0][:1] == ["Leaf"] and "Outer" not in plain[0] and plain[1]
    assert ours == plain


@pytest.mark.parametrize("bad_first", [True, False])
def test_check_sees_the_children_as_jax_rebuilds_them(typecheck, bad_first):
    # (Review round 37.) `check` handed a node its own children; JAX's unflatten
    # hands it rebuilt ones, a dict's keys sorted. beartype checks one item of a
    # dict: plain JAX's rebuild failed where `check` passed, and the reverse.
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Holder:
        m: dict[str, Float[Array, " n"]]

    good = jnp.ones(2)
    holder = Holder({"z": good, "a": good})
    bad = jnp.ones((2, 2))
    # Inserted first, or last: a key sorted first either way.
    m = {"a": bad, "z": good} if bad_first else {"z": good, "a": bad}
    object.__setattr__(holder, "m", m)

    def outcome(run) -> bool:
        try:
            run()
        except typecheck.errors:
            return True
        return False

    plain = outcome(lambda: jax.tree.map(lambda v: v, holder))  # no install
    assert outcome(lambda: typecheck_guard.check(holder)) == plain


@pytest.mark.parametrize("checked_init", [True, False])
def test_what_is_written_on_a_guarded_method_is_on_it_after_uninstall(
    typecheck, checked_init
):
    # (Review round 37.) `uninstall()` put the method back without what had been
    # written on its guard meanwhile (`__doc__`, `__qualname__`, an attribute).
    import dataclasses

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()

    @dataclasses.dataclass(frozen=True)
    class Written:
        x: jax.Array

    if checked_init:
        Written.__init__ = typecheck._decorate(Written.__init__)
    else:

        def __post_init__(self) -> None:
            pass

        Written.__post_init__ = typecheck._decorate(__post_init__)
    jax.tree_util.register_dataclass(Written, data_fields=["x"], meta_fields=[])
    original = Written.__init__
    jax.tree.map(lambda v: v, Written(jnp.ones(2)))
    from typecheck_guard._unflatten._guards import is_guard

    assert is_guard(Written.__init__)
    Written.__init__.__doc__ = "written"
    Written.__init__.mark = "set"
    if not checked_init:  # the guard's `__wrapped__` is the method itself
        Written.__init__.__wrapped__.direct = "kept"
    typecheck_guard.uninstall()
    assert Written.__init__ is original
    assert (original.__doc__, original.mark) == ("written", "set")
    assert checked_init or original.direct == "kept"
    assert "__wrapped__" not in vars(original) or checked_init
