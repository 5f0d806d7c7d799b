"""install()/uninstall(): classes registered through register_dataclass, flax.struct,
PyTreeNode/TrainState and chex unflatten without re-running their checks."""

import copy
import dataclasses
import pickle
import warnings

import jax
import jax.numpy as jnp
import optax
import pytest
from flax import serialization, struct
from flax.training import train_state
from jaxtyping import Array, ArrayLike, Float, Int, PyTree, jaxtyped

import typecheck_guard
from helpers import make_chex, requires, run_cached


def _seed_node(typecheck):
    # The class of seed 000: a typechecked flax.struct with a PyTree field.
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Node:
        params: PyTree[Float[Array, "..."]]
        step: Float[Array, ""]
        name: str = struct.field(pytree_node=False, default="node")

    return Node


def _params(n=8):
    return {f"w{i}": jnp.ones((3,)) * i for i in range(n)}


def test_seed_node_runs_no_check_per_call(installed, typecheck):
    Node = _seed_node(typecheck)

    @jax.jit
    def step(s):
        return s.replace(
            params=jax.tree.map(lambda p: p * 0.5, s.params), step=s.step + 1
        )

    state = step(Node(_params(), jnp.zeros(())))
    typecheck.reset()
    state = run_cached(step, state, 20)
    # run_cached traces nothing new: every call is a cache hit.
    assert typecheck.calls == 0
    assert float(state.step) == 22.0
    assert typecheck_guard._adapt._register.adapted_how(Node) == "flax.struct.dataclass"


def test_seed_node_still_checks_constructions(installed, typecheck):
    Node = _seed_node(typecheck)
    typecheck.reset()
    Node(_params(), jnp.zeros(()))
    assert typecheck.calls > 0
    with pytest.raises(typecheck.errors):
        Node(_params(), jnp.zeros((2,)))

    @jax.jit
    def bad(x):
        return Node({"a": x}, jnp.zeros((2,)))

    with pytest.raises(typecheck.errors):
        bad(jnp.ones(3))


@pytest.mark.allow_runtime_typechecks
def test_without_install_checks_run_every_call(typecheck):
    # The problem itself, as a regression test of our understanding of JAX.
    Node = _seed_node(typecheck)

    @jax.jit
    def step(s):
        return s.replace(step=s.step + 1)

    state = step(Node(_params(), jnp.zeros(())))
    typecheck.reset()
    run_cached(step, state, 20)
    assert typecheck.calls >= 21


@requires(
    "jaxtyping",
    "0.3.3",
    "older releases can't resolve optax's `ArrayTree` forward reference in a "
    "typechecked TrainState subclass",
)
def test_trainstate_subclass_with_optax_adam(installed, typecheck):
    @jaxtyped(typechecker=typecheck)
    class State(train_state.TrainState):
        params: PyTree[Float[Array, "..."]]
        ema: Float[Array, ""]

    def apply_fn(params, x):
        return sum(jnp.sum(p * x) for p in jax.tree.leaves(params))

    state = State.create(
        apply_fn=apply_fn, params=_params(4), tx=optax.adam(1e-3), ema=jnp.zeros(())
    )

    @jax.jit
    def step(s):
        grads = jax.grad(lambda p: s.apply_fn(p, 2.0))(s.params)
        s = s.apply_gradients(grads=grads)
        return s.replace(ema=0.9 * s.ema + 0.1)

    state = step(state)
    typecheck.reset()
    state = run_cached(step, state, 20)
    assert typecheck.calls == 0
    assert int(state.step) == 22
    with pytest.raises(typecheck.errors):
        state.replace(ema=jnp.zeros((3,)))

    @jax.jit
    def bad(s):
        return s.replace(ema=jnp.zeros((3,)))

    with pytest.raises(typecheck.errors):
        bad(state)


