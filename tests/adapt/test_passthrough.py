"""What `install()` and `unflatten_safe` put in place behaves as what it replaces
(issue: exactness, third round). Each test runs one scenario twice in this process:
on a class made before `install()` (plain JAX, the oracle) and on the same class made
after it, and compares what a user can observe: outcomes, values, `vars()` order,
containers, and the checks that ran at construction. Every scenario also constructs
*after the class's first unflatten*, where most of these differences showed.

The differential generators (`tests/differential/`) run the same regions in separate
processes; these name each cause once.
"""

import copy
import dataclasses
import functools as ft
import pickle
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from helpers import older, require

# The plain half of every scenario rebuilds checked classes at dispatch, on purpose.
pytestmark = pytest.mark.allow_runtime_typechecks


def _outcome(fn: Any) -> Any:
    try:
        return ("ok", fn())
    except Exception as e:  # the type is the outcome; messages name addresses
        return ("raised", type(e).__name__)


def _both(factory: Any, scenario: Any) -> tuple[Any, Any]:
    """`scenario(cls)` on `factory()` made plain, then made under `install()`."""
    plain = scenario(factory())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    try:
        ours = scenario(factory())
    finally:
        typecheck_guard.uninstall()
    return plain, ours


def _one_level(name: str) -> Any:
    import jax._src.tree_util

    return getattr(jax.tree_util, name, None) or getattr(jax._src.tree_util, name, None)


def _rebuild(obj: Any) -> Any:
    """What a jitted step returning `obj` gives back (an unflatten), twice."""
    step = jax.jit(lambda o: o)
    return step(step(obj))


# --- call forms: what the guard receives is what the method receives --------------


def test_omitted_defaults_stay_omitted(typecheck):
    # beartype and typeguard check only what is passed: a default that doesn't fit
    # its annotation is never checked, with or without us, before or after the
    # class's first unflatten.
    def factory():
        @jaxtyped(typechecker=typecheck)
        @struct.dataclass
        class S:
            x: Float[Array, " n"]
            b: Float[Array, " n"] = None  # pyright: ignore[reportAssignmentType]
            scale: float = struct.field(pytree_node=False, default=1)

        return S

    def scenario(S):
        # A rebuild passes every field, so the first object has valid ones.
        typecheck.reset()
        s = S(jnp.ones(3), jnp.ones(3), 2.0)
        first = typecheck.calls
        s = _rebuild(s)
        typecheck.reset()
        again = [
            _outcome(lambda: S(jnp.ones(3)).scale),
            _outcome(lambda: S(x=jnp.ones(3), scale=2.0).scale),
            _outcome(lambda: S(jnp.ones(3), jnp.ones(3)).b.shape),
            _outcome(lambda: S(jnp.ones(3), jnp.ones(4))),
        ]
        return first, typecheck.calls, again, s.b.tolist(), s.scale

    plain, ours = _both(factory, scenario)
    assert ours == plain
    assert plain[2][3][0] == "raised"
    if not older("jaxtyping", "0.3.7"):
        # Older jaxtyping checks a dataclass's fields after `__init__`, defaults
        # included: there the omitted ones raise, with or without us.
        assert plain[2][:3] == [("ok", 1), ("ok", 2.0), ("ok", (3,))]


# Every local name a guard or generated function of ours has used, and Python's
# own names a careless one would shadow.
COLLIDING = (
    "self",
    "type",
    "mark",
    "building",
    "state",
    "args",
    "kwargs",
    "where",
    "frame",
    "plan",
    "kind",
    "cls",
    "node",
    "meta",
    "data",
    "aux",
    "children",
    "_tg_marks",
)


@pytest.mark.parametrize("name", COLLIDING)
def test_field_names_that_a_guard_might_use(typecheck, name):
    if name == "self":
        # Older jaxtyping's dataclass `__init__` takes `self` by name.
        require("jaxtyping", "0.3.7", "a dataclass field named 'self'")

    def factory():
        namespace: dict[str, Any] = {}
        exec(
            textwrap.dedent(
                f"""
                class S:
                    x: Float[Array, " n"]
                    {name}: int = struct.field(pytree_node=False, default=7)
                """
            ),
            {"Float": Float, "Array": Array, "struct": struct},
            namespace,
        )
        return jaxtyped(typechecker=typecheck)(struct.dataclass(namespace["S"]))

    def scenario(S):
        s = S(jnp.ones(2), **{name: 3})
        s = _rebuild(s)
        t = S(jnp.ones(2), **{name: 5})
        u = S(jnp.ones(2))
        return [
            (type(o).__name__, sorted(vars(o)), getattr(o, name)) for o in (s, t, u)
        ], _outcome(lambda: S(jnp.ones((2, 2)), **{name: 1}))

    plain, ours = _both(factory, scenario)
    assert ours == plain
    assert [v for _, _, v in plain[0]] == [3, 5, 7]


