"""`unflatten_safe`, second round (issue: exactness, second round): each test here
failed on the previous main, with a lost check, a crash or a changed value.

The differential generators (`tests/differential/`) cover the same causes as regions;
these tests name each cause once, with a count of the checks that ran.
"""

import contextlib
import dataclasses
import functools as ft
import sys
from typing import Annotated, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import jaxtyping
import pytest
from flax import struct
from jaxtyping import Array, Float, jaxtyped

import typecheck_guard
from typecheck_guard._compat import _versions

# jaxtyping 0.2 checks a dataclass's fields after `__init__` without reading
# `__no_type_check__`; 0.3 wraps `__init__` in its function wrapper, which reads it.
_JAXTYPING_READS_NO_TYPE_CHECK = _versions.parse(
    _versions.installed("jaxtyping") or "0"
) >= _versions.parse("0.3")

try:
    from beartype.vale import Is

    NonNegative = Annotated[Float[Array, " n"], Is[lambda x: bool((x >= 0).all())]]
except ImportError:  # pragma: no cover
    NonNegative = None


def _beartype_only(typecheck):
    if typecheck.name != "beartype":
        pytest.skip("a beartype validator")


# 1. Row 2 applies to the very instance judged an unflatten, nothing nested in it.


def _model(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Scale:
        s: NonNegative  # pyright: ignore[reportInvalidTypeForm]

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Model:
        w: Float[Array, " n"]
        scale: Float[Array, " n"]

        def __post_init__(self):
            object.__setattr__(self, "derived", Scale(self.scale))

    return Scale, Model


def test_a_cache_hit_does_not_skip_constructions_in_post_init(typecheck):
    _beartype_only(typecheck)
    _, Model = _model(typecheck)
    with pytest.raises(typecheck.errors):
        Model(jnp.ones(3), -jnp.ones(3))
    with typecheck_guard.unflatten_safe():
        Model(jnp.ones(3), jnp.ones(3))
        Model(jnp.ones(3), jnp.ones(3))  # a hit for Model's own check
        with pytest.raises(typecheck.errors):
            Model(jnp.ones(3), -jnp.ones(3))  # Scale is checked all the same


def test_an_unflatten_does_not_skip_constructions_nested_in_it(typecheck):
    _beartype_only(typecheck)
    _, Model = _model(typecheck)
    model = Model(jnp.ones(3), jnp.ones(3))
    with pytest.raises(typecheck.errors):  # plain JAX: Scale(-1) is checked
        jax.tree.map(lambda v: -v, model)
    with typecheck_guard.unflatten_safe(), pytest.raises(typecheck.errors):
        jax.tree.map(lambda v: -v, model)


def test_a_custom_node_building_another_checked_class_in_init(typecheck):
    _beartype_only(typecheck)

    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Precision:
        p: NonNegative  # pyright: ignore[reportInvalidTypeForm]

    @jax.tree_util.register_pytree_node_class
    class Gaussian:
        @jaxtyped(typechecker=typecheck)
        def __init__(self, var: Float[Array, " n"]):
            self.var = var
            self.precision = Precision(1 / var)

        def tree_flatten(self):
            return (self.var,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    g = Gaussian(jnp.ones(2))
    with typecheck_guard.unflatten_safe():
        jax.tree.map(lambda v: v * 2, g)
        with pytest.raises(typecheck.errors):
            jax.tree.map(lambda v: -v, g)


# 2. A pass under a checker's off-switch checked nothing: no verdict.


def test_a_pass_under_jaxtyping_disable_is_not_stored(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class P:
        x: Float[Array, " n"]

    wrong = jnp.ones((2, 2), dtype=jnp.int32)
    with typecheck_guard.unflatten_safe():
        jaxtyping.config.update("jaxtyping_disable", True)
        try:
            P(wrong)
        finally:
            jaxtyping.config.update("jaxtyping_disable", False)
        with pytest.raises(typecheck.errors):
            P(wrong)


# 3. Computing a key never raises where plain JAX would not.


def test_a_key_that_flattens_a_half_built_instance(typecheck):
    _beartype_only(typecheck)
    from beartype import beartype

    @jax.tree_util.register_pytree_node_class
    @beartype
    @dataclasses.dataclass
    class Half:
        x: jax.Array

        def __post_init__(self):
            self.y = self.x * 2

        def tree_flatten(self):
            return (self.x, self.y), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(children[0])

    with typecheck_guard.unflatten_safe():
        assert Half(jnp.ones(2)).y.tolist() == [2.0, 2.0]
        assert Half(jnp.ones(2)).y.tolist() == [2.0, 2.0]


def test_a_static_dict_whose_keys_do_not_sort(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Static:
        x: Float[Array, " n"]
        meta: dict = struct.field(
            pytree_node=False, default_factory=lambda: {0: 1, "ignore": 2}
        )

    with typecheck_guard.unflatten_safe():
        Static(jnp.ones(2))
        Static(jnp.ones(2))
        with pytest.raises(typecheck.errors):
            Static(jnp.ones((2, 2)))


def test_a_protocol_with_data_members_is_uncacheable():
    from typecheck_guard._unflatten._verdict import cacheable

    @runtime_checkable
    class Named(Protocol):
        name: str

    @runtime_checkable
    class Callable_(Protocol):
        def __call__(self) -> None: ...

    @dataclasses.dataclass
    class WithData:
        thing: Named

    @dataclasses.dataclass
    class WithMethods:
        thing: Callable_

    assert not cacheable(WithData)
    assert cacheable(WithMethods)


# 4. Placeholder trees: AOT, and typeguard 2 directly on `__init__`.


def _stepper(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class State:
        x: Float[Array, " n"]

    def step(s):
        return State(s.x * 2)

    return State, step


def _aot(jitted, state):
    lowered = jitted.lower(state)
    compiled = lowered.compile()
    # What each stage has in the installed JAX (`out_info` is jax 0.4.38+).
    for stage in (lowered, compiled):
        for name in ("in_avals", "out_info", "args_info", "out_avals"):
            if hasattr(type(getattr(stage, "__wrapped__", stage)), name):
                getattr(stage, name)
    compiled.memory_analysis()
    return compiled(state).x.tolist()


def test_aot_runs_in_a_block(typecheck):
    State, step = _stepper(typecheck)
    state = State(jnp.ones(2))
    with typecheck_guard.unflatten_safe():
        assert _aot(jax.jit(step), state) == [2.0, 2.0]


def test_aot_runs_through_the_wrapper(typecheck):
    State, step = _stepper(typecheck)
    state = State(jnp.ones(2))
    jitted = typecheck_guard.unflatten_safe(jax.jit(step))
    assert _aot(jitted, state) == [2.0, 2.0]
    with pytest.raises(typecheck.errors):  # and the function is still traced checked
        typecheck_guard.unflatten_safe(jax.jit(lambda s: State(s.x[None]))).lower(state)


def test_typeguard2_directly_on_init_is_guarded():
    from typeguard import typechecked

    @struct.dataclass
    class Direct:
        x: jax.Array

        @typechecked
        def __init__(self, x: jax.Array):
            object.__setattr__(self, "x", x)

    assert [r.checkers for r in typecheck_guard.unadapted() if r.cls is Direct] == [
        ("typeguard",)
    ]
    with typecheck_guard.unflatten_safe():
        assert jax.tree.map(lambda _: None, Direct(jnp.ones(2))).x is None
        with pytest.raises(TypeError):
            Direct("not an array")


# 5. Under `jax.disable_jit()`, a dispatch frame calls the user's class directly.


def test_a_jitted_class_under_disable_jit_is_a_construction(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class S:
        x: Float[Array, " n"]
        y: Float[Array, " n"]

    bad = jnp.ones((2, 2))
    with jax.disable_jit():
        with pytest.raises(typecheck.errors):
            typecheck_guard.unflatten_safe(jax.jit(S))(x=jnp.ones(2), y=bad)
        with pytest.raises(typecheck.errors):
            typecheck_guard.unflatten_safe(jax.jit(ft.partial(S, jnp.ones(2))))(bad)
        with typecheck_guard.unflatten_safe(), pytest.raises(typecheck.errors):
            jax.jit(ft.partial(S, jnp.ones(2)))(bad)


# 6. A hand-written `__slots__` is not `slots=True` (Python 3.10 and 3.11 don't say).


@pytest.mark.parametrize("extra", ["__dict__", "__weakref__"])
def test_hand_written_slots_with_an_init_false_default(installed, extra):
    namespace = {"__slots__": (extra,), "__annotations__": {"x": jax.Array}}
    if extra == "__weakref__":
        pytest.skip("a dataclass field with a default needs __dict__ to be set")
    namespace["__annotations__"]["n"] = int
    namespace["n"] = dataclasses.field(init=False, default=3)
    cls = dataclasses.dataclass(type("Slotted", (), namespace))
    jax.tree_util.register_dataclass(cls, data_fields=["x"], meta_fields=[])
    obj = cls(jnp.ones(1))
    out = jax.tree.map(lambda v: v + 1, obj)
    assert vars(out) == {"x": out.x} and vars(obj) == {"x": obj.x}
    cls.n = 4  # the field follows its class attribute, as JAX's unflatten leaves it
    assert out.n == 4


@pytest.mark.skipif(sys.version_info < (3, 10), reason="slots=True needs 3.10")
def test_slots_true_with_an_init_false_default(installed):
    @dataclasses.dataclass(slots=True)
    class Slots:
        x: jax.Array
        n: int = dataclasses.field(init=False, default=3)

    jax.tree_util.register_dataclass(Slots, data_fields=["x"], meta_fields=[])
    out = jax.tree.map(lambda v: v + 1, Slots(jnp.ones(1)))
    assert out.n == 3 and out.x.tolist() == [2.0]


def test_the_installed_rule_sees_decorators_above_the_registration(installed):
    calls = []

    def as_float32(init):
        # Not a typechecker: it changes what `__init__` stores.
        @ft.wraps(init)
        def cast(self, *args, **kwargs):
            calls.append(1)
            args = tuple(jnp.asarray(a, jnp.float32) for a in args)
            kwargs = {k: jnp.asarray(v, jnp.float32) for k, v in kwargs.items()}
            init(self, *args, **kwargs)

        return cast

    def decorate(cls):
        cls.__init__ = as_float32(cls.__init__)
        return cls

    @decorate
    @struct.dataclass
    class Cast:
        x: jax.Array

    made = Cast(jnp.ones(2, jnp.int32))
    assert made.x.dtype == jnp.float32
    out = jax.tree.map(lambda v: v.astype(jnp.int32), made)
    # JAX's unflatten runs the decorator: plain JAX returns float32 here too.
    assert out.x.dtype == jnp.float32 and len(calls) == 2
    assert "as decorated when first unflattened" in (
        typecheck_guard._adapt._register.marked_why(Cast) or ""
    )


def test_no_type_check_set_on_a_guarded_init_reaches_jaxtyping(typecheck):
    # jaxtyping >= 0.3 reads `__no_type_check__` on its own wrapper at every call
    # (0.2 checks a dataclass's fields whatever it says); the guard that stands in
    # for the wrapper shares its attributes, so setting it on `Cls.__init__` does
    # what it does without us, on every version.
    def switched_off_call(guard):
        @jaxtyped(typechecker=typecheck)
        @struct.dataclass
        class Switched:
            x: Float[Array, " n"]

        with guard():
            Switched.__init__.__no_type_check__ = True
            try:
                Switched(jnp.ones((2, 2)))
                outcome = "ran"
            except typecheck.errors:
                outcome = "checked"
            finally:
                del Switched.__init__.__no_type_check__
            with pytest.raises(typecheck.errors):
                Switched(jnp.ones((2, 2)))
        return outcome

    plain = switched_off_call(contextlib.nullcontext)
    assert switched_off_call(typecheck_guard.unflatten_safe) == plain
    if _JAXTYPING_READS_NO_TYPE_CHECK:
        assert plain == "ran"
