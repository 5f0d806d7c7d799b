"""runtime_checks(level): which checks it sees during a jitted call, the levels,
and how the setting nests and stays per thread / per task.

Every test here that makes a check run at dispatch time on purpose carries
`allow_runtime_typechecks`: the suite itself runs under the plugin's strict mode.
"""

import asyncio
import dataclasses
import functools as ft
import json
import logging
import os
import pickle
import subprocess
import sys
import threading
import types
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from beartype import beartype
from flax import nnx, struct
from jax.experimental import io_callback
from jaxtyping import Array, ArrayLike, Float, PyTree, jaxtyped

import typecheck_guard
from helpers import make_chex, passthrough
from typecheck_guard._guard import _detect, _jitwrap, _watch
from typecheck_guard._guard._watch import _level

allow_checks = pytest.mark.allow_runtime_typechecks


def _seed_node(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Node:
        params: PyTree[Float[Array, "..."]]
        step: Float[Array, ""]

    return Node


def _node_value(Node):
    return Node({"a": jnp.ones(2)}, jnp.zeros(()))


def _cached(step, value):
    """`step` traced and compiled: the next call with `value` is a cache hit."""
    return step(step(value))


@allow_checks
def test_disallow_names_class_checker_jitted_and_call_site(typecheck):
    Node = _seed_node(typecheck)

    def step(s):
        return s.replace(step=s.step + 1)

    step = jax.jit(step)
    state = _cached(step, _node_value(Node))
    with typecheck_guard.runtime_checks("disallow"):
        with pytest.raises(typecheck_guard.RuntimeTypecheckError) as info:
            step(state)  # the call site
    error = info.value
    assert error.checked.endswith("_seed_node.<locals>.Node.__init__")
    assert error.checker == f"jaxtyping with {typecheck.name}"
    assert error.jitted.startswith("jax.jit(") and error.jitted.endswith(".step)")
    assert error.call_site.endswith(
        f"test_runtime.py:{_line_of('step(state)  # the call')}"
    )
    text = str(error)
    for part in ("Node.__init__", typecheck.name, "jax.jit(", "test_runtime.py:"):
        assert part in text
    assert "typecheck_guard.install()" in text and "unflatten_safe" in text
    assert 'runtime_checks("disallow")' in text


def _add(config, s):
    return s.replace(step=s.step + config)


@allow_checks
def test_disallow_fix_wraps_the_users_own_jitted_object(typecheck):
    Node = _seed_node(typecheck)
    step = jax.jit(ft.partial(_add, 1.0))  # the user's object
    state = _cached(step, _node_value(Node))
    with typecheck_guard.runtime_checks("disallow"):
        with pytest.raises(typecheck_guard.RuntimeTypecheckError) as info:
            step(state)
    line = _line_of("step = jax.jit(ft.partial(_add, 1.0))  # the user's object")
    assert (
        "or wrap the jitted function:\n\n"
        "    step = typecheck_guard.unflatten_safe(jax.jit(ft.partial(_add, 1.0)))  "
        f"(tests/guard/test_runtime.py:{line})\n"
    ) in str(info.value)
    assert "_add = typecheck_guard" not in str(info.value)


def _line_of(snippet: str) -> int:
    with open(__file__) as f:
        for number, line in enumerate(f, 1):
            if snippet in line and "_line_of" not in line:
                return number
    raise AssertionError(snippet)


# The wrapper's name as its code says it (Python 3.10's code has no qualname).
PASSING = "passthrough.<locals>.passing" if sys.version_info >= (3, 11) else "passing"


@allow_checks
def test_a_check_no_fix_of_ours_can_skip_says_so(typecheck):
    # A decorator that is not a checker above the check: neither install() nor
    # unflatten_safe can skip it, and the error says what can.
    @jax.tree_util.register_pytree_node_class
    class Logged:
        @passthrough
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, " n"]):
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    step = jax.jit(lambda s: s)
    state = _cached(step, Logged(jnp.ones(2)))
    with typecheck_guard.runtime_checks("disallow"):
        with pytest.raises(typecheck_guard.RuntimeTypecheckError) as info:
            step(state)
    name = "test_runtime.test_a_check_no_fix_of_ours_can_skip_says_so.<locals>"
    assert (
        f"JAX rebuilds {name}.Logged through its constructor when it unflattens the "
        f"inputs or outputs of jax.jit({name}.<lambda>), and its check runs on every "
        f"call: {name[len('test_runtime.') :]}.Logged.__init__ has a decorator that is "
        f"not a typechecker (test_runtime.{PASSING}) above its "
        "check, and the check can't "
        "be skipped without skipping that decorator too. Neither install() nor "
        "unflatten_safe can skip it. Apply that decorator below the checker, so that "
        "the checker is the outermost layer (`@jaxtyped(typechecker=...)` above it).\n"
    ) in str(info.value)
    assert "Call typecheck_guard.install()" not in str(info.value)


@allow_checks
def test_allow_is_the_default_and_lets_checks_run(typecheck):
    Node = _seed_node(typecheck)
    step = jax.jit(lambda s: s)
    state = _cached(step, _node_value(Node))
    assert _level.get() == "allow"
    typecheck.reset()
    with typecheck_guard.runtime_checks("allow"):
        step(state)
    assert typecheck.calls > 0


@allow_checks
def test_log_logs_each_site_once(typecheck, caplog):
    Node = _seed_node(typecheck)
    step = jax.jit(lambda s: s)
    state = _cached(step, _node_value(Node))
    caplog.set_level(logging.WARNING, logger="typecheck_guard")
    with typecheck_guard.runtime_checks("log"):
        for _ in range(5):
            state = step(state)
    records = [r for r in caplog.records if r.name == "typecheck_guard"]
    assert len(records) == 1
    assert "Node.__init__" in records[0].getMessage()
    assert "unflatten_safe" in records[0].getMessage()


def test_disable_jit_is_not_flagged(typecheck):
    @jax.jit
    @jaxtyped(typechecker=typecheck)
    def double(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x * 2

    with typecheck_guard.runtime_checks("disallow"), jax.disable_jit():
        double(jnp.ones(3))  # runs eagerly, checks and all: not a dispatch check


@allow_checks
def test_the_first_call_is_watched_outside_tracing(typecheck):
    # A test that calls a jitted function once is enough: the unflatten of the
    # first call's outputs runs outside tracing, as it will on every call.
    Node = _seed_node(typecheck)
    step = jax.jit(lambda s: s.replace(step=s.step + 1))
    with typecheck_guard.runtime_checks("disallow"):
        with pytest.raises(
            typecheck_guard.RuntimeTypecheckError, match="Node.__init__"
        ):
            step(_node_value(Node))


def test_checks_while_tracing_are_never_flagged(typecheck):
    @jax.jit
    @jaxtyped(typechecker=typecheck)
    def double(x: Float[Array, " n"]) -> Float[Array, " n"]:
        return x * 2

    with typecheck_guard.runtime_checks("disallow"):
        typecheck.reset()
        double(jnp.ones(3))
        first = typecheck.calls
        double(jnp.ones(4))  # a new shape: traced, checked again
        assert first > 0 and typecheck.calls == 2 * first
        double(jnp.ones(4))  # cached: nothing runs
        assert typecheck.calls == 2 * first


def test_installed_classes_and_equinox_modules_pass(installed, typecheck):
    Node = _seed_node(typecheck)

    class Module(eqx.Module):
        w: Float[Array, " n"]

        @jaxtyped(typechecker=typecheck)
        def __init__(self, w: Float[Array, " n"]):
            self.w = w

    with typecheck_guard.runtime_checks("disallow"):
        for transform in (jax.jit, eqx.filter_jit):
            for value in (_node_value(Node), Module(jnp.ones(3))):
                step = transform(lambda s: s)
                _cached(step, value)


def test_unflatten_safe_passes(typecheck):
    Node = _seed_node(typecheck)
    state = _node_value(Node)
    guarded = typecheck_guard.unflatten_safe(jax.jit(lambda s: s))
    step = jax.jit(lambda s: s)
    with typecheck_guard.runtime_checks("disallow"):
        _cached(guarded, state)
        # The first unflatten of a signature is checked on purpose, to fill the
        # verdict cache: not a per-call check.
        with typecheck_guard.unflatten_safe():
            _cached(step, state)


@allow_checks
@pytest.mark.parametrize("level", ["allow", "log", "disallow"])
def test_watching_changes_no_check_in_an_unflatten_safe_block(typecheck, level):
    # The guard's wrapper only watches: a jitted call made in a `with
    # unflatten_safe()` block is rebuilt as without the guard (through the verdict
    # cache, which checks every signature it has no passed verdict for), not as one
    # made through `unflatten_safe(jitted)`. Here the jitted function returns a
    # state rebuilt with a leaf of the wrong shape (a tree operation in traced code,
    # which the block does not check): each cache-hit call's rebuild raises, at
    # every level of the guard.
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class State:
        w: Float[Array, "3"]

    step = jax.jit(lambda s: jax.tree.unflatten(jax.tree.structure(s), [jnp.ones(4)]))
    state = State(jnp.ones(3))
    with typecheck_guard.unflatten_safe():
        try:
            step(state)  # traced and compiled
        except typecheck.errors:
            pass
    outcomes = []
    for _ in range(2):
        try:
            with (
                typecheck_guard.runtime_checks(level),
                typecheck_guard.unflatten_safe(),
            ):
                step(state)
            outcomes.append("ok")
        except typecheck.errors:
            outcomes.append("raised")
    assert outcomes == ["raised", "raised"]


@allow_checks
def test_a_verdicts_first_check_in_a_cached_call_is_not_flagged(typecheck):
    # A class whose unflatten builds it through a helper of its own is rebuilt by
    # row 7 of `unflatten_safe`: the first signature it sees is checked on purpose
    # to fill the verdict cache, also when that happens in a cache-hit call (the
    # jitted function was compiled before it was wrapped), and the next call is a
    # hit: neither is a check at dispatch time.
    class Node:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, " n"]):
            self.x = x

    def make(children):
        return Node(*children)

    jax.tree_util.register_pytree_node(
        Node, lambda n: ((n.x,), None), lambda aux, children: make(children)
    )
    plain = jax.jit(lambda s: s)
    state = _cached(plain, Node(jnp.ones(3)))
    wrapped = typecheck_guard.unflatten_safe(plain)
    typecheck.reset()
    with typecheck_guard.runtime_checks("disallow"):
        wrapped(state)  # the verdict's first check
        assert typecheck.calls > 0
        typecheck.reset()
        wrapped(state)  # a hit
    assert typecheck.calls == 0