# A check install() can't skip: it warns (tests/adapt/test_unskippable.py).
@pytest.mark.filterwarnings("ignore::typecheck_guard.UnadaptedClassesWarning")
def test_a_wrapper_whose_wrapped_signature_differs(typecheck):
    # `functools.wraps` makes `inspect.signature` report the wrapped function's
    # parameters, but the wrapper takes `*args, **kwargs` and hands them on: a
    # guard that read the signature would re-bind the call.
    calls = []

    def logging(fn):
        @ft.wraps(fn)
        def logged(*args, **kwargs):
            calls.append((len(args), sorted(kwargs)))
            return fn(*args, **kwargs)

        return logged

    def factory():
        class Node:
            @logging
            @jaxtyped(typechecker=typecheck)
            def __init__(self, x: Float[Array, " n"], *, scale: float = 1.0):
                self.x = x * scale

        jax.tree_util.register_pytree_node(
            Node, lambda n: ((n.x,), None), lambda aux, ch: Node(ch[0], scale=1.0)
        )
        return Node

    def scenario(Node):
        calls.clear()
        n = _rebuild(Node(jnp.ones(2)))
        Node(jnp.ones(2), scale=2.0)
        return list(calls), n.x.tolist()

    plain, ours = _both(factory, scenario)
    assert ours == plain


def test_chex_mappable_dataclass_with_a_working_post_init(typecheck):
    import chex

    def factory():
        @chex.dataclass
        class C:
            x: Float[Array, " n"]
            total: Any = None

            @jaxtyped(typechecker=typecheck)
            def __post_init__(self) -> None:
                object.__setattr__(self, "total", self.x.sum())

        return C

    def scenario(C):
        c = C(x=jnp.ones(3))
        c = _rebuild(c)
        d = c.replace(x=jnp.ones(3) * 2)
        e = dataclasses.replace(c, x=jnp.ones(3) * 3)
        f = C(x=jnp.ones(3) * 4)
        return [float(o.total) for o in (c, d, e, f)], sorted(c.keys())

    plain, ours = _both(factory, scenario)
    assert ours == plain


# --- nested constructions: only the unflatten's own construction is unchecked ------


def test_a_construction_in_an_unchecked_post_init_of_a_new_built_node(typecheck):
    # A custom node built with `object.__new__` (as JAX's docs advise) calls no
    # guarded hook; its unchecked `__post_init__` constructs another instance of
    # the same class. That is a construction, checked as without us.
    def factory():
        class Node:
            @jaxtyped(typechecker=typecheck)
            def __init__(self, x: Float[Array, " n"]):
                self.x = x
                self.twin = None

            def __post_init__(self):
                self.twin = Node(self.x[:1])

        def unflatten(aux, children):
            obj = object.__new__(Node)
            obj.x = children[0]
            obj.__post_init__()
            return obj

        jax.tree_util.register_pytree_node(Node, lambda n: ((n.x,), None), unflatten)
        return Node

    def scenario(Node):
        n = Node(jnp.ones(3))
        typecheck.reset()
        out = jax.tree.map(lambda v: v, n)
        checked = typecheck.calls
        typecheck.reset()
        out = jax.tree.map(lambda v: v, out)
        return checked, typecheck.calls, out.twin.x.shape

    plain, ours = _both(factory, scenario)
    assert ours == plain
    assert plain[0] == 1  # the twin's construction


def test_a_construction_in_a_chex_post_init_is_checked(typecheck):
    import chex

    def factory():
        @chex.dataclass
        class C:
            x: Any
            twin: Any = None

            @jaxtyped(typechecker=typecheck)
            def __init__(self, x: Float[Array, " n"], twin: Any = None):
                object.__setattr__(self, "x", x)
                object.__setattr__(self, "twin", twin)

            def __post_init__(self):
                if self.twin is None and self.x.ndim == 1 and self.x.shape[0] > 1:
                    object.__setattr__(self, "twin", C(x=self.x[:1]))

        return C

    def scenario(C):
        c = C(x=jnp.ones(3))
        typecheck.reset()
        out = jax.tree.map(lambda v: v, c)
        return typecheck.calls, jax.tree.structure(out) == jax.tree.structure(c)

    plain, ours = _both(factory, scenario)
    assert ours == plain


