"""`unflatten_safe` skips a check only for what JAX rebuilds by unflattening, and
keeps every other check (issue: exact unflatten detection).

Each test here failed before the decision table of `_unflatten/_safe.py` was rewritten:
either a check that must run was skipped inside a block, or a program that rebuilds
a tree of placeholders crashed on a check that must not run.
"""

import asyncio
import dataclasses
from typing import Annotated

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import Array, Float, PyTree, jaxtyped

import typecheck_guard
from helpers import make_early, require, requires
from typecheck_guard._unflatten._state import block as _state

# At module level: the annotations below are strings (`from __future__ import
# annotations`), which jaxtyping resolves in the module's globals.
try:
    from beartype.vale import Is

    Positive = Annotated[Float[Array, " n"], Is[lambda x: bool((x > 0).all())]]
except ImportError:  # pragma: no cover
    Positive = None


def _beartype_only(typecheck):
    if typecheck.name != "beartype":
        pytest.skip("beartype validators and beartype's one-item container checks")


# Checks that must run.


def test_value_validators_are_never_cached(typecheck):
    _beartype_only(typecheck)

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class S:
        x: Positive  # pyright: ignore[reportInvalidTypeForm]

    with pytest.raises(typecheck.errors):
        S(-jnp.ones(3))
    with typecheck_guard.unflatten_safe():
        S(jnp.ones(3))
        with pytest.raises(typecheck.errors):
            S(-jnp.ones(3))


def test_dict_keys_that_jax_treats_as_equal(typecheck):
    if typecheck.name == "beartype":
        require("beartype", "0.18.2", "older beartype checks no dict items")

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class S:
        d: dict[bool, Float[Array, ""]]

    x = jnp.ones(())
    assert jax.tree.structure({True: x}) == jax.tree.structure({1: x})
    with typecheck_guard.unflatten_safe():
        S({True: x})
        with pytest.raises(typecheck.errors):
            S({1: x})


def test_dict_order(typecheck):
    # beartype checks the first item of a dict; JAX's treedef sorts the keys.
    _beartype_only(typecheck)
    require("beartype", "0.18.2", "older beartype checks no dict items")

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class S:
        d: dict[str, Float[Array, "3"]]

    good_first = {"a": jnp.ones(3), "b": jnp.ones(4)}
    bad_first = {"b": jnp.ones(4), "a": jnp.ones(3)}
    S(good_first)
    with pytest.raises(typecheck.errors):
        S(bad_first)
    with typecheck_guard.unflatten_safe():
        S(good_first)
        with pytest.raises(typecheck.errors):
            S(bad_first)


def _train_state(typecheck):
    from flax.training import train_state

    @jaxtyped(typechecker=typecheck)
    class TS(train_state.TrainState):
        params: Float[Array, "3"]

    return TS


@requires(
    "jaxtyping",
    "0.3.3",
    "a typechecked TrainState subclass: older jaxtyping can't resolve optax's "
    "`ArrayTree` forward reference",
)
# The checks run in the callback on every call, by design: the runtime guard sees them.
@pytest.mark.allow_runtime_typechecks
@pytest.mark.parametrize("callback", ["pure_callback", "debug.callback"])
def test_constructions_in_host_callbacks_are_checked(callback, typecheck):
    import optax

    TS = _train_state(typecheck)
    caught = []

    def host(x):
        try:
            TS.create(apply_fn=None, params=jnp.ones(4), tx=optax.sgd(0.1))
        except typecheck.errors:
            caught.append(True)
        return x

    @jax.jit
    def f(x):
        if callback == "pure_callback":
            return jax.pure_callback(host, jax.ShapeDtypeStruct((), jnp.float32), x)
        jax.debug.callback(host, x)
        return x

    guarded = typecheck_guard.unflatten_safe(f)
    for _ in range(3):
        jax.block_until_ready(guarded(jnp.float32(1.0)))
    jax.effects_barrier()
    assert caught == [True, True, True]


def test_a_registered_unflatten_called_by_the_user_is_a_construction(typecheck):
    class Point:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, "3"]):
            self.x = x

        @classmethod
        def from_parts(cls, aux, children):
            return cls(*children)

    jax.tree_util.register_pytree_node(
        Point, lambda p: ((p.x,), None), Point.from_parts
    )
    p = Point(jnp.ones(3))
    step = typecheck_guard.unflatten_safe(jax.jit(lambda p: p))
    step(p)
    with typecheck_guard.unflatten_safe():
        jax.tree.map(lambda v: v, p)
        typecheck.reset()
        jax.tree.map(lambda v: v, p)  # JAX called it: an unflatten
        assert typecheck.calls == 0
        with pytest.raises(typecheck.errors):
            Point.from_parts(None, [jnp.ones(5)])