@allow_checks
def test_guarded_class_outside_unflatten_safe_is_flagged(typecheck):
    Node = _seed_node(typecheck)
    state = _node_value(Node)
    with typecheck_guard.unflatten_safe():  # guards Node.__init__ from now on
        pass
    step = jax.jit(lambda s: s)
    state = _cached(step, state)
    with typecheck_guard.runtime_checks("disallow"):
        with pytest.raises(
            typecheck_guard.RuntimeTypecheckError, match="Node.__init__"
        ):
            step(state)


def _custom(typecheck):
    @jax.tree_util.register_pytree_node_class
    class Custom:
        # Only the aux data is annotated: Equinox and NNX rebuild the node with
        # placeholders (booleans, None) in place of the arrays.
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x, scale: float):
            self.x = x
            self.scale = scale

        def tree_flatten(self):
            return (self.x,), self.scale

        @classmethod
        def tree_unflatten(cls, scale, children):
            return cls(*children, scale)

    return Custom


TRANSFORMS = {
    "jax.jit": lambda f: jax.jit(f),
    "equinox.filter_jit": lambda f: eqx.filter_jit(f),
    "flax.nnx.jit": lambda f: nnx.jit(f),
    "jax.pmap": lambda f: jax.pmap(f),
}


@allow_checks
@pytest.mark.parametrize("transform", sorted(TRANSFORMS))
@pytest.mark.parametrize("kind", ["custom", "chex"])
def test_every_transform_is_watched(transform, kind, typecheck):
    x = jnp.ones((1, 3))
    if kind == "custom":
        value, name = _custom(typecheck)(x, 0.5), "Custom.__init__"
    else:
        value, name = make_chex(typecheck)(x=x), "C.__post_init__"
    step = TRANSFORMS[transform](lambda s: s)
    state = _cached(step, value)
    with typecheck_guard.runtime_checks("disallow"):
        with pytest.raises(typecheck_guard.RuntimeTypecheckError) as info:
            step(state)
    assert info.value.checked.endswith(name)
    assert info.value.jitted.startswith(transform + "(")
    assert info.value.call_site.rsplit(":", 1)[0].endswith("test_runtime.py")


def _node_with_checked_unflatten(unflatten_check):
    @jax.tree_util.register_pytree_node_class
    class Checked:
        def __init__(self, x):
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            unflatten_check(children[0])
            obj = object.__new__(cls)
            obj.x = children[0]
            return obj

    return Checked


@allow_checks
def test_checked_functions_and_pytree_isinstance_in_an_unflatten():
    import typeguard

    def by_beartype():
        @beartype
        def leaf_ok(x: jax.Array) -> None:
            pass

        return leaf_ok, "leaf_ok", "beartype"

    def by_typeguard():
        @typeguard.typechecked
        def leaf_ok(x: jax.Array) -> None:
            pass

        return leaf_ok, "leaf_ok", "typeguard"

    def by_isinstance():
        def leaf_ok(x):
            assert isinstance(x, PyTree[Float[Array, "..."]])

        return leaf_ok, "isinstance(..., PyTree[", "jaxtyping"

    for make in (by_beartype, by_typeguard, by_isinstance):
        check, checked, checker = make()
        Checked = _node_with_checked_unflatten(check)
        step = jax.jit(lambda s: s)
        state = _cached(step, Checked(jnp.ones(2)))
        with typecheck_guard.runtime_checks("disallow"):
            with pytest.raises(typecheck_guard.RuntimeTypecheckError) as info:
                step(state)
        assert checked in info.value.checked
        assert info.value.checker == checker
        assert "flatten or unflatten" in str(info.value)


@allow_checks
def test_pytree_checks_answered_by_the_cache_are_flagged_too():
    annotation = PyTree[Float[Array, "..."]]  # one class: the cache is keyed by it

    def leaf_ok(x):
        assert isinstance(x, annotation)

    Checked = _node_with_checked_unflatten(leaf_ok)
    with typecheck_guard.cache_pytree_checks(True):
        step = jax.jit(lambda s: s)
        state = _cached(step, Checked(jnp.ones(2)))
        hits = typecheck_guard.pytree_cache_info().hits
        with typecheck_guard.runtime_checks("disallow"):
            with pytest.raises(typecheck_guard.RuntimeTypecheckError, match="PyTree"):
                step(state)
        assert typecheck_guard.pytree_cache_info().hits > hits


@allow_checks
def test_one_error_counts_every_check_of_the_call(typecheck):
    Custom = _custom(typecheck)
    step = jax.jit(lambda a, b, c: (a, b, c))
    state = _cached(
        lambda s: step(*s), tuple(Custom(jnp.ones(2), 0.5) for _ in range(3))
    )
    with typecheck_guard.runtime_checks("disallow"):
        with pytest.raises(typecheck_guard.RuntimeTypecheckError) as info:
            step(*state)
    ((count, seconds, first_count, first_seconds),) = info.value.sites.values()
    assert count == 3 and first_count <= 1
    assert seconds + first_seconds > 0


def test_unknown_level_is_a_clear_value_error():
    for bad in ("sometimes", "Disallow", None, 1):
        with pytest.raises(
            ValueError, match=r"unknown level.*'allow'|\"allow\""
        ) as info:
            typecheck_guard.runtime_checks(bad)  # type: ignore[arg-type]
        for level in ("allow", "log", "disallow"):
            assert f'"{level}"' in str(info.value)
    assert _level.get() == "allow"


def test_levels_nest_and_restore_on_error():
    assert _level.get() == "allow"
    with typecheck_guard.runtime_checks("log"):
        assert _level.get() == "log"
        with pytest.raises(KeyError):
            with typecheck_guard.runtime_checks("disallow") as setting:
                assert _level.get() == "disallow"
                assert repr(setting) == "typecheck_guard.runtime_checks('disallow')"
                raise KeyError
        assert _level.get() == "log"
    assert _level.get() == "allow"


def test_bare_call_sets_the_level_for_this_context():
    def body():
        typecheck_guard.runtime_checks("log")
        return _level.get()

    import contextvars

    context = contextvars.copy_context()
    assert context.run(body) == "log"
    assert context[_level] == "log"
    assert _level.get() == "allow"


@allow_checks
def test_threads_are_isolated(typecheck):
    Node = _seed_node(typecheck)
    step = jax.jit(lambda s: s)
    state = _cached(step, _node_value(Node))
    inside, done = threading.Event(), threading.Event()
    seen = []

    def other():
        inside.wait()
        seen.append(_level.get())
        try:
            step(state)  # this thread is at "allow": no error
            seen.append("ran")
        except Exception as e:  # pragma: no cover - the failure we test against
            seen.append(e)
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with typecheck_guard.runtime_checks("disallow"):
        inside.set()
        done.wait()
        with pytest.raises(typecheck_guard.RuntimeTypecheckError):
            step(state)
    thread.join()
    assert seen == ["allow", "ran"]


def test_asyncio_tasks_are_isolated():
    async def strict():
        with typecheck_guard.runtime_checks("disallow"):
            await asyncio.sleep(0.01)
            return _level.get()

    async def plain():
        await asyncio.sleep(0.005)
        return _level.get()

    async def main():
        return await asyncio.gather(strict(), plain())

    assert asyncio.run(main()) == ["disallow", "allow"]


def test_wrapped_callables_keep_their_api():
    def add(x, n):
        return x + n

    jitted = jax.jit(add, static_argnums=1)
    assert type(jitted) is _jitwrap.Jitted
    assert jitted.__wrapped__ is add  # as JAX's own
    assert jitted.lower(1.0, 2).compile()(1.0) == 3.0
    assert jitted(1.0, 2) == 3.0

    @jax.jit(static_argnames="n")  # the decorator-factory form
    def add2(x, n):
        return x + n

    assert add2(1.0, n=2) == 3.0

    @ft.partial(jax.jit, static_argnames="n")
    def add3(x, n):
        return x + n

    assert add3(1.0, n=2) == 3.0

    class Model:
        @ft.partial(jax.jit, static_argnums=0)
        def method(self, x):
            return x * 2

        @eqx.filter_jit
        def filtered(self, x):
            return x * 3

    model = Model()
    assert model.method(1.0) == 2.0 and model.filtered(1.0) == 3.0
    # An already-jitted callable given to another transform works as before.
    assert eqx.filter_jit(jax.jit(lambda x: x + 1))(1.0) == 2.0


