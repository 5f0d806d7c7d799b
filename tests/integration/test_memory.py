"""Memory: our caches are bounded, we hold no strong reference to the classes we
adapt or guard or to their instances, and no reference cycle of ours keeps device
arrays alive after a step.

JAX's pytree registry keeps every registered class alive for the life of the
process (it has no way to unregister one): a class registered with JAX is never
collected, with or without us (and flax.serialization keeps every flax.struct class
too). So the tests of "we add no strong reference" run with
JAX's registration replaced by a stub that keeps only a weak reference, and a
control test shows that with the real registration the class does stay alive.
"""

import dataclasses
import gc
import types
import weakref
from collections.abc import Callable, Iterator

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from beartype import beartype
from flax import serialization, struct
from jax._src import tree_util as jax_tree_util
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from helpers import make_early, run_cached
from typecheck_guard._unflatten import _frames, _guards, _safe

# --- caches are bounded ------------------------------------------------------------


def _verdicts(cls):
    from typecheck_guard._unflatten._guards import guard_info

    info = guard_info(cls.__init__)
    assert info is not None
    return info.verdicts


def test_verdict_cache_bounded_under_shape_churn(typecheck):
    Early = make_early(typecheck)
    # `device_put` of numpy data: a new shape compiles nothing.
    arrays = [jax.device_put(np.zeros(n, np.float32)) for n in range(1, 700)]
    with typecheck_guard.unflatten_safe():
        for a in arrays:
            Early(a, a)
        verdicts = _verdicts(Early)
        assert len(verdicts) == verdicts.maxsize == 256
        # The most recent signatures are still remembered ...
        typecheck.reset()
        for a in arrays[-100:]:
            Early(a, a)
        assert typecheck.calls == 0
        # ... the oldest were evicted, and are checked again.
        Early(arrays[0], arrays[0])
        assert typecheck.calls > 0
    assert len(verdicts) == 256


def test_verdict_cache_bounded_for_jitted_outputs(typecheck):
    # Shape churn through a jitted step: a new output signature per input shape.
    # (With a small bound: each new shape compiles the step.)
    Early = make_early(typecheck)
    step = jax.jit(lambda s: s.replace(x=s.x + 1))
    with typecheck_guard.unflatten_safe():
        state = Early(jnp.ones(1), jnp.ones(1))
        verdicts = _verdicts(Early)
        verdicts.maxsize = 8
        for n in range(1, 20):
            a = jax.device_put(np.zeros(n, np.float32))
            step(Early(a, a))
        assert len(verdicts) == 8
        # Each shape's only call above compiled the step, whose output JAX rebuilt
        # while compiling (not checked in a block): the first cache-hit call checks
        # its output's signature once, as without the runtime guard watching.
        step(Early(a, a))
        typecheck.reset()
        step(Early(a, a))  # the latest signatures: hits
        assert typecheck.calls == 0
    del state


class Payload:
    pass