def test_a_construction_in_a_custom_new_is_checked(typecheck):
    def factory():
        class Node:
            def __new__(cls, *args, **kwargs):
                obj = object.__new__(cls)
                if args and getattr(args[0], "ndim", 0) == 1:
                    obj.scratch = Node(args[0][None])  # another Node, nested
                return obj

            @jaxtyped(typechecker=typecheck)
            def __init__(self, x: Float[Array, "..."]):
                self.x = x

        jax.tree_util.register_pytree_node(
            Node, lambda n: ((n.x,), None), lambda aux, ch: Node(*ch)
        )
        return Node

    def scenario(Node):
        n = Node(jnp.ones(3))
        typecheck.reset()
        jax.tree.map(lambda v: v, n)
        return typecheck.calls

    plain, ours = _both(factory, scenario)
    assert ours == plain - 1  # only the rebuilt node itself is not checked


def test_an_unflatten_delegating_to_a_helper_is_covered(typecheck):
    def factory():
        class Node:
            @jaxtyped(typechecker=typecheck)
            def __init__(self, x: Float[Array, " n"]):
                self.x = x

        def build(children, cls):
            return cls(*children)

        jax.tree_util.register_pytree_node(
            Node, lambda n: ((n.x,), None), lambda aux, ch: build(ch, Node)
        )
        return Node

    def scenario(Node):
        n = Node(jnp.ones(3))
        typecheck.reset()
        jax.tree.map(lambda v: v, n)
        return typecheck.calls

    plain, ours = _both(factory, scenario)
    assert plain == 1 and ours == 0


# --- containers and order: the generated dataclass node is JAX's ---------------------


def test_keywords_children_and_vars_as_jax_gives_them():
    def factory():
        @dataclasses.dataclass
        class P:
            a: Any
            b: Any
            m: int = dataclasses.field(metadata=dict(static=True), default=1)

            def __init__(self, **kwargs):  # writes in the order it receives
                for k, v in kwargs.items():
                    object.__setattr__(self, k, v)

        return jax.tree_util.register_dataclass(P)

    def scenario(P):
        p = P(a=jnp.ones(1), b=jnp.zeros(1), m=3)
        q = _rebuild(p)
        # Public from jax 0.7, in jax._src.tree_util before (with keys from 0.5).
        children, aux = _one_level("flatten_one_level")(q)
        with_keys = _one_level("flatten_one_level_with_keys")
        keyed = with_keys(q)[0] if with_keys is not None else []
        return (
            list(vars(q)),
            type(children).__name__,
            aux,
            [str(k) for k, _ in keyed],
            type(keyed).__name__,
            jax.tree_util.keystr(jax.tree_util.tree_flatten_with_path(q)[0][0][0]),
        )

    plain, ours = _both(factory, scenario)
    assert ours == plain


# --- serialization: what holds a guard pickles, cloudpickles and copies -----------

# beartype directly on `__init__`: a class under `@jaxtyped` can't be cloudpickled
# with or without us (jaxtyping's wrapper holds weak references).
_CLOUDPICKLE_MAIN = """
import sys
import cloudpickle, jax, jax.numpy as jnp
from beartype import beartype
if sys.argv[1] == "install":
    import typecheck_guard
    typecheck_guard.install()

class Node:
    @beartype
    def __init__(self, x: object, scale: float = 1.0):
        self.x = x
        self.scale = scale

    def __post_init__(self):
        pass

jax.tree_util.register_pytree_node(
    Node, lambda n: ((n.x,), n.scale), lambda scale, ch: Node(ch[0], scale)
)
n = jax.jit(lambda n: n)(Node(jnp.ones(2), 2.0))
blob = cloudpickle.dumps((Node, n, Node.__init__))
Node2, n2, init = cloudpickle.loads(blob)
out = [type(n2).__name__, n2.x.tolist(), n2.scale, Node2(jnp.ones(2)).x.tolist()]
try:
    Node2(jnp.ones(2), "not a float")
    out.append("not checked")
except Exception as e:
    out.append(type(e).__name__)
sys.stdout.buffer.write(blob)
print(out, file=sys.stderr)
"""

_CLOUDPICKLE_LOAD = """
import sys
import cloudpickle, jax.numpy as jnp
Node, n, init = cloudpickle.loads(sys.stdin.buffer.read())
out = [n.x.tolist(), n.scale, Node(jnp.ones(2)).x.tolist()]
try:
    Node(jnp.ones(2), "not a float")
    out.append("not checked")
except Exception as e:
    out.append(type(e).__name__)
print(out)
"""