def test_register_dataclass_decorator(typecheck):
    @typecheck_guard.register_dataclass
    @jaxtyped(typechecker=typecheck)
    @dataclasses.dataclass(frozen=True)
    class Pair:
        a: Float[Array, " n"]
        b: Float[Array, " n"]
        tag: str = dataclasses.field(default="p", metadata=dict(static=True))

    @jax.jit
    def step(p):
        return Pair(p.a + 1, p.b * 2, p.tag)

    state = step(Pair(jnp.ones(3), jnp.ones(3)))
    typecheck.reset()
    state = run_cached(step, state, 20)
    # Each traced call constructs Pair once; cache hits construct nothing.
    assert typecheck.calls == 0
    with pytest.raises(typecheck.errors):
        Pair(jnp.ones(3), jnp.ones(4))

    @jax.jit
    def bad(p):
        return Pair(p.a, jnp.ones(4))

    with pytest.raises(typecheck.errors):
        bad(state)


def test_register_dataclass_factory_form():
    @typecheck_guard.register_dataclass(data_fields=["x"], meta_fields=["k"])
    class Plain:
        def __init__(self, x, k):
            raise AssertionError("unflatten must not call __init__")

    obj = object.__new__(Plain)
    obj.x, obj.k = jnp.ones(2), 3
    leaves, treedef = jax.tree.flatten(obj)
    back = treedef.unflatten(leaves)
    assert back.k == 3 and back.x is leaves[0]


def _jax_twin(cls_factory):
    """The same class registered by JAX and by us, to compare their behaviour."""
    return cls_factory(jax.tree_util.register_dataclass), cls_factory(
        typecheck_guard.register_dataclass
    )


def test_keypaths_and_treedef_match_jax():
    def make(register):
        @register
        @dataclasses.dataclass
        class S:
            b: dict
            a: jax.Array
            m: int = dataclasses.field(default=1, metadata=dict(static=True))
            n: tuple = dataclasses.field(default=(1, 2), metadata=dict(static=True))

        return S

    Theirs, Ours = _jax_twin(make)
    value = dict(b={"z": jnp.ones(2), "y": (jnp.zeros(1),)}, a=jnp.ones(()), m=7)
    theirs = jax.tree_util.tree_flatten_with_path(Theirs(**value))
    ours = jax.tree_util.tree_flatten_with_path(Ours(**value))
    assert [p for p, _ in theirs[0]] == [p for p, _ in ours[0]]
    assert [v for _, v in theirs[0]] == [v for _, v in ours[0]]
    # Meta fields stay in the treedef: equal metas give equal, equally hashed
    # treedefs; different metas give different ones.
    t1 = jax.tree.structure(Ours(**value))
    t2 = jax.tree.structure(Ours(**value))
    t3 = jax.tree.structure(Ours(**{**value, "m": 8}))
    assert t1 == t2 and hash(t1) == hash(t2) and t1 != t3
    assert str(t1).replace("Ours", "") == str(jax.tree.structure(Theirs(**value)))


def test_dropped_and_init_false_fields_get_defaults():
    @typecheck_guard.register_dataclass(
        data_fields=["x"], meta_fields=[], drop_fields=["d"]
    )
    @dataclasses.dataclass
    class S:
        x: jax.Array
        d: int = 5
        cache: list = dataclasses.field(init=False, default_factory=list)

    s = S(jnp.ones(2), d=9)
    back = jax.tree.map(lambda v: v + 1, s)
    assert back.d == 5 and back.cache == [] and back.cache is not s.cache