def _double(x, y=2.0):
    """Doubles."""
    return x * y


def _original(factory):
    """The factory as JAX (Equinox, Flax) ships it: the suite runs with the guard's
    patches on."""
    return getattr(factory, "__typecheck_guard_original__", factory)


@pytest.mark.parametrize(
    "factory",
    [jax.jit, jax.pmap, eqx.filter_jit, nnx.jit],
    ids=["jax.jit", "jax.pmap", "equinox.filter_jit", "flax.nnx.jit"],
)
def test_a_watched_jitted_callable_is_the_callable_it_wraps(factory):
    import copy
    import inspect

    import cloudpickle

    ours, plain = factory(_double), _original(factory)(_double)
    # The one thing that tells them apart (`equinox.filter_jit`'s, a pytree as
    # Equinox's wrapper is, is of a subclass).
    assert type(ours) in (_jitwrap.Jitted, _jitwrap._JittedModule)
    inner = ours._typecheck_guard_jitted
    assert type(inner) is type(plain)
    names = ("__name__", "__qualname__", "__module__", "__doc__", "__wrapped__")
    for name in (*names, "__annotations__"):
        assert getattr(ours, name) == getattr(plain, name), name
    assert ours.__wrapped__ is _double
    assert inspect.signature(ours) == inspect.signature(plain)
    assert repr(ours) == repr(inner)
    assert ours == inner and hash(ours) == hash(inner)
    assert dir(ours) == dir(inner)
    # Attributes are the callable's, set and deleted there too (or refused, as
    # Equinox's frozen wrapper refuses them).
    try:
        plain.note = "set"
    except Exception as error:
        with pytest.raises(type(error)):
            ours.note = "set"
    else:
        ours.note = "set"
        assert inner.note == "set"
        del ours.note
        assert not hasattr(inner, "note")

    # Bound as a method, as the callable binds.
    class Model:
        method = ours
        plain_method = plain

    model = Model()
    assert Model.method is ours
    bound, plain_bound = model.method, model.plain_method
    assert type(bound) is type(plain_bound)
    if isinstance(plain_bound, types.MethodType):
        assert bound.__self__ is model and bound.__func__ is ours
    x = jnp.ones((1, 2))

    # Pickled as the callable: unpickled, it is the callable, and what the callable
    # can't pickle (or call once unpickled) fails the same way.
    def round_trip(pickler, jitted):
        try:
            restored = pickle.loads(pickler.dumps(jitted))
            return type(restored), restored(x).tolist()
        except Exception as error:
            return type(error)

    for pickler in (pickle, cloudpickle):
        assert round_trip(pickler, ours) == round_trip(pickler, plain), pickler

    # A copy is the callable's copy, watched (and it calls as that copy calls:
    # Flax NNX's copies can't be called outside the original's context).
    def outcome(call):
        try:
            return call(x).tolist()
        except Exception as error:
            return type(error)

    for how in (copy.copy, copy.deepcopy):
        copied = how(ours)
        assert type(copied) is type(ours)
        assert outcome(copied) == outcome(how(plain))

    # A pytree as the callable is one (Equinox's wrapper is a module; JAX's and
    # Flax's callables are leaves): the same keys, and the same leaves but for a
    # callable leaf, which is ours.
    def leaves(tree):
        return [
            (jax.tree_util.keystr(path), leaf if not callable(leaf) else "callable")
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
        ]

    assert leaves(ours) == leaves(plain)


def test_switching_on_imports_nothing():
    # A fresh interpreter: what the program sets after `runtime_checks(...)` and
    # before it imports JAX and jaxtyping (their documented switches) takes effect,
    # the guard watches what it jits, and the libraries it patched on import have
    # their own loaders (`importlib.resources`, `pkgutil.get_data` read them).
    code = (
        "import os, sys, logging, typecheck_guard\n"
        "typecheck_guard.runtime_checks('log')\n"
        "libraries = ('jax', 'jaxtyping', 'beartype', 'typeguard', 'equinox', 'flax')\n"
        "print(sorted(m for m in libraries if m in sys.modules))\n"
        "os.environ['JAX_ENABLE_X64'] = '1'\n"
        "os.environ['JAXTYPING_DISABLE'] = '1'\n"
        "import jax, jax.numpy as jnp, jaxtyping\n"
        "print(jnp.ones(1).dtype, jaxtyping.config.jaxtyping_disable)\n"
        "print(type(jax.jit(lambda x: x)).__name__)\n"
        "import importlib.util, equinox, flax.nnx\n"
        "print({type(m.__loader__).__name__ for m in (jax, equinox, flax.nnx)},\n"
        "      {type(m.__spec__.loader).__name__ for m in (jax, equinox, flax.nnx)},\n"
        "      type(importlib.util.find_spec('equinox').loader).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:4] == [
        "[]",
        "float64 True",
        "Jitted",
        "{'SourceFileLoader'} {'SourceFileLoader'} SourceFileLoader",
    ]