def test_objects_are_not_kept_as_verdict_keys():
    # A leaf hashed by identity would never give a hit, yet would be kept alive by
    # the cache: such a construction is checked every time, and nothing is stored.
    @jax.tree_util.register_pytree_node_class
    class Holder:
        @beartype
        def __init__(self, payload: Payload | int):
            self.payload = payload

        def tree_flatten(self):
            return (self.payload,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    refs = []
    with typecheck_guard.unflatten_safe():
        Holder(1)
        for _ in range(300):
            payload = Payload()
            refs.append(weakref.ref(payload))
            Holder(payload)
        del payload
    assert len(_verdicts(Holder)) == 1  # only the int
    gc.collect()
    assert all(r() is None for r in refs)


def test_library_code_cache_does_not_grow_with_calls(typecheck):
    Early = make_early(typecheck)
    step = typecheck_guard.unflatten_safe(jax.jit(lambda s: s.replace(x=s.x * 2)))
    state = run_cached(step, Early(jnp.ones(2), jnp.ones(2)), 3)
    before = (len(_frames._kinds), len(_guards._unflatten_codes))
    run_cached(step, state, 20)
    assert (len(_frames._kinds), len(_guards._unflatten_codes)) == before


# --- we hold no strong reference to classes ----------------------------------------


@pytest.fixture
def weak_jax_registry(monkeypatch) -> Iterator[list]:
    """Replace JAX's registration with a stub that keeps a weak reference only."""
    registered: list[weakref.ref] = []

    def register_pytree_with_keys(nodetype, *args, **kwargs):
        registered.append(weakref.ref(nodetype))

    monkeypatch.setattr(
        jax_tree_util, "register_pytree_with_keys", register_pytree_with_keys
    )
    yield registered


def _collected(ref: weakref.ref) -> bool:
    gc.collect()
    return ref() is None


def _make_and_forget(make) -> weakref.ref:
    cls = make()
    ref = weakref.ref(cls)
    del cls
    return ref


def _dataclass():
    @jaxtyped(typechecker=beartype)
    @dataclasses.dataclass
    class Gone:
        x: Float[Array, " n"]
        tag: str = dataclasses.field(default="t", metadata=dict(static=True))

    return Gone


def test_jax_itself_keeps_registered_classes_alive():
    # The control: with the real registration, nothing can collect the class.
    ref = _make_and_forget(lambda: typecheck_guard.register_dataclass(_dataclass()))
    assert not _collected(ref)


def test_register_dataclass_holds_no_reference(weak_jax_registry):
    def make():
        cls = typecheck_guard.register_dataclass(_dataclass())
        assert typecheck_guard._adapt._register.adapted_how(cls) is not None
        cls(jnp.ones(2))
        return cls

    ref = _make_and_forget(make)
    assert [r() for r in weak_jax_registry] == [ref()]
    assert _collected(ref)


def test_install_route_holds_no_reference(weak_jax_registry, installed):
    def make():
        @jaxtyped(typechecker=beartype)
        @struct.dataclass
        class GoneStruct:
            x: Float[Array, " n"]

        assert typecheck_guard._adapt._register.adapted_how(GoneStruct) is not None
        GoneStruct(jnp.ones(2))
        # flax.serialization keeps every flax.struct class in a registry of its
        # own, strongly; that one is flax's, not ours.
        serialization._STATE_DICT_REGISTRY.pop(GoneStruct)
        return GoneStruct

    ref = _make_and_forget(make)
    assert len(weak_jax_registry) == 1
    assert _collected(ref)


def test_chex_adapter_holds_no_reference(weak_jax_registry, installed):
    def make():
        @chex.dataclass
        class GoneChex:
            x: jax.Array

        GoneChex(x=jnp.ones(2))  # chex registers on first construction
        assert (
            typecheck_guard._adapt._register.adapted_how(GoneChex) == "chex.dataclass"
        )
        return GoneChex

    ref = _make_and_forget(make)
    assert len(weak_jax_registry) == 1
    assert _collected(ref)


def test_unflatten_safe_guard_holds_no_reference(monkeypatch):
    # A registry we control stands in for JAX's, so that only our references
    # remain once the class is dropped from it.
    fake: dict[type, object] = {}
    monkeypatch.setattr(_safe, "_registry", fake)
    monkeypatch.setattr(_safe, "_seen", 0)
    monkeypatch.setattr(
        "typecheck_guard._compat._jax.registry_items", lambda: list(fake.copy().items())
    )

    def make():
        class GoneNode:
            @jaxtyped(typechecker=beartype)
            def __init__(self, x: Float[Array, " n"]):
                self.x = x

        def unflatten(aux, children):
            return GoneNode(*children)

        fake[GoneNode] = types.SimpleNamespace(from_iter=unflatten)
        original = GoneNode.__init__
        with typecheck_guard.unflatten_safe():
            assert GoneNode.__init__ is not original  # guarded
            GoneNode(jnp.ones(2))
            GoneNode(jnp.ones(2))  # a verdict-cache hit
        return GoneNode

    ref = _make_and_forget(make)
    fake.clear()
    assert _collected(ref)
    typecheck_guard.uninstall()  # unguards what is left: nothing, and no error


# --- instances and device arrays ---------------------------------------------------


def _steps(mode, typecheck, request):
    if mode == "install":
        request.getfixturevalue("installed")
    Early = make_early(typecheck)
    step = jax.jit(lambda s: s.replace(x=s.x * 2, y=s.y + 1))
    if mode == "guarded-call":
        step = typecheck_guard.unflatten_safe(step)
    return Early, step


@pytest.fixture
def no_gc() -> Iterator[None]:
    # Only reference counting frees memory here: anything kept alive by a cycle
    # stays alive, and the test sees it.
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


MODES = ["install", "guarded-call", "with-block"]


@pytest.mark.parametrize("mode", MODES)
def test_instances_are_collected(mode, typecheck, request):
    Early, step = _steps(mode, typecheck, request)
    with typecheck_guard.unflatten_safe() if mode == "with-block" else _nothing():
        state = run_cached(step, Early(jnp.ones(3), jnp.ones(3)), 5)
        ref = weakref.ref(state)
        del state
    assert _collected(ref)


@pytest.mark.parametrize("mode", MODES)
def test_no_cycle_keeps_device_arrays_alive(mode, typecheck, request, no_gc):
    Early, step = _steps(mode, typecheck, request)
    with typecheck_guard.unflatten_safe() if mode == "with-block" else _nothing():
        # Compile outside the measurement.
        run_cached(step, Early(jnp.ones(3), jnp.ones(3)), 2)
        before = {id(a) for a in jax.live_arrays()}
        state = run_cached(step, Early(jnp.ones(3), jnp.ones(3)), 10)
        leaves = [weakref.ref(leaf) for leaf in jax.tree.leaves(state)]
        assert len({id(a) for a in jax.live_arrays()} - before) >= 2
        del state
    # Freed by reference counting alone, the moment the last reference went.
    assert all(r() is None for r in leaves)
    assert {id(a) for a in jax.live_arrays()} - before == set()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


def test_functions_are_keyed_weakly():
    # A TrainState's `apply_fn`, an optax transformation's `init`/`update`: the same
    # function comes back on every unflatten, so it must give hits, without the
    # cache keeping it alive.
    @jax.tree_util.register_pytree_node_class
    class WithFn:
        @beartype
        def __init__(self, x: jax.Array, fn: Callable[[jax.Array], jax.Array]):
            self.x = x
            self.fn = fn

        def tree_flatten(self):
            return (self.x,), self.fn

        @classmethod
        def tree_unflatten(cls, fn, children):
            return cls(*children, fn)

    def make_fn():
        return lambda v: v * 2

    fn = make_fn()
    ref = weakref.ref(fn)
    with typecheck_guard.unflatten_safe():
        WithFn(jnp.ones(2), fn)
        WithFn(jnp.zeros(2), fn)
    verdicts = _verdicts(WithFn)
    assert (verdicts.hits, len(verdicts)) == (1, 1)
    del fn
    gc.collect()
    assert ref() is None