def test_replace_copy_pickle_serialization(installed):
    @struct.dataclass
    class S:
        x: jax.Array
        tag: str = struct.field(pytree_node=False, default="t")

    # pickle finds classes by qualified name in their module.
    S.__qualname__ = S.__name__ = "PickledS"
    globals()["PickledS"] = S
    s = S(jnp.arange(3.0))
    assert s.replace(tag="u").tag == "u"
    assert dataclasses.replace(s, tag="v").tag == "v"
    for clone in (copy.copy(s), copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert clone.tag == "t" and bool(jnp.all(clone.x == s.x))
    state = serialization.to_state_dict(s)
    assert set(state) == {"x"}
    restored = serialization.from_state_dict(s, {"x": jnp.zeros(3)})
    assert restored.tag == "t" and bool(jnp.all(restored.x == 0))
    treedef = jax.tree.structure(s)
    assert pickle.loads(pickle.dumps(treedef)) == treedef


def test_post_init_runs_its_own_unflatten_marked(installed):
    seen = []

    @struct.dataclass
    class S:
        x: jax.Array

        def __post_init__(self):
            seen.append(1)

    s = S(jnp.ones(2))
    assert seen == [1]
    jax.tree.map(lambda v: v, s)
    # JAX's unflatten runs __post_init__ (through __init__), as without install().
    assert seen == [1, 1]
    assert typecheck_guard._adapt._register.adapted_how(S) is not None
    assert "__post_init__" in typecheck_guard._adapt._register.marked_why(S)


def test_post_init_setting_attributes_runs_its_own_unflatten_marked(installed):
    @struct.dataclass
    class Derived:
        x: jax.Array

        def __post_init__(self):
            object.__setattr__(self, "double", self.x * 2)

    assert typecheck_guard._adapt._register.adapted_how(Derived) is not None
    assert "__post_init__" in typecheck_guard._adapt._register.marked_why(Derived)
    d = jax.tree.map(lambda v: v + 1, Derived(jnp.ones(2)))
    assert bool(jnp.all(d.double == 4))


def test_chex_dataclass_adapted_without_post_init(installed, typecheck):
    C = make_chex(typecheck)

    c = C(x=jnp.ones(3))
    assert typecheck_guard._adapt._register.adapted_how(C) == "chex.dataclass"
    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(c)[0]]
    assert paths == [(jax.tree_util.GetAttrKey("x"),)]

    @jax.jit
    def step(c):
        return c.replace(x=c.x + 1)

    c = step(c)
    typecheck.reset()
    run_cached(step, c, 20)
    assert typecheck.calls == 0