@allow_checks
def test_libraries_imported_after_switching_on_are_watched(typecheck):
    # A fresh interpreter, the guard on before anything is imported: checks are
    # recognised (jaxtyping, beartype and typeguard read as they are imported).
    code = (
        "import typecheck_guard\n"
        "with typecheck_guard.runtime_checks('disallow'):\n"
        "    import jax, jax.numpy as jnp\n"
        "    from beartype import beartype\n"
        "    from flax import struct\n"
        "    from jaxtyping import Array, Float, PyTree, jaxtyped\n"
        "    @jaxtyped(typechecker=beartype)\n"
        "    @struct.dataclass\n"
        "    class Node:\n"
        "        params: PyTree[Float[Array, '...']]\n"
        "    step = jax.jit(lambda n: n)\n"
        "    try:\n"
        "        step(Node({'a': jnp.ones(2)}))\n"
        "    except typecheck_guard.RuntimeTypecheckError as error:\n"
        "        print(error.checked.rsplit('.', 2)[-2:], error.checker)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['Node', '__init__'] jaxtyping with beartype"


def test_error_pickles_under_its_public_name():
    error = typecheck_guard.RuntimeTypecheckError("message")
    assert type(error).__module__ == "typecheck_guard"
    assert str(pickle.loads(pickle.dumps(error))) == "message"


def test_switching_off_puts_every_factory_back():
    # A fresh interpreter: runtime_checks switches the guard on, `release` (what the
    # pytest plugin calls at the end of a session) puts everything back.
    code = (
        "import jax, equinox, flax.nnx\n"
        "before = (jax.jit, jax.pmap, equinox.filter_jit, flax.nnx.jit)\n"
        "from typecheck_guard._guard import _jitwrap\n"
        "_jitwrap.acquire()\n"
        "during = (jax.jit, jax.pmap, equinox.filter_jit, flax.nnx.jit)\n"
        "assert all(a is not b for a, b in zip(before, during))\n"
        "f = jax.jit(lambda x: x + 1)\n"
        "_jitwrap.release()\n"
        "assert (jax.jit, jax.pmap, equinox.filter_jit, flax.nnx.jit) == before\n"
        "assert f(1.0) == 2.0  # made while on: still works, only forwards\n"
        "import sys\n"
        "assert not any(type(x).__name__ == '_Finder' for x in sys.meta_path)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_libraries_imported_later_are_patched_on_import():
    code = (
        "import sys, typecheck_guard\n"
        "typecheck_guard.runtime_checks('log')\n"
        "assert 'equinox' not in sys.modules\n"
        "import equinox\n"
        "from flax import nnx\n"
        "assert hasattr(equinox.filter_jit, '__typecheck_guard_original__')\n"
        "assert hasattr(nnx.jit, '__typecheck_guard_original__')\n"
        "print(type(equinox.filter_jit(lambda x: x)).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "_JittedModule"  # a `Jitted` that is a pytree


def test_public_names():
    assert (
        typecheck_guard.runtime_checks is typecheck_guard._guard._runtime.runtime_checks
    )
    assert issubclass(typecheck_guard.RuntimeTypecheckError, RuntimeError)


# Host callbacks: a check inside one runs each time JAX calls it, by design.

CALLBACKS = {
    "jax.pure_callback": lambda f, x: jax.pure_callback(
        lambda x: (f(x), x)[1], jax.ShapeDtypeStruct(x.shape, x.dtype), x
    ),
    "jax.experimental.io_callback": lambda f, x: io_callback(
        lambda x: (f(x), x)[1], jax.ShapeDtypeStruct(x.shape, x.dtype), x
    ),
    "jax.debug.callback": lambda f, x: (jax.debug.callback(f, x), x)[1],
}


def _checked_progress(typecheck):
    @jaxtyped(typechecker=typecheck)
    def progress(x: Float[ArrayLike, ""]) -> None:
        pass

    return progress


def _in_a_loop(primitive, progress, transform=jax.jit, times=4):
    """A jitted function whose callback runs `times` times per call."""

    def body(i, x):
        return CALLBACKS[primitive](progress, x) + 1.0

    return transform(lambda x: jax.lax.fori_loop(0, times, body, x))


@pytest.fixture
def sink():
    """Every tally the guard reports (as the pytest plugin's sink sees them)."""
    tallies: list[dict] = []

    def record(tally):
        tallies.append(tally)
        return False

    _watch.add_sink(record)
    yield tallies
    _watch.remove_sink(record)


def _totals(tallies, kind=None):
    totals: dict = {}
    for tally in tallies:
        for site, entry in tally.items():
            if kind is None or site.kind == kind:
                into = totals.setdefault(site, [0, 0.0, 0, 0.0])
                for i, value in enumerate(entry):
                    into[i] += value
    return totals


@pytest.mark.parametrize("transform", ["jax.jit", "equinox.filter_jit"])
@pytest.mark.parametrize("primitive", sorted(CALLBACKS))
def test_checks_inside_host_callbacks_are_their_own_kind(
    primitive, transform, typecheck, sink
):
    progress = _checked_progress(typecheck)
    step = _in_a_loop(primitive, progress, TRANSFORMS[transform])
    x = jnp.zeros(())
    typecheck.reset()
    with typecheck_guard.runtime_checks("disallow"):  # not raised by default
        for _ in range(3):
            x = step(x)
        jax.effects_barrier()
    # Every run of the callback is counted, wherever and whenever JAX ran it.
    ((site, (count, _, first_count, _)),) = _totals(sink).items()
    assert count == 12 and first_count <= 1
    assert typecheck.calls == 2 * count  # jaxtyping checks the arguments, then all
    assert site.kind == "callback"
    assert site.checked.endswith("_checked_progress.<locals>.progress")
    assert site.checker == f"jaxtyping with {typecheck.name}"
    assert site.jitted.startswith(primitive + "(")
    assert site.call_site.rsplit(":", 1)[0].endswith("test_runtime.py")
    text = site.describe(count, 0.0) + site.fix()
    assert "inside a host callback" in text and "flatten or unflatten" not in text
    assert "--typecheck-guard-callbacks=strict" in text and "callbacks=True" in text


def test_callback_counts_are_the_same_every_run(typecheck, sink):
    # The sites are the callback's, not the jitted call's that happened to be in
    # flight when JAX ran it: the same program gives the same counts.
    progress = _checked_progress(typecheck)
    runs = []
    for _ in range(3):
        sink.clear()
        with typecheck_guard.runtime_checks("log"):
            for primitive in sorted(CALLBACKS):
                step = _in_a_loop(primitive, progress, times=3)
                step(step(jnp.zeros(())))
            jax.effects_barrier()
        runs.append({site: entry[0] for site, entry in _totals(sink).items()})
    assert runs[0] == runs[1] == runs[2]
    assert sorted(runs[0].values()) == [6, 6, 6]


def test_a_callback_site_is_named_as_the_callback_is_now(typecheck, sink):
    # A callback may change its name while it lives (`__qualname__` is writable):
    # each run's site is named as the callback was then, as the profile names it.
    progress = _checked_progress(typecheck)

    def host(x):
        progress(x)

    step = _in_a_loop("jax.debug.callback", host, times=1)
    x = step(jnp.zeros(()))
    jax.effects_barrier()
    sink.clear()
    with typecheck_guard.runtime_checks("log"):
        for i in range(3):
            host.__qualname__ = f"host_v{i}"
            x = step(x)
            jax.effects_barrier()
    named = {site.jitted: entry[0] for site, entry in _totals(sink).items()}
    assert named == {f"jax.debug.callback({__name__}.host_v{i})": 1 for i in range(3)}


def test_disallow_with_callbacks_raises_for_callback_checks(typecheck):
    progress = _checked_progress(typecheck)
    step = _in_a_loop("jax.pure_callback", progress, times=2)
    with typecheck_guard.runtime_checks("disallow", callbacks=True) as setting:
        assert repr(setting) == (
            "typecheck_guard.runtime_checks('disallow', callbacks=True)"
        )
        with pytest.raises(typecheck_guard.RuntimeTypecheckError) as info:
            step(jnp.zeros(()))
    ((site, entry),) = info.value.sites.items()
    assert site.kind == "callback" and entry[0] == 2
    assert "inside a host callback" in str(info.value)
    with pytest.raises(TypeError, match="callbacks"):
        typecheck_guard.runtime_checks("disallow", callbacks="yes")  # type: ignore[arg-type]


def test_log_logs_callback_sites_as_callbacks(typecheck, caplog):
    @jaxtyped(typechecker=typecheck)  # a site of its own: each is logged once
    def logged_progress(x: Float[ArrayLike, ""]) -> None:
        pass

    progress = logged_progress
    step = _in_a_loop("jax.debug.callback", progress)
    caplog.set_level(logging.WARNING, logger="typecheck_guard")
    with typecheck_guard.runtime_checks("log"):
        step(step(jnp.zeros(())))
        jax.effects_barrier()
    (record,) = [r for r in caplog.records if r.name == "typecheck_guard"]
    assert "inside a host callback" in record.getMessage()


def _on_a_thread_of_its_own(fn):
    """Run `fn()` on a thread that `threading` did not start, until it ends."""
    import _thread

    done = threading.Event()

    def run():
        try:
            fn()
        finally:
            done.set()

    _thread.start_new_thread(run, ())
    assert done.wait(60)


def _large_step(host):
    """A jitted step large enough that jax 0.10 runs most of its calls on one of its
    runtime's threads on the CPU, and `host`, its callback, three times a call
    there; with its arguments."""

    @jax.jit
    def step(x, m):
        def body(i, x):
            x = jnp.tanh(m @ x)
            jax.debug.callback(host, x[0])
            return x

        return jax.lax.fori_loop(0, 3, body, jnp.tanh(m @ m) @ x)

    return step, jnp.ones(1024), jnp.ones((1024, 1024))


def test_a_callback_on_a_thread_of_jaxs_takes_the_level_the_program_set(
    typecheck, caplog
):
    # On the CPU, jax 0.10 runs a large executable on one of its runtime's threads
    # (most calls of `step` below), and its host callback there: no
    # `runtime_checks` reaches that thread, so the callback takes the level the
    # program last set, or last called a jitted function at, on any of its
    # threads. A callback on the calling thread keeps that thread's level. Each run
    # is checked by where it ran, so the test holds wherever JAX runs it.
    progress = _checked_progress(typecheck)
    names = (f"host_v{i}" for i in range(1000))
    ran: dict[str, bool] = {}  # name -> on one of JAX's threads
    inside = {"level": None}

    def host(x):
        # A new site per run (named as the callback is named when it ends): each
        # is logged once.
        host.__qualname__ = next(names)
        bottom = sys._getframe()
        while bottom.f_back is not None:
            bottom = bottom.f_back
        ran[host.__qualname__] = bottom.f_code.co_name == "_wrapped_callback"
        if inside["level"] is not None:  # the callback's own setting
            with typecheck_guard.runtime_checks(inside["level"]):
                pass
        progress(x)

    step, x, m = _large_step(host)
    caplog.set_level(logging.WARNING, logger="typecheck_guard")

    def run(calls=2, raises=False):
        """Call `step` (three runs of the callback a call): ({name: on JAX's
        thread}, the names logged, the names of the calls' runs that raised)."""
        ran.clear()
        caplog.clear()
        raised = set()
        for _ in range(calls):
            before = set(ran)
            try:
                jax.block_until_ready(step(x, m))
            except typecheck_guard.RuntimeTypecheckError as error:
                raised |= {
                    site.jitted.split("(")[1].split(")")[0].rsplit(".", 1)[-1]
                    for site in error.sites
                }
                assert set(ran) - before >= raised - before
            jax.effects_barrier()
        found = {
            r.getMessage().split("jax.debug.callback(")[1].split(")")[0]
            for r in caplog.records
            if r.name == "typecheck_guard"
        }
        logged = {name.rsplit(".", 1)[-1] for name in found}
        assert raises or not raised
        return dict(ran), logged, raised

    def on_jaxs(runs):
        return {name for name, jaxs in runs.items() if jaxs}

    def on_calling(runs):
        return {name for name, jaxs in runs.items() if not jaxs}

    def on_a_threading_thread(fn):
        thread = threading.Thread(target=fn)
        thread.start()
        thread.join()

    runs, logged, _ = run()
    assert logged == set()  # nothing set: nothing watched
    with typecheck_guard.runtime_checks("log"):
        runs, logged, _ = run()
        assert logged == set(runs)  # wherever it ran
        inside["level"] = "log"  # a callback's own setting lends nothing
        runs, logged, _ = run()
        assert logged == set(runs)
        inside["level"] = None

        # Another thread sets "allow": the last level set wins.
        def at_allow():
            with typecheck_guard.runtime_checks("allow"):
                pass

        on_a_threading_thread(at_allow)
        runs, logged, _ = run(1)  # a call at "log" lends it again...
        assert logged == set(runs)
        on_a_threading_thread(at_allow)
        # ... and a callback run on a thread of the program's keeps its own
        # level ("allow"), whether `threading` started it or not.
        caplog.clear()
        for start in (on_a_threading_thread, _on_a_thread_of_its_own):
            start(lambda: jax.debug.callback(host, jnp.zeros(())))
            jax.effects_barrier()
        assert not any(r.name == "typecheck_guard" for r in caplog.records)
    runs, logged, _ = run()  # back to "allow" on the thread that set "log"
    assert logged == set()
    on_a_threading_thread(lambda: typecheck_guard.runtime_checks("log"))
    runs, logged, _ = run()  # this thread's calls at "allow" win
    assert logged == set()
    with typecheck_guard.runtime_checks("disallow", callbacks=True):
        runs, logged, raised = run(raises=True)
        # On the calling thread the call raises; on JAX's, logged instead.
        assert raised == on_calling(runs) and logged == on_jaxs(runs)
    with typecheck_guard.runtime_checks("disallow"):
        runs, logged, _ = run()  # not raised, not logged, on either
        assert logged == set()


def test_a_jitted_call_in_a_context_of_the_callbacks_own_is_the_callbacks(
    typecheck, sink
):
    # A jitted function called inside a host callback is part of it, also from a
    # fresh `contextvars.Context`, where the program may set a level of its own:
    # its output's rebuild is one of the callback's checks, counted once (3.11
    # counted it as a dispatch check of the inner call instead; 3.12 as both).
    import contextvars
    import dataclasses

    @jaxtyped(typechecker=typecheck)
    @dataclasses.dataclass
    class S:
        w: Float[Array, " n"]

    jax.tree_util.register_pytree_node(S, lambda s: ((s.w,), None), lambda _, c: S(*c))

    @jax.jit
    def inner(s):
        return S(s.w * 2)

    def host(x):
        def run():
            typecheck_guard.runtime_checks("log")
            return inner(S(jnp.ones(2)))  # a construction, and the rebuild

        contextvars.Context().run(run)

    step = _in_a_loop("jax.debug.callback", host, times=1)
    inner(S(jnp.ones(2)))
    x = step(jnp.zeros(()))
    jax.effects_barrier()
    sink.clear()
    with typecheck_guard.runtime_checks("log"):
        for _ in range(3):
            x = step(x)
        jax.effects_barrier()
    counts = {
        (site.kind, site.checked.rsplit(".", 2)[-2]): entry[0]
        for site, entry in _totals(sink).items()
    }
    assert counts == {("callback", "S"): 6}


def test_every_run_of_a_callback_is_seen_on_whatever_thread_jax_runs_it(
    typecheck, caplog
):
    # A large executable on the CPU runs on one of JAX's runtime threads (jax 0.10
    # runs most of these calls there), and so does its host callback.
    progress = _checked_progress(typecheck)
    threads = []

    def host(x):
        host.__qualname__ = f"host_v{len(threads)}"  # a new site per run
        threads.append(threading._active.get(threading.get_ident()))  # type: ignore[attr-defined]
        progress(x)

    step, x, m = _large_step(host)
    caplog.set_level(logging.WARNING, logger="typecheck_guard")
    with typecheck_guard.runtime_checks("log"):
        for _ in range(4):
            jax.block_until_ready(step(x, m))
            jax.effects_barrier()
    logged = [r for r in caplog.records if r.name == "typecheck_guard"]
    assert len(threads) == len(logged) == 12  # each site logged once


class _Meter:
    """What a progress meter does in its host callback (tqdm's refresh): Python
    work whose speed the program can see (tqdm prints one more line for each 0.1 s
    a bar lives, so a slower callback prints more lines). It records what watches it while it runs:
    the profile function (3.11), or each `sys.monitoring` event of the guard's
    tool for its own code (3.12+)."""

    def __init__(self, progress):
        self.progress = progress
        self.profiles: list[Any] = []
        self.events = 0

    def __call__(self, x):
        self.progress(x)  # a check the guard still counts
        self.refresh()

    def refresh(self):
        self.profiles.append(sys.getprofile())

    def count_events(self, monkeypatch):
        """Count the events of the guard's `sys.monitoring` tool for `refresh`
        (3.12+): each one asks what its code is (`_detect._on_start`)."""
        code = _Meter.refresh.__code__
        kind_of_code = _detect._kind_of_code

        def counting(c):
            if c is code:
                self.events += 1
            return kind_of_code(c)

        monkeypatch.setattr(_detect, "_kind_of_code", counting)


@pytest.mark.parametrize("primitive", sorted(CALLBACKS))
def test_a_host_callbacks_own_code_runs_unwatched(
    primitive, typecheck, sink, monkeypatch
):
    # Watching must not change what a program can time: under --typecheck-guard=
    # warn/strict a progress meter's callback runs its own Python with no profile
    # function (3.11) and, once each code object has been seen, no monitoring
    # event (3.12+); the check inside it is still counted.
    meter = _Meter(_checked_progress(typecheck))
    step = _in_a_loop(primitive, meter, transform=TRANSFORMS["equinox.filter_jit"])
    x = step(jnp.zeros(()))  # compiled; each code object seen once
    jax.effects_barrier()
    meter.profiles.clear()
    sink.clear()
    meter.count_events(monkeypatch)
    for _ in range(3):
        x = step(x)
    jax.effects_barrier()
    assert meter.profiles == [None] * 12
    assert meter.events == 0
    ((site, (count, *_)),) = _totals(sink).items()
    assert site.kind == "callback" and count == 12


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
@allow_checks
def test_the_guard_hears_only_the_returns_a_check_can_end_at(typecheck, sink):
    # On 3.12+ each return the guard's tool listens to calls it, in every thread,
    # watched or not: under the plugin, every eager check of a suite pays for it. A
    # check ends where its checker's wrapper returns, and pauses while its body
    # runs: the code that only ever runs inside a check (jaxtyping's
    # `wrapped_fn_impl` and stubs, an array type's `isinstance`) is not listened
    # to, and every check is still counted, with its time. (The stubs beartype
    # wraps are this decoration's own code; `wrapped_fn_impl`, typeguard's wrapper
    # and an array type's `isinstance` are shared with every check of the process,
    # and one that JAX traced or that checked nothing of the program's may have
    # opened at them in an earlier test.)
    Node = _seed_node(typecheck)
    step = jax.jit(lambda s: s.replace(step=s.step + 1))
    state = _cached(step, _node_value(Node))
    sink.clear()
    with typecheck_guard.runtime_checks("log"):
        for _ in range(3):
            state = step(state)
    _node_value(Node)  # and an eager check, outside any window
    ((site, (count, seconds, *_)),) = _totals(sink).items()
    assert site.checked.endswith("Node.__init__") and count == 3 and seconds > 0

    def closure(fn):
        cells = (cell.cell_contents for cell in fn.__closure__)
        return dict(zip(fn.__code__.co_freevars, cells, strict=True))

    wrapper = Node.__init__
    impl = closure(wrapper)["wrapped_fn_impl"]
    # (Each behind the fixture's counter.)
    stubs = [closure(impl)[name].__wrapped__ for name in ("param_fn", "full_fn")]
    mon = sys.monitoring  # pyright: ignore[reportAttributeAccessIssue]

    def listened(fn):
        events = mon.get_local_events(_detect._monitor.tool, fn.__code__)
        return bool(events & mon.events.PY_RETURN)

    assert listened(wrapper)  # a check ends there
    if typecheck.name == "beartype":
        assert stubs[0].__code__ is not stubs[1].__code__
        assert not any(listened(stub) for stub in stubs)


_SUSPENDING_PROGRAM = """
import asyncio, json, os, sys
if os.environ.get("TAKE_TOOL_IDS"):  # the guard falls back to a profile function
    for tool in (3, 4):
        sys.monitoring.use_tool_id(tool, "another tool")
import jax, jax.numpy as jnp
from beartype import beartype
from jaxtyping import Array, Float
import typecheck_guard
from typecheck_guard._guard import _detect, _watch

@beartype
def gen(x: Float[Array, " n"]):
    yield x
    yield x

@beartype
async def coro(x: Float[Array, " n"]) -> Float[Array, " n"]:
    await asyncio.sleep(0)
    return x

async def cancelled(x):
    task = asyncio.ensure_future(coro(x))
    await asyncio.sleep(0)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass

RUN = {
    "generator": lambda x: list(gen(x)),
    "closed generator": lambda x: next(gen(x)),  # dropped at its first yield
    "coroutine": lambda x: asyncio.run(coro(x)),
    "cancelled coroutine": lambda x: asyncio.run(cancelled(x)),
}
mode = {"now": None}

@jax.tree_util.register_pytree_node_class
class Node:
    def __init__(self, x):
        self.x = x
    def tree_flatten(self):
        return (self.x,), None
    @classmethod
    def tree_unflatten(cls, aux, children):
        if mode["now"] is not None:
            RUN[mode["now"]](children[0])
        return cls(*children)

counts = {}
def sink(tally):
    for site, entry in tally.items():
        key = f"{mode['now']}: {site.checked} ({site.checker})"
        counts[key] = counts.get(key, 0) + entry[0]
    return False

_watch.add_sink(sink)
typecheck_guard.runtime_checks("log")
step = jax.jit(lambda n: Node(n.x + 1.0))
node = step(Node(jnp.ones(2)))
for mode["now"] in RUN:
    for _ in range(3):
        node = step(node)
print(json.dumps({"monitoring": _detect.monitoring, "counts": counts}))
"""


# The guard's profile function (3.11 and older, or 3.12+ with both of its
# `sys.monitoring` ids taken) is told each time a generator's or coroutine's frame
# stops at a `yield` or an `await` and each time it resumes, as if it returned and
# was called again, and can't tell a resumption from the program throwing into the
# frame: it counts a check per resumption. A known limit (the runtime guard's
# page); a fix that kept one check a call lost checks at the edges (a frame thrown
# into, closed, or kept suspended while the program goes on).
_PROFILE_FUNCTION_COUNTS_RESUMPTIONS = pytest.mark.xfail(
    strict=True, reason="the profile function counts a check per resumption"
)


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param(
            "default",
            marks=[_PROFILE_FUNCTION_COUNTS_RESUMPTIONS]
            if sys.version_info < (3, 12)
            else [],
        ),
        pytest.param(
            "profile function",
            marks=[
                pytest.mark.skipif(
                    sys.version_info < (3, 12), reason="3.11 and older have no other"
                ),
                _PROFILE_FUNCTION_COUNTS_RESUMPTIONS,
            ],
        ),
    ],
)
def test_a_checked_generator_or_coroutine_is_one_check_however_it_suspends(
    backend, tmp_path
):
    # beartype checks a generator or coroutine function with a wrapper of the same
    # kind: one check a call, however the generator or coroutine ends (exhausted,
    # dropped at a `yield`, cancelled at an `await`), under the same checker.
    script = tmp_path / "suspending.py"
    script.write_text(_SUSPENDING_PROGRAM)
    env = {**os.environ, "TAKE_TOOL_IDS": "1" if backend != "default" else ""}
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["monitoring"] == (
        backend == "default" and sys.version_info >= (3, 12)
    )
    expected = {
        f"{mode}: __main__.{fn} (beartype with jaxtyping)": 3
        for mode, fn in (
            ("generator", "gen"),
            ("closed generator", "gen"),
            ("coroutine", "coro"),
            ("cancelled coroutine", "coro"),
        )
    }
    if sys.version_info >= (3, 13):
        # 3.13 closes a generator stopped at a `yield` outside any `try` without
        # running its frame again: no event tells a watcher it ended (a limit of
        # the runtime guard's page).
        del expected["closed generator: __main__.gen (beartype with jaxtyping)"]
    assert result["counts"] == expected


def _callback_programs(typecheck):
    """Host callbacks whose checks the guard must count as they ran: name ->
    (callback, {checked function's name: checks per run of the callback})."""

    @jaxtyped(typechecker=typecheck)
    def inner(x: Float[ArrayLike, ""]) -> Float[ArrayLike, ""]:
        return x

    @jaxtyped(typechecker=typecheck)
    def outer(x: Float[ArrayLike, ""]) -> None:
        inner(x)  # a check of its own, in the body of another
        inner(x)

    def failing(x):
        try:
            inner("not an array")  # type: ignore[arg-type]
        except Exception:  # a failed check, caught by the program
            pass
        inner(x)

    def in_an_except_block(x):
        try:
            raise KeyError("handled")
        except KeyError:
            inner(x)  # passes, while an exception is being handled

    def traced_in_the_callback(x):
        # A fresh jit traces here: its check is a trace-time check, never flagged;
        # the one after it runs at the callback's own time.
        jax.jit(lambda y: inner(y))(jnp.asarray(x))
        inner(x)

    def not_a_jaxtyping_check(x):
        no_check = jaxtyping_config_off(inner)
        no_check(x)

    return {
        "nested": (outer, {"outer": 1, "inner": 2}),
        "failing": (failing, {"inner": 2}),
        "in an except block": (in_an_except_block, {"inner": 1}),
        "traced in the callback": (traced_in_the_callback, {"inner": 1}),
        "switched off": (not_a_jaxtyping_check, {}),
    }


def jaxtyping_config_off(fn):
    """`fn`, called with jaxtyping's checks switched off."""

    def call(*args):
        import jaxtyping

        jaxtyping.config.update("jaxtyping_disable", True)
        try:
            return fn(*args)
        finally:
            jaxtyping.config.update("jaxtyping_disable", False)

    return call


# The names of `_callback_programs`, for parametrizing (the programs need the
# test's checker).
CALLBACK_PROGRAMS = [
    "nested",
    "failing",
    "in an except block",
    "traced in the callback",
    "switched off",
]


@pytest.mark.parametrize("program", CALLBACK_PROGRAMS)
def test_checks_in_a_callback_are_counted_as_they_ran(program, typecheck, sink):
    # What jaxtyping's entry points see in a host callback is written down while it
    # runs and followed once it returned (`_guard/_entries.py`): the counts are
    # those of following the checks live, every run, from the first one on.
    callback, expected = _callback_programs(typecheck)[program]
    step = _in_a_loop("jax.debug.callback", callback, times=2)
    with typecheck_guard.runtime_checks("log"):
        for _ in range(2):
            step(jnp.zeros(()))
            jax.effects_barrier()
    counts = {
        site.checked.rsplit(".", 1)[-1]: entry[0]
        for site, entry in _totals(sink).items()
    }
    assert all(site.kind == "callback" for site in _totals(sink))
    assert counts == {name: 4 * n for name, n in expected.items()}


def _more_callback_programs(typecheck):
    """Host callbacks whose records take each branch of the short replay
    (`_entries._replay_known`) and of its way out."""

    @jaxtyped(typechecker=typecheck)
    def leaf(x: Float[ArrayLike, ""]) -> Float[ArrayLike, ""]:
        return x

    @jaxtyped(typechecker=typecheck)
    def unannotated(x: Float[ArrayLike, ""]):
        leaf(x)  # no return value to check: the body runs to the wrapper's end

    @jaxtyped(typechecker=typecheck)
    def middle(x: Float[ArrayLike, ""]) -> None:
        unannotated(x)
        leaf(x)

    @jaxtyped(typechecker=typecheck)
    def top(x: Float[ArrayLike, ""]) -> None:
        middle(x)

    @jaxtyped(typechecker=typecheck)
    def raising(x: Float[ArrayLike, ""]) -> None:
        raise KeyError("body")

    @jaxtyped(typechecker=typecheck)
    def bad_return(x: Float[ArrayLike, ""]) -> Float[ArrayLike, ""]:
        return "not an array"  # type: ignore[return-value]

    def raises_in_its_body(x):
        leaf(x)
        try:
            raising(x)
        except KeyError:
            pass
        leaf(x)

    def fails_on_return(x):
        try:
            bad_return(x)
        except Exception:
            pass

    return {
        "three deep": top,
        "a body that raises": raises_in_its_body,
        "a return value that fails": fails_on_return,
    }


@pytest.mark.parametrize(
    "program",
    # "switched off" records no check: nothing to replay either way.
    [name for name in CALLBACK_PROGRAMS if name != "switched off"]
    + ["three deep", "a body that raises", "a return value that fails"],
)
def test_the_short_replay_of_a_callback_is_the_long_one(
    program, typecheck, sink, monkeypatch
):
    # Once a callback runs as it ran before, what jaxtyping's entry points wrote
    # down is followed the short way (`_entries._replay_known`): each record it
    # takes must give the checks, frames, times and order that following it one
    # event at a time gives (`Window.push_known`, `pause`, `resume`, `close`,
    # `finish`), and it must leave every other record to that.
    from typecheck_guard._guard import _entries
    from typecheck_guard._guard._track import Window

    programs = _callback_programs(typecheck) | {
        name: (callback, None)
        for name, callback in _more_callback_programs(typecheck).items()
    }
    callback = programs[program][0]
    replay, short = _entries._replay, _entries._replay_known
    taken: list[bool] = []

    def fresh() -> Window:
        window = Window()
        window.callback = True
        return window

    def pending(window: Window) -> list:
        return [
            (frame, data, tuple(checkers), seconds, failed)
            for frame, data, checkers, seconds, failed in window.pending or ()
        ]

    def both(window, events):
        quick = fresh()
        took = short(quick, list(events))
        taken.append(took)
        if took:
            slow = fresh()
            monkeypatch.setattr(_entries, "_replay_known", lambda w, e: False)
            try:
                replay(slow, list(events))
            finally:
                monkeypatch.setattr(_entries, "_replay_known", short)
            assert not slow._stack
            assert pending(quick) == pending(slow)
        else:
            assert quick.pending is None
        replay(window, events)

    monkeypatch.setattr(_entries, "_replay", both)
    step = _in_a_loop("jax.debug.callback", callback, times=2)
    with typecheck_guard.runtime_checks("log"):
        for _ in range(2):
            step(jnp.zeros(()))
            jax.effects_barrier()
    assert len(taken) == 4
    # The first run of each check is followed the long way; the runs after it,
    # the short way unless a check in them fails or raises.
    assert not taken[0]
    short_way = program in ("nested", "traced in the callback", "three deep")
    assert taken[1:] == [short_way] * 3


def test_one_function_decorated_with_two_checkers_is_two_sites_in_a_callback(sink):
    # The guard knows a check in a callback by the jaxtyping decoration that runs
    # it: the same function decorated with beartype and with typeguard is checked
    # by each, and is two sites (it was one, named after the first checker seen).
    import typeguard

    def f(x: Float[ArrayLike, ""]) -> Float[ArrayLike, ""]:
        return x

    by_beartype = jaxtyped(typechecker=beartype)(f)
    by_typeguard = jaxtyped(typechecker=typeguard.typechecked)(f)

    def callback(x):
        by_beartype(x)
        by_typeguard(x)
        by_typeguard(x)

    step = _in_a_loop("jax.debug.callback", callback, times=2)
    with typecheck_guard.runtime_checks("log"):
        for _ in range(2):
            step(jnp.zeros(()))
            jax.effects_barrier()
    counts = {
        (site.checker, site.kind): (entry[0], entry[2])
        for site, entry in _totals(sink).items()
    }
    # (count, of which first checks): each checker's first check of `f` carries
    # that checker's one-time setup.
    assert counts == {
        ("jaxtyping with beartype", "callback"): (4, 1),
        ("jaxtyping with typeguard", "callback"): (8, 1),
    }


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_checks_in_a_callback_leave_nothing_open_behind_them(typecheck, monkeypatch):
    # On 3.12+ the guard keeps, per callback, which jaxtyping checks are open and
    # whether in their body (what `sys.monitoring` leaves to `_entries`): a body
    # with no return value to check, or one that raises, ends with its check.
    from typecheck_guard._guard import _entries

    @jaxtyped(typechecker=typecheck)
    def unannotated(x: Float[ArrayLike, ""]):
        pass

    @jaxtyped(typechecker=typecheck)
    def raising(x: Float[ArrayLike, ""]) -> None:
        raise KeyError("body")

    left = []
    leave = _entries.leave

    def watching(window, previous):
        left.append(list(window.entered))
        leave(window, previous)

    monkeypatch.setattr(_entries, "leave", watching)

    def callback(x):
        for _ in range(3):
            unannotated(x)
            try:
                raising(x)
            except KeyError:
                pass

    with typecheck_guard.runtime_checks("log"):
        _in_a_loop("jax.debug.callback", callback, times=2)(jnp.zeros(()))
        jax.effects_barrier()
    assert left == [[], []]


def test_the_signature_the_guard_puts_in_a_checked_closure_is_the_signature():
    # In a host callback the guard learns which function a jaxtyping check is for
    # from the signature jaxtyping binds the call's arguments with
    # (`_guard/_entries.py`). What a program can reach of it is that signature.
    import copy
    import inspect

    import cloudpickle

    @jaxtyped(typechecker=beartype)
    def progress(x: Float[ArrayLike, ""], *, scale: float = 1.0) -> None:
        pass

    impl = _closure(progress)["wrapped_fn_impl"].cell_contents
    original = _closure(impl)["param_signature"].cell_contents
    with typecheck_guard.runtime_checks("log"):
        _in_a_loop("jax.pure_callback", progress, times=2)(jnp.zeros(()))
        jax.effects_barrier()
        ours = _closure(impl)["param_signature"].cell_contents
        assert type(ours) is not inspect.Signature  # ours, in place
        assert ours == original and hash(ours) == hash(original)
        assert repr(ours) == repr(original) and str(ours) == str(original)
        assert ours.bind(1.0).arguments == original.bind(1.0).arguments
        with pytest.raises(TypeError) as raised:
            ours.bind()
        with pytest.raises(TypeError) as expected:
            original.bind()
        assert str(raised.value) == str(expected.value)
        # Pickled as the signature (here its annotations don't pickle, as the
        # original's don't).
        assert ours.__reduce__() == original.__reduce__()
        for copied in (copy.copy(ours), copy.deepcopy(ours)):
            assert type(copied) is inspect.Signature and copied == original
        assert b"typecheck_guard" not in cloudpickle.dumps(impl)
        progress(jnp.zeros(()), scale=2.0)  # outside a callback: as before


def test_what_no_program_checks_is_not_counted_in_a_callback(sink):
    # Inside a host callback, two `isinstance(x, PyTree[...])` runs are no checks
    # of the program's: a checker probing a hint while it decorates a function
    # (beartype asks `isinstance(None, hint)`), and the one-time canary through
    # which typecheck_guard verifies the jaxtyping internals its PyTree cache
    # models. Neither is counted, and `callbacks=True` raises for neither.
    from typecheck_guard._compat import _jaxtyping

    internals = _jaxtyping.load()
    from jaxtyping import _storage

    def decorate_only(x):
        @jaxtyped(typechecker=beartype)
        def never_called(y: Float[ArrayLike, " n"]) -> Float[ArrayLike, " n"]:
            return y

        _jaxtyping._canary(internals, _storage)

    step = _in_a_loop("jax.pure_callback", decorate_only, times=2)
    x = step(jnp.zeros(()))
    jax.effects_barrier()
    sink.clear()
    with typecheck_guard.runtime_checks("disallow", callbacks=True):
        step(x)
        jax.effects_barrier()
    assert _totals(sink) == {}


# The reported time is the checker's own: a fake clock that only the checked
# function's body advances must show zero.


class _FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _checkers(typecheck):
    import typeguard

    return {
        "jaxtyped": lambda f: jaxtyped(typechecker=typecheck)(f),
        "beartype": beartype,
        "typeguard": typeguard.typechecked,
    }


@allow_checks
@pytest.mark.parametrize("checker", ["jaxtyped", "beartype", "typeguard"])
def test_reported_time_excludes_the_checked_functions_body(
    checker, typecheck, sink, monkeypatch
):
    clock = _FakeClock()
    monkeypatch.setattr(_detect, "_clock", clock)
    decorate = _checkers(typecheck)[checker]

    @decorate
    def slow_body(x: ArrayLike) -> None:
        clock.now += 1.0  # one "second" in the body, none in the checker

    # In an unflatten, and in a host callback.
    Checked = _node_with_checked_unflatten(slow_body)
    step = jax.jit(lambda s: s)
    state = step(step(Checked(jnp.ones(2))))
    in_callback = _in_a_loop("jax.pure_callback", slow_body, times=2)
    with typecheck_guard.runtime_checks("log"):
        step(state)
        in_callback(jnp.zeros(()))
        jax.effects_barrier()
    totals = _totals(sink)
    # On 3.11 a callback runs with no profile function: only jaxtyping's checks
    # tell the guard they ran there (`_guard/_entries.py`).
    seen_in_callbacks = checker == "jaxtyped" or sys.version_info >= (3, 12)
    kinds = {"function", "callback"} if seen_in_callbacks else {"function"}
    assert {site.kind for site in totals} == kinds
    assert clock.now >= 3.0  # the bodies ran
    for count, seconds, _, first_seconds in totals.values():
        assert count > 0 and seconds == first_seconds == 0.0


def _closure(fn):
    return dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))