@pytest.mark.parametrize(
    "how", ["tree.map(cls)", "jit(cls)", "eval_shape(cls)", "vmap(cls)"]
)
def test_jax_calling_the_class_itself_is_a_construction(how, typecheck):
    # JAX code that calls a function the user passed is not JAX rebuilding a tree,
    # even when that function is the class and the fields come as keywords.
    Early = make_early(typecheck)
    bad = {"x": jnp.ones(3), "y": jnp.ones(4)}
    calls = {
        "tree.map(cls)": lambda: jax.tree.map(Early, [bad["x"]], [bad["y"]]),
        "jit(cls)": lambda: jax.jit(Early)(**bad),
        "eval_shape(cls)": lambda: jax.eval_shape(Early, **bad),
        "vmap(cls)": lambda: jax.vmap(Early)(x=jnp.ones((2, 3)), y=jnp.ones((2, 4))),
    }
    with typecheck_guard.unflatten_safe():
        Early(jnp.ones(3), jnp.ones(3))
        with pytest.raises(typecheck.errors):
            calls[how]()


@pytest.mark.allow_runtime_typechecks  # the callback's check runs on every call
def test_a_host_callback_calling_the_class_is_a_construction(typecheck):
    Early = make_early(typecheck)
    caught = []

    def host(**fields):
        try:
            return Early(**fields).x
        except typecheck.errors:
            caught.append(True)
            return fields["x"]

    f = jax.jit(
        lambda x, y: jax.pure_callback(
            host, jax.ShapeDtypeStruct((3,), jnp.float32), x=x, y=y
        )
    )
    with typecheck_guard.unflatten_safe():
        Early(jnp.ones(3), jnp.ones(3))
        jax.block_until_ready(f(jnp.ones(3), jnp.ones(4)))
    jax.block_until_ready(typecheck_guard.unflatten_safe(f)(jnp.ones(3), jnp.ones(4)))
    assert caught == [True, True]


# Checks that must not run: JAX rebuilding a tree of placeholders.


def _placeholder_programs(Early):
    def init():
        return Early(jnp.ones(3), jnp.ones(3))

    def none_leaves(s):
        return jax.tree.map(lambda _: None, s)

    def partition_specs(s):
        return jax.tree.map(lambda _: jax.sharding.PartitionSpec(), s)

    return {
        "tree.map(None)": lambda s: none_leaves(s),
        "eval_shape(init)": lambda s: jax.eval_shape(init),
        "PartitionSpec tree": lambda s: partition_specs(s),
        "tree.map(None) in jit": lambda s: jax.jit(
            lambda t: jax.tree.map(lambda a: a * 2, (t, none_leaves(t)))[0]
        )(s),
        "eval_shape in jit": lambda s: jax.jit(lambda t: (jax.eval_shape(init), t)[1])(
            s
        ),
    }


@pytest.mark.parametrize(
    "program",
    [
        "tree.map(None)",
        "eval_shape(init)",
        "PartitionSpec tree",
        "tree.map(None) in jit",
        "eval_shape in jit",
    ],
)
def test_placeholder_trees_run_inside_a_block(program, typecheck):
    Early = make_early(typecheck)
    s = Early(jnp.ones(3), jnp.ones(3))
    run = _placeholder_programs(Early)[program]
    with pytest.raises(typecheck.errors):  # without the plugin
        run(s)
    with typecheck_guard.unflatten_safe():
        run(s)
    guarded = typecheck_guard.unflatten_safe(jax.jit(lambda t: (run(t), t)[1]))
    guarded(s)


def test_nnx_value_and_grad_over_a_typechecked_struct(typecheck):
    from flax import nnx

    Early = make_early(typecheck)

    class Model(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones(3))

    def loss(model, s):
        return jnp.sum(model.w[...] * s.x * s.y)

    model, s = Model(), Early(jnp.ones(3), jnp.ones(3))
    with typecheck_guard.unflatten_safe():
        nnx.value_and_grad(loss, argnums=(0, 1))(model, s)


def test_constructions_in_traced_code_are_still_checked(typecheck):
    Early = make_early(typecheck)
    bad = (jnp.ones(3), jnp.ones(4))
    with typecheck_guard.unflatten_safe():
        with pytest.raises(typecheck.errors):
            jax.jit(lambda: Early(*bad))()
        with pytest.raises(typecheck.errors):
            jax.eval_shape(lambda: Early(*bad))
        with pytest.raises(typecheck.errors):
            Early(*bad)
    with pytest.raises(typecheck.errors):
        typecheck_guard.unflatten_safe(jax.jit(lambda: Early(*bad)))()


def test_tree_operations_in_a_block_skip_the_check(typecheck):
    Early = make_early(typecheck)
    s = Early(jnp.ones(3), jnp.ones(3))
    leaves, treedef = jax.tree.flatten(s)
    with typecheck_guard.unflatten_safe():
        typecheck.reset()
        jax.tree.unflatten(treedef, leaves)
        jax.tree.map(lambda v: v + 1, s)
        jax.tree_util.tree_map_with_path(lambda p, v: v, s)
        assert typecheck.calls == 0


# Uncacheable classes are checked every time, not skipped.