def test_chex_imported_after_install(tmp_path):
    # A fresh interpreter: install() first, chex second.
    import subprocess
    import sys

    code = (
        "import typecheck_guard, sys\n"
        "typecheck_guard.install()\n"
        "assert 'chex' not in sys.modules\n"
        "import chex, jax\n"
        "@chex.dataclass\n"
        "class C:\n"
        "    x: int\n"
        "C(x=1)\n"
        "print(typecheck_guard._adapt._register.adapted_how(C))\n"
        "typecheck_guard.uninstall()\n"
        "from chex._src import dataclass as d\n"
        "print(d.register_dataclass_type_with_jax_tree_util.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["chex.dataclass", "chex._src.dataclass"]


def _registration_functions():
    import chex._src.dataclass as chex_dataclass
    from jax._src import tree_util as src

    return {
        f"jax._src.tree_util.{name}": getattr(src, name)
        for name in (
            "register_pytree_node",
            "_register_pytree_node",
            "register_dataclass",
            "_register_dataclass",
        )
        if hasattr(src, name)
    } | {
        "jax.tree_util.register_pytree_node": jax.tree_util.register_pytree_node,
        "jax.tree_util.register_dataclass": jax.tree_util.register_dataclass,
        "chex": chex_dataclass.register_dataclass_type_with_jax_tree_util,
    }


def test_install_is_idempotent_and_uninstall_restores():
    before = _registration_functions()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
        patched = _registration_functions()
        typecheck_guard.install()
    assert _registration_functions() == patched
    # The funnels every registration goes through: `register_pytree_node` and
    # `register_dataclass` up to jax 0.10, their private twins from jax 0.11 on.
    changed = {name for name in before if patched[name] is not before[name]}
    assert "chex" in changed and len(changed) >= 3, changed
    assert typecheck_guard.installed()
    typecheck_guard.uninstall()
    assert _registration_functions() == before
    assert not typecheck_guard.installed()
    typecheck_guard.uninstall()  # a second uninstall is a no-op


def test_classes_before_install_are_listed(typecheck):
    Node = _seed_node(typecheck)
    # Earlier tests leave classes in JAX's registry too; the message names five.
    with pytest.warns(typecheck_guard.UnadaptedClassesWarning, match="unflatten_safe"):
        typecheck_guard.install()
    records = [r for r in typecheck_guard.unadapted() if r.cls is Node]
    assert len(records) == 1
    (record,) = records
    assert record.registration == "flax.struct.dataclass"
    assert record.checked == ("__init__",)
    assert "unflatten_safe" in str(record) and "\n" not in str(record)


def test_generated_code_shows_its_source(installed):
    @struct.dataclass
    class Shown:
        x: jax.Array

    leaves, treedef = jax.tree.flatten(Shown(jnp.ones(1)))
    from jax._src.tree_util import _registry

    unflatten = _registry[Shown].from_iter
    assert unflatten.__code__.co_filename.startswith(
        "<generated_unflatten_test_generated_code_shows_its_source.<locals>.Shown_"
    )
    assert "d['x']" in unflatten.__source__


def test_non_dataclass_runs_its_own_unflatten_marked(installed):
    class Derived:
        def __init__(self, a, b):
            self.a = a
            self.b = b
            self.total = a + b

    jax.tree_util.register_dataclass(Derived, data_fields=["a", "b"], meta_fields=[])
    assert typecheck_guard._adapt._register.adapted_how(Derived) is not None
    assert "not a dataclass" in typecheck_guard._adapt._register.marked_why(Derived)
    d = jax.tree.map(lambda v: v * 2, Derived(jnp.ones(()), jnp.ones(())))
    assert float(d.total) == 4.0


def test_post_init_setting_registered_fields_runs_its_own_unflatten_marked(installed):
    @dataclasses.dataclass
    class Normalised:
        x: jax.Array

        def __post_init__(self):
            self.x = jnp.asarray(self.x)

    jax.tree_util.register_dataclass(Normalised)
    assert typecheck_guard._adapt._register.adapted_how(Normalised) is not None
    # JAX's unflatten converts again: a list of leaves comes back as an array.
    assert isinstance(jax.tree.map(lambda v: v, Normalised(jnp.ones(2))).x, jax.Array)


def test_flax_imported_after_install():
    import subprocess
    import sys

    code = (
        "import typecheck_guard, sys\n"
        "typecheck_guard.install()\n"
        "assert 'flax' not in sys.modules\n"
        "from flax import struct\n"
        "from flax.training import train_state\n"
        "@struct.dataclass\n"
        "class S:\n"
        "    x: int\n"
        "class T(train_state.TrainState):\n"
        "    extra: int = 0\n"
        "print(typecheck_guard._adapt._register.adapted_how(S), typecheck_guard._adapt._register.adapted_how(T))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["flax.struct.dataclass", "flax.struct.dataclass"]


def test_seed_000_verbatim(installed, typecheck):
    # The repro from the jaxtyping issue (seed 000), with its return annotation
    # corrected (`-> Node`; current jaxtyping rejects the original `-> Array`).
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Node:
        x: list[Int[ArrayLike, ""]]
        y: list[str | int | float] = struct.field(pytree_node=False)

    @jax.jit
    @jaxtyped(typechecker=typecheck)
    def f(x: Node) -> Node:
        return x

    n = 50
    x = Node(
        list(range(n)),
        list(map(str, range(n))) + list(range(n)) + list(map(float, range(n))),
    )
    out = f(x)
    typecheck.reset()
    for _ in range(20):
        out = f(x)
    assert typecheck.calls == 0
    assert [int(v) for v in out.x] == list(range(n)) and out.y == x.y
    with pytest.raises(typecheck.errors):
        Node(["a"], [])