def test_what_the_guard_puts_in_a_checked_closure_is_the_function():
    # The guard times the body of a jaxtyped function run inside a host callback
    # through the stubs jaxtyping checks its arguments and return value with, which
    # run before and after the body (`_guard/_entries.py`). The body runs with
    # nothing of ours on its stack, inside callbacks and out; what a program can
    # reach of the closure is jaxtyping's: cloudpickle (which pickles a local or
    # `__main__` function's closure by value) writes jaxtyping's stubs, the function
    # is not kept alive by us.
    import copy
    import gc
    import weakref

    import cloudpickle

    callers = []

    def make():
        @jaxtyped(typechecker=beartype)
        def progress(x: Float[ArrayLike, ""]) -> Float[ArrayLike, ""]:
            callers.append(sys._getframe(1).f_code.co_name)
            return x

        return progress

    progress = make()
    impl = _closure(progress)["wrapped_fn_impl"].cell_contents
    body = progress.__wrapped__
    stubs = {
        name: _closure(impl)[name].cell_contents for name in ("param_fn", "full_fn")
    }
    with typecheck_guard.runtime_checks("log"):
        _in_a_loop("jax.pure_callback", progress, times=2)(jnp.zeros(()))
        jax.effects_barrier()
    progress(jnp.zeros(()))  # outside a callback, once hooked
    assert callers == ["wrapped_fn_impl"] * 3  # the body's caller: jaxtyping's
    assert _closure(impl)["fn"].cell_contents is body
    for name, stub in stubs.items():
        ours = _closure(impl)[name].cell_contents
        assert type(ours).__name__ == "_Stub"  # ours, in place
        assert ours.__wrapped__ is stub.__wrapped__ and ours.__name__ == stub.__name__
        assert ours == stub and hash(ours) == hash(stub) and repr(ours) == repr(stub)
        assert copy.copy(ours) is stub and copy.deepcopy(ours) is stub
    pickled = cloudpickle.dumps(impl)
    assert b"typecheck_guard" not in pickled
    fn = _closure(pickle.loads(pickled))["fn"].cell_contents
    assert type(fn) is type(body) and fn.__qualname__ == body.__qualname__
    dropped = (weakref.ref(progress), weakref.ref(body))
    del progress, impl, body, fn, stubs, stub, ours
    jax.clear_caches()  # JAX's compiled callback holds it
    gc.collect()
    assert [ref() for ref in dropped] == [None, None]