def test_a_main_class_cloudpickles_by_value():
    pytest.importorskip("cloudpickle")

    def run(mode):
        made = subprocess.run(
            [sys.executable, "-c", _CLOUDPICKLE_MAIN, mode],
            capture_output=True,
            timeout=300,
        )
        assert made.returncode == 0, made.stderr.decode()[-2000:]
        # In a fresh process without typecheck_guard installed.
        loaded = subprocess.run(
            [sys.executable, "-c", _CLOUDPICKLE_LOAD],
            input=made.stdout,
            capture_output=True,
            timeout=300,
        )
        assert loaded.returncode == 0, loaded.stderr.decode()[-2000:]
        return made.stderr.decode().strip().splitlines()[-1], loaded.stdout.decode()

    assert run("install") == run("plain")


_MODULE = """
import jax
from flax import struct
from jaxtyping import Array, Float, jaxtyped
from beartype import beartype

@jaxtyped(typechecker=beartype)
@struct.dataclass
class State:
    x: Float[Array, " n"]

    def __post_init__(self):  # work: install() rebuilds it through its __init__
        object.__setattr__(self, "n", self.x.shape[0])
"""


def test_guards_pickle_by_reference_and_copy_as_functions(
    installed, tmp_path, monkeypatch
):
    import importlib
    import uuid

    name = f"passthrough_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    State = importlib.import_module(name).State
    _rebuild(State(jnp.ones(2)))
    from typecheck_guard._unflatten._guards import is_guard

    assert is_guard(State.__init__)
    assert copy.copy(State.__init__) is State.__init__
    assert copy.deepcopy(State.__init__) is State.__init__
    assert pickle.loads(pickle.dumps(State.__init__)) is State.__init__
    assert pickle.loads(pickle.dumps(State)) is State


# --- the unflatten_safe(jitted) proxy is a jitted function --------------------------


def _double(x):
    return 2 * x


# JAX's own `jax.jit` (the pytest plugin's runtime guard watches the public one).
_jit = getattr(jax.jit, "__wrapped__", jax.jit)


def test_the_jitted_proxy_binds_and_reads_as_the_jitted_function():
    plain = _jit(lambda self, x: x + self.k, static_argnums=0)
    guarded = typecheck_guard.unflatten_safe(
        _jit(lambda self, x: x + self.k, static_argnums=0)
    )

    class Model:
        k = 1.0
        p = plain
        g = guarded

    m = Model()
    for bound, jitted in ((m.p, plain), (m.g, guarded)):
        assert type(bound) is type(m.p)
        assert bound.__self__ is m and bound.__func__ is jitted
        assert bound.__name__ == "<lambda>"
        assert float(bound(1.0)) == 2.0
        assert callable(bound.lower) and callable(bound.clear_cache)
        bound.clear_cache()
    assert Model.g is guarded
    float(guarded(m, 1.0)), float(plain(m, 1.0))
    assert guarded._cache_size() == plain._cache_size() == 1
    assert guarded.__wrapped__ is guarded.__wrapped__ and callable(guarded.__wrapped__)
    assert guarded.__name__ == plain.__name__ == "<lambda>"
    assert guarded.__doc__ == plain.__doc__


def test_the_jitted_proxy_copies_and_pickles_as_the_jitted_function():
    jitted = _jit(_double)
    guarded = typecheck_guard.unflatten_safe(jitted)
    for clone in (copy.copy(guarded), copy.deepcopy(guarded)):
        assert float(clone(jnp.float32(2))) == 4.0
        assert repr(clone) == repr(clone._typecheck_guard_jitted)
    deep = copy.deepcopy({"step": guarded, "n": [1]})
    assert float(deep["step"](jnp.float32(3))) == 6.0
    assert guarded.__wrapped__ is _double is jitted.__wrapped__

    def roundtrip(obj):
        return float(pickle.loads(pickle.dumps(obj))(jnp.float32(1)))

    # Whether a jitted function pickles depends on the JAX release: the same both
    # ways.
    assert _outcome(lambda: roundtrip(guarded)) == _outcome(lambda: roundtrip(jitted))


# --- memo effects: a skipped check's dimensions are still bound -----------------------