def test_uncacheable_annotations_are_checked_every_time(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Listed:
        xs: list[Float[Array, "3"]]

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Treed:
        xs: PyTree[Float[Array, "3"]]

    from typecheck_guard._unflatten._verdict import cacheable

    assert not cacheable(Listed)
    assert cacheable(Treed)
    with typecheck_guard.unflatten_safe():
        Listed([jnp.ones(3)])
        typecheck.reset()
        Listed([jnp.ones(3)])
        assert typecheck.calls > 0
        Treed([jnp.ones(3)])
        typecheck.reset()
        Treed([jnp.ones(3)])
        assert typecheck.calls == 0


# Generators and coroutines.


def test_decorated_generator_covers_every_resumption(typecheck):
    Early = make_early(typecheck)
    s = Early(jnp.ones(3), jnp.ones(3))
    seen = []

    @typecheck_guard.unflatten_safe
    def gen(n):
        for _ in range(n):
            seen.append(_state.get() is not None)
            sent = yield jax.tree.map(lambda _: None, s)
            seen.append(sent)

    g = gen(3)
    assert seen == []  # creating it runs nothing
    next(g)
    outside = _state.get()
    g.send("a")
    g.send("b")
    with pytest.raises(StopIteration):
        g.send("c")
    assert outside is None
    assert seen == [True, "a", True, "b", True, "c"]


def test_decorated_generator_close_and_throw(typecheck):
    inside = []

    @typecheck_guard.unflatten_safe
    def gen():
        try:
            yield 1
        except KeyError:
            inside.append(("thrown", _state.get() is not None))
            yield 2
        finally:
            inside.append(("finally", _state.get() is not None))

    g = gen()
    assert next(g) == 1
    assert g.throw(KeyError) == 2
    g.close()
    assert inside == [("thrown", True), ("finally", True)]
    assert _state.get() is None


def test_decorated_coroutine_and_async_generator(typecheck):
    Early = make_early(typecheck)
    s = Early(jnp.ones(3), jnp.ones(3))

    @typecheck_guard.unflatten_safe
    async def coro():
        await asyncio.sleep(0)
        jax.tree.map(lambda _: None, s)
        return _state.get() is not None

    @typecheck_guard.unflatten_safe
    async def agen():
        for _ in range(2):
            await asyncio.sleep(0)
            yield _state.get() is not None

    async def main():
        first = await coro()
        items = [item async for item in agen()]
        return first, items, _state.get()

    assert asyncio.run(main()) == (True, [True, True], None)


def test_dataclass_replace_is_a_construction(typecheck):
    Early = make_early(typecheck)
    s = Early(jnp.ones(3), jnp.ones(3))
    with typecheck_guard.unflatten_safe():
        with pytest.raises(typecheck.errors):
            s.replace(y=jnp.ones(4))
        with pytest.raises(typecheck.errors):
            dataclasses.replace(s, y=jnp.ones(4))


@pytest.mark.parametrize("jit", ["eqx.filter_jit", "nnx.jit"])
@pytest.mark.parametrize("form", ["with", "wrapped"])
def test_filter_jit_and_nnx_jit_rebuild_placeholders_in_a_block(jit, form, typecheck):
    # Both rebuild the state with placeholder leaves (bools, None) from their own
    # dispatch code and from `tree_map`: unflattens, skipped; the check in the
    # traced step still runs once.
    import equinox as eqx
    from flax import nnx

    wrap = {"eqx.filter_jit": eqx.filter_jit, "nnx.jit": nnx.jit}[jit]
    Early = make_early(typecheck)
    step = wrap(lambda s: s.replace(x=s.x + 1))
    s = Early(jnp.ones(3), jnp.ones(3))
    if form == "wrapped":
        guarded = typecheck_guard.unflatten_safe(step)
        s = guarded(s)
        typecheck.reset()
        for _ in range(5):
            s = guarded(s)
    else:
        with typecheck_guard.unflatten_safe():
            s = step(s)
            typecheck.reset()
            for _ in range(5):
                s = step(s)
    assert typecheck.calls == 0
    assert float(s.x[0]) == 7.0


def test_a_construction_inside_another_class_unflatten_is_checked(typecheck):
    # Row 4 is about the class the unflatten function was registered for. An
    # unflatten that builds some other checked object from its children is user code
    # making a construction: checked, as without the plugin.
    class Inner:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, x: Float[Array, "3"]):
            self.x = x

    jax.tree_util.register_pytree_node(
        Inner, lambda i: ((i.x,), None), lambda _, c: Inner(*c)
    )

    class Outer:  # checked too, so that its own unflatten is guarded
        @jaxtyped(typechecker=typecheck)
        def __init__(self, inner: object):
            self.inner = inner

    def outer_unflatten(aux, children):
        # Rebuilds `inner` from the leaf: a construction of Inner.
        return Outer(Inner(children[0]))

    jax.tree_util.register_pytree_node(
        Outer, lambda o: ((o.inner.x,), None), outer_unflatten
    )
    outer = Outer(Inner(jnp.ones(3)))
    jax.tree.map(lambda v: v, outer)
    with pytest.raises(typecheck.errors):  # without the plugin
        jax.tree.map(lambda v: jnp.ones(4), outer)
    with typecheck_guard.unflatten_safe():
        jax.tree.map(lambda v: v, outer)
        with pytest.raises(typecheck.errors):
            jax.tree.map(lambda v: jnp.ones(4), outer)