@allow_checks
def test_first_check_of_a_callable_is_reported_apart(typecheck, sink):
    Custom = _custom(typecheck)
    step = jax.jit(lambda s: s)
    state = step(Custom(jnp.ones(2), 0.5))
    sink.clear()
    with typecheck_guard.runtime_checks("log"):
        step(state)
        step(state)
    first, second = sink
    ((count, _, first_count, _),) = first.values()
    assert count == 1 and first_count == 0  # seen before (the first call)
    ((count, _, first_count, _),) = second.values()
    assert count == 1 and first_count == 0
    fresh = _custom(typecheck)  # a new class: a new checked callable
    step2 = jax.jit(lambda s: s)
    sink.clear()
    with typecheck_guard.runtime_checks("log"):
        step2(fresh(jnp.ones(2), 0.5))
    ((count, _, first_count, _),) = _totals(sink).values()
    assert first_count == 1 and count >= 1


@pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="3.12+ watches with sys.monitoring"
)
def test_the_profile_function_is_paused_while_jax_traces():
    # Checks while tracing are never flagged, so JAX's tracing, lowering and
    # compiling run without the profile function (they are most of a first call).
    seen = []

    def body(x):
        seen.append(sys.getprofile())
        return x + 1

    step = jax.jit(body)
    with typecheck_guard.runtime_checks("disallow"):
        outside = sys.getprofile()
        step(jnp.ones(2))
        assert sys.getprofile() is outside
    assert seen == [None]