# A check install() can't skip: it warns (tests/adapt/test_unskippable.py).
@pytest.mark.filterwarnings("ignore::typecheck_guard.UnadaptedClassesWarning")
def test_a_rebuild_inside_a_jaxtyped_function_binds_its_dimensions(typecheck):
    # `typecheck` directly on the class (no `@jaxtyped` of its own) checks against
    # the memo of the enclosing `@jaxtyped` function: plain JAX's rebuild binds `n`
    # there, and a later construction with another `n` fails.
    def factory():
        @struct.dataclass
        class S:
            x: Float[Array, " n"]

        S.__init__ = typecheck(S.__init__)
        return S

    def scenario(S):
        step = jax.jit(lambda s: s)
        s = S(jnp.ones(3))

        @jaxtyped(typechecker=typecheck)
        def body(s):
            out = step(s)  # a rebuild of an S with n = 3
            return S(jnp.ones(4)), out

        return _outcome(lambda: body(s)[0].x.shape), _outcome(lambda: body(s)[0])

    plain, ours = _both(factory, scenario)
    assert ours == plain
    assert plain[0][0] == "raised"


# --- code on top of an unflatten's stack that the unflatten did not call -------------


def test_code_that_interrupts_an_unflatten_is_checked(typecheck):
    # A signal handler, a finalizer, a `gc` callback, a profile or audit hook runs
    # on top of whatever frame it interrupts: here, a `gc` callback fired while the
    # class's own unflatten runs. Its constructions are the user's, checked as
    # without us; the rebuild itself is not.
    import gc

    def factory():
        class Node:
            @jaxtyped(typechecker=typecheck)
            def __init__(self, x: Float[Array, " n"]):
                self.x = x

        built = []

        def on_gc(phase, info):
            if phase == "start" and built == []:
                built.append(_outcome(lambda: Node("not an array")))  # type: ignore[arg-type]

        def unflatten(aux, children):
            gc.collect()  # fires the callback, on top of this frame
            return Node(*children)

        jax.tree_util.register_pytree_node(Node, lambda n: ((n.x,), None), unflatten)
        Node.built, Node.on_gc = built, on_gc  # type: ignore[attr-defined]
        return Node

    def scenario(Node):
        n = Node(jnp.ones(2))
        gc.callbacks.append(Node.on_gc)
        try:
            out = jax.tree.map(lambda v: v, n)
        finally:
            gc.callbacks.remove(Node.on_gc)
        return Node.built, out.x.shape

    plain, ours = _both(factory, scenario)
    assert ours == plain == ([("raised", "TypeCheckError")], (2,))


def test_a_metaclass_call_is_a_constructor_of_its_own(typecheck):
    # A metaclass's `__call__` runs between the unflatten and `__init__`, and may
    # build other instances there: every construction it makes is checked, and
    # `unadapted()` says so.
    def factory():
        spare = []

        class Meta(type):
            def __call__(cls, *args, **kwargs):
                obj = super().__call__(*args, **kwargs)
                if not spare:
                    spare.append(_outcome(lambda: type.__call__(cls, "spare", "s")))
                return obj

        @jaxtyped(typechecker=typecheck)
        @struct.dataclass
        class M(metaclass=Meta):
            x: Float[Array, " n"]
            tag: str = struct.field(pytree_node=False)

        M.spare = spare  # type: ignore[attr-defined]
        return M

    def scenario(M):
        m = M(jnp.ones(2), "t")
        M.spare.clear()
        out = jax.tree.map(lambda v: v, m)
        listed = [r.reason for r in typecheck_guard.unadapted() if r.cls is M]
        return M.spare, out.tag, listed

    plain, ours = _both(factory, scenario)
    assert plain[:2] == ours[:2] == ([("raised", "TypeCheckError")], "t")
    [reason] = ours[2]
    assert reason.startswith("its metaclass ")
    assert ".Meta defines __call__, which runs between JAX's unflatten" in reason


def test_a_subclass_unflatten_through_super_is_the_rebuild(typecheck):
    # The code an unflatten names includes what it reaches through `super()`: a
    # registered subclass whose `tree_unflatten` hands on to its base's is rebuilt
    # without its check; a construction elsewhere is checked.
    def factory():
        class Base:
            @jaxtyped(typechecker=typecheck)
            def __init__(self, x: Float[Array, " n"]):
                self.x = x

            def tree_flatten(self):
                return (self.x,), None

            @classmethod
            def tree_unflatten(cls, aux, children):
                return cls(*children)

        @jax.tree_util.register_pytree_node_class
        class Sub(Base):
            @classmethod
            def tree_unflatten(cls, aux, children):
                return super().tree_unflatten(aux, children)

        return Sub

    def scenario(Sub):
        s = Sub(jnp.ones(2))
        typecheck.reset()
        jax.tree.map(lambda v: v, s)
        rebuilt = typecheck.calls
        return rebuilt, _outcome(lambda: Sub("not an array"))  # type: ignore[arg-type]

    plain, ours = _both(factory, scenario)
    assert plain == (1, ("raised", "TypeCheckError"))
    assert ours == (0, ("raised", "TypeCheckError"))