# What the guard says about a site: the user's call site, the user's function, one
# name per checker, and checks nested in a checked body as sites of their own.


@allow_checks
def test_call_site_is_the_callers_line_not_a_checkers_wrapper(typecheck):
    Custom = _custom(typecheck)
    step = jax.jit(lambda s: s)
    state = _cached(step, Custom(jnp.ones(2), 0.5))

    @jaxtyped(typechecker=typecheck)
    def run(state: Any) -> Any:
        return step(state)  # the call from a checked body

    with typecheck_guard.runtime_checks("disallow"):
        with pytest.raises(typecheck_guard.RuntimeTypecheckError) as info:
            run(state)
    assert info.value.call_site.endswith(
        f"test_runtime.py:{_line_of('return step(state)  # the call from')}"
    )
    assert "jaxtyping" not in info.value.call_site


@allow_checks
def test_partial_and_filter_jit_sites_name_the_users_function(typecheck, sink):
    Custom = _custom(typecheck)

    def scaled(s, k):
        return s

    step = jax.jit(ft.partial(scaled, k=2))
    state = step(Custom(jnp.ones(2), 0.5))
    # `equinox.filter_jit` made before the guard's patches: only the `jax.jit` inside
    # it is watched, and Equinox names that function after the user's.
    original = getattr(eqx.filter_jit, "__typecheck_guard_original__", eqx.filter_jit)
    filtered = original(lambda s: s)
    state = filtered(filtered(state))
    sink.clear()
    with typecheck_guard.runtime_checks("log"):
        step(state)
        filtered(state)
    names = {site.jitted for site in _totals(sink)}
    assert names == {
        f"jax.jit(functools.partial({__name__}.{_qualname(scaled)}))",
        f"equinox.filter_jit({__name__}."
        "test_partial_and_filter_jit_sites_name_the_users_function.<locals>.<lambda>)",
    }
    assert not any("0x" in name for name in names)


def _qualname(fn: Any) -> str:
    return fn.__qualname__


@allow_checks
def test_checks_inside_a_checked_body_are_sites_of_their_own(typecheck, sink):
    @jaxtyped(typechecker=typecheck)
    def validate(x: Float[Array, " n"]) -> None:
        pass

    @jax.tree_util.register_pytree_node_class
    class Validated:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Any) -> None:
            validate(x)  # a check of its own, inside the constructor's body
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    step = jax.jit(lambda s: s)
    state = _cached(step, Validated(jnp.ones(2)))
    sink.clear()
    with typecheck_guard.runtime_checks("log"):
        for _ in range(3):
            state = step(state)
    totals = {
        site.checked.rsplit(".", 1)[-1]: entry for site, entry in _totals(sink).items()
    }
    assert {name: entry[0] for name, entry in totals.items()} == {
        "__init__": 3,
        "validate": 3,
    }
    checkers = {site.checker for site in _totals(sink)}
    assert checkers == {f"jaxtyping with {typecheck.name}"}


@allow_checks
def test_checks_once_per_compilation_are_not_flagged(typecheck, sink):
    # On its first call, JAX rebuilds the output of `step` three times: with
    # placeholder leaves for its key paths (the check fails there; JAX swallows it),
    # for its fast path, and the output itself. Only the last runs on every call.
    Node = _seed_node(typecheck)
    step = jax.jit(lambda s: s.replace(step=s.step + 1))
    with typecheck_guard.runtime_checks("log"):
        state = step(_node_value(Node))
        step(state)
    totals = _totals(sink)  # a site per call line: two
    assert {site.kind for site in totals} == {"constructor"}
    assert sum(entry[0] for entry in totals.values()) == 2


def test_a_watched_equinox_filter_jit_is_the_pytree_equinoxs_is():
    # `equinox.filter_jit`'s wrapper is an `equinox.Module`, whose leaves are the
    # arrays of what it jits: a watched one flattens to the same leaves, under the
    # same keys, and rebuilds (watched) around the leaves it is given. (It was a
    # leaf: `equinox.filter_grad` of a module holding one gave no gradient for its
    # arrays, and `equinox.partition` no parameters.)
    linear = eqx.nn.Linear(2, 2, key=jax.random.PRNGKey(0))
    jitted = eqx.filter_jit(linear)
    assert type(jitted) is _jitwrap._JittedModule
    inner = jitted._typecheck_guard_jitted

    def paths(tree):
        return [
            (jax.tree_util.keystr(path), leaf)
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
        ]

    ours, theirs = paths(jitted), paths(inner)
    assert [p for p, _ in ours] == [p for p, _ in theirs]
    assert all(a is b for (_, a), (_, b) in zip(ours, theirs, strict=True))
    assert len(ours) == 3  # its name, the weight and the bias

    class Net(eqx.Module):
        lin: Any

    net = Net(jitted)
    x = jnp.ones(2)
    grads = eqx.filter_grad(lambda n, x: n.lin(x).sum())(net, x)
    assert [leaf.shape for leaf in jax.tree.leaves(grads)] == [(2, 2), (2,)]
    params, _ = eqx.partition(net, eqx.is_array)
    assert len(jax.tree.leaves(params)) == 2
    zeroed = jax.tree.map(lambda a: a * 0 if eqx.is_array(a) else a, net)
    assert type(zeroed.lin) is _jitwrap._JittedModule
    assert (zeroed.lin(x) == 0).all()
    assert jax.tree.leaves(jax.tree.map(lambda a: a, net)) == jax.tree.leaves(net)

    # Its treedef holds nothing of ours: wrappers whose treedefs are equal without
    # us (the same module jitted on two lines; an ensemble's members, made on one)
    # have equal treedefs, and trees of them map together. (The function and the
    # line that made it were in the treedef's data: `jax.tree.map` over two raised,
    # and a jitted step retraced for each member.)
    plain_jit = _original(eqx.filter_jit)
    again = eqx.filter_jit(linear)
    other = eqx.filter_jit(eqx.nn.Linear(2, 2, key=jax.random.PRNGKey(1)))
    plain_other = plain_jit(eqx.nn.Linear(2, 2, key=jax.random.PRNGKey(1)))
    structure = jax.tree_util.tree_structure
    assert structure(jitted) == structure(again) == structure(other)
    assert structure(inner) == structure(plain_other)
    stacked = jax.tree.map(
        lambda a, b: jnp.stack([a, b]) if eqx.is_array(a) else a, jitted, other
    )
    assert [leaf.shape for leaf in jax.tree.leaves(stacked)[1:]] == [(2, 2, 2), (2, 2)]
    assert structure(zeroed.lin) == structure(jitted)

    # An `equinox.Module` and a dataclass, as Equinox's wrapper is, to `isinstance`
    # (a checker's check of an `f: equinox.Module` argument) and to `dataclasses`.
    assert isinstance(jitted, eqx.Module)
    assert dataclasses.is_dataclass(jitted)
    assert [f.name for f in dataclasses.fields(jitted)] == [
        f.name for f in dataclasses.fields(inner)
    ]

    @jaxtyped(typechecker=beartype)
    def takes_a_module(module: eqx.Module) -> int:
        return 1

    assert takes_a_module(jitted) == 1

    # A method bound through Equinox's own `__get__`: one `equinox.Partial`, whose
    # function is the watched wrapper, flattening as Equinox's does.
    class M(eqx.Module):
        w: Any

        @eqx.filter_jit
        def f(self, x):
            return x * self.w

    m = M(jnp.ones(2))
    bound = m.f
    assert type(bound).__name__ == "Partial"
    assert type(bound.func) is _jitwrap._JittedModule
    assert bound.args == (m,)
    assert (bound(x) == x).all()
    assert [p for p, _ in paths(bound)] == [
        p for p, _ in paths(type(bound)(bound.func._typecheck_guard_jitted, m))
    ]


def test_every_jitted_callable_is_named_whatever_its_type_lacks():
    # jaxlib 0.4's `PmapFunction` has no `__module__`: reading what a line calls
    # raised there, inside the profiler's bookkeeping, and the check went
    # unreported.
    from typecheck_guard._guard import _callee

    for factory in (jax.jit, jax.pmap, eqx.filter_jit):
        plain = _original(factory)(_double)
        found = _callee.jitted_call(plain)
        assert found is None or found[0] in (
            "jax.jit",
            "jax.pmap",
            "equinox.filter_jit",
        ), found
    assert _callee.jitted_call(_original(eqx.filter_jit)(_double))[0] == (
        "equinox.filter_jit"
    )
    ours = eqx.filter_jit(_double)
    assert _callee.jitted_call(ours) == ("equinox.filter_jit", _double)
