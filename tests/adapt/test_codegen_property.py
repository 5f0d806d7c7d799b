"""Property tests of the generated flatten/unflatten: for random dataclasses (data and
meta fields, defaults and default factories, `init=False`, `drop_fields`,
inheritance, `kw_only`, `frozen`, `slots`) and random field values, our registration
round-trips exactly as `jax.tree_util.register_dataclass` does, with the same leaves,
keypaths and treedef."""

import dataclasses
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st

import typecheck_guard

NAMES = [f"f{i}" for i in range(8)]
_MISSING = dataclasses.MISSING


class FieldSpec(NamedTuple):
    name: str
    meta: bool  # a static (meta) field
    default: str  # "none", "value" or "factory"
    init: bool
    kw_only: bool
    drop: bool  # in drop_fields (only for init fields with a default)
    default_value: Any


class ClassSpec(NamedTuple):
    base: tuple[FieldSpec, ...]
    sub: tuple[FieldSpec, ...] | None  # None: no inheritance
    frozen: bool
    slots: bool
    infer: bool  # let register_dataclass infer the fields


_hashable = st.one_of(
    st.integers(-5, 5),
    st.text("abc", max_size=3),
    st.none(),
    st.tuples(st.integers(0, 3), st.integers(0, 3)),
)


@st.composite
def field_specs(draw, name: str) -> FieldSpec:
    init = draw(st.booleans()) if draw(st.integers(0, 4)) == 0 else True
    default = draw(st.sampled_from(["none", "value", "factory"]))
    if not init and default == "none":
        # Without a default an init=False field is unset after JAX's unflatten too.
        default = "value"
    return FieldSpec(
        name=name,
        meta=draw(st.booleans()),
        default=default,
        init=init,
        kw_only=draw(st.booleans()),
        drop=init and default != "none" and draw(st.integers(0, 3)) == 0,
        default_value=draw(_hashable),
    )


@st.composite
def class_specs(draw) -> ClassSpec:
    names = draw(st.permutations(NAMES))
    n_base = draw(st.integers(0, 4))
    n_sub = draw(st.integers(0, 3)) if draw(st.booleans()) else None
    base = tuple(draw(field_specs(n)) for n in names[:n_base])
    sub = (
        None
        if n_sub is None
        else tuple(draw(field_specs(n)) for n in names[n_base : n_base + n_sub])
    )
    fields = base + (sub or ())
    return ClassSpec(
        base=base,
        sub=sub,
        frozen=draw(st.booleans()),
        slots=draw(st.booleans()),
        infer=not any(f.drop or not f.init for f in fields) and draw(st.booleans()),
    )


def _field(spec: FieldSpec) -> Any:
    kwargs: dict[str, Any] = dict(init=spec.init, kw_only=spec.kw_only)
    if spec.meta:
        kwargs["metadata"] = {"static": True}
    if spec.default == "value":
        kwargs["default"] = spec.default_value
    elif spec.default == "factory":
        value = spec.default_value
        kwargs["default_factory"] = lambda: [value]  # a fresh object per call
    return dataclasses.field(**kwargs)


def _build(spec: ClassSpec) -> type:
    """A fresh class for `spec` (each registration needs its own)."""

    def make(fields, bases, name, slots):
        namespace = {"__annotations__": {f.name: Any for f in fields}}
        namespace.update({f.name: _field(f) for f in fields})
        cls = type(name, bases, namespace)
        return dataclasses.dataclass(frozen=spec.frozen, slots=slots)(cls)

    base = make(spec.base, (), "Base", spec.slots and spec.sub is None)
    if spec.sub is None:
        return base
    return make(spec.sub, (base,), "Sub", spec.slots)


def _all_fields(spec: ClassSpec) -> tuple[FieldSpec, ...]:
    return spec.base + (spec.sub or ())


def _jax_drop_fields_work() -> bool:
    # jax 0.6's register_dataclass removes `drop_fields` from the init fields with
    # `init_fields.difference_update(*drop_fields)`, i.e. character by character:
    # any name longer than one character is "missing" (fixed in later releases).
    @dataclasses.dataclass
    class Probe:
        ab: int = 0

    try:
        jax.tree_util.register_dataclass(
            Probe, data_fields=[], meta_fields=[], drop_fields=["ab"]
        )
    except ValueError:
        return False
    return True


JAX_DROP_FIELDS_WORK = _jax_drop_fields_work()


def _register(register, cls, spec: ClassSpec):
    if spec.infer:
        return register(cls)
    fields = _all_fields(spec)
    listed = [f for f in fields if f.init and not f.drop]
    return register(
        cls,
        data_fields=[f.name for f in listed if not f.meta],
        meta_fields=[f.name for f in listed if f.meta],
        drop_fields=[f.name for f in fields if f.drop],
    )


_leaf = st.one_of(
    st.integers(-3, 3),
    st.floats(-2, 2, allow_nan=False, width=32),
    st.tuples(st.integers(0, 3), st.sampled_from(["float32", "int32", "bool"])).map(
        lambda s: jnp.asarray(np.arange(s[0] * 2).reshape(s[0], 2) % 3).astype(s[1])
    ),
)
_data = st.recursive(
    _leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.tuples(children, children),
        st.dictionaries(st.sampled_from("xyz"), children, max_size=3),
    ),
    max_leaves=6,
)


def _values(draw, spec: ClassSpec) -> dict[str, Any]:
    values = {}
    for f in _all_fields(spec):
        if not f.init:
            continue
        if f.default != "none" and draw(st.booleans()):
            continue  # leave it to its default
        values[f.name] = draw(_hashable if f.meta else _data)
    return values


def _same(a: Any, b: Any) -> bool:
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(
        type(x) is type(y)
        and np.shape(x) == np.shape(y)
        and np.asarray(x).dtype == np.asarray(y).dtype
        and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(la, lb, strict=True)
    )


def _state(obj: Any, spec: ClassSpec) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in _all_fields(spec)}


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(spec=class_specs(), data=st.data())
def test_round_trip_and_keypaths_match_jax(spec: ClassSpec, data):
    if not JAX_DROP_FIELDS_WORK:
        assume(not any(f.drop for f in _all_fields(spec)))
    try:
        theirs_cls, ours_cls = _build(spec), _build(spec)
    except TypeError:
        # An impossible dataclass (a non-default field after a default one).
        assume(False)
        raise
    _register(jax.tree_util.register_dataclass, theirs_cls, spec)
    _register(typecheck_guard.register_dataclass, ours_cls, spec)
    assert typecheck_guard._adapt._register.adapted_how(ours_cls) is not None

    values = _values(data.draw, spec)
    theirs, ours = theirs_cls(**values), ours_cls(**values)

    # Same leaves, keypaths and structure as JAX's registration.
    (t_paths, t_treedef), (o_paths, o_treedef) = (
        jax.tree_util.tree_flatten_with_path(theirs),
        jax.tree_util.tree_flatten_with_path(ours),
    )
    assert [p for p, _ in o_paths] == [p for p, _ in t_paths]
    assert _same([v for _, v in o_paths], [v for _, v in t_paths])
    assert str(o_treedef) == str(t_treedef)
    assert jax.tree.structure(ours) == jax.tree.structure(ours_cls(**values))

    # Round trip: the same object back, field by field, as JAX gives back.
    o_leaves, o_def = jax.tree.flatten(ours)
    t_leaves, t_def = jax.tree.flatten(theirs)
    ours_back, theirs_back = o_def.unflatten(o_leaves), t_def.unflatten(t_leaves)
    assert type(ours_back) is ours_cls
    for f in _all_fields(spec):
        got, want = getattr(ours_back, f.name), getattr(theirs_back, f.name)
        assert _same(got, want), f
        if f.init and not f.drop:
            # The leaves of a field in the pytree come back as the very same
            # objects (its containers are rebuilt, as by JAX).
            original = jax.tree.leaves(getattr(ours, f.name))
            assert all(
                a is b for a, b in zip(jax.tree.leaves(got), original, strict=True)
            ), f
    if not any(f.drop for f in _all_fields(spec)):
        assert _same(_state(ours_back, spec), _state(ours, spec))
    # Factories run afresh, as JAX's call of __init__ would run them.
    for f in _all_fields(spec):
        if f.default == "factory" and (not f.init or f.drop):
            assert getattr(ours_back, f.name) is not getattr(ours, f.name)

    # tree_map with the identity and with a change goes through unflatten too.
    for fn in (lambda x: x, lambda x: x * 2):
        mapped_ours, mapped_theirs = jax.tree.map(fn, ours), jax.tree.map(fn, theirs)
        assert type(mapped_ours) is ours_cls
        assert _same(_state(mapped_ours, spec), _state(mapped_theirs, spec))


@pytest.mark.skipif(sys.version_info < (3, 10), reason="kw_only and slots")
def test_strategy_covers_the_interesting_cases():
    # The generator reaches each feature (a guard against a strategy that silently
    # stopped producing, say, inheritance).
    seen: set[str] = set()

    @settings(max_examples=200, deadline=None, database=None)
    @given(spec=class_specs())
    def collect(spec):
        fields = _all_fields(spec)
        seen.update(
            name
            for name, present in {
                "inheritance": spec.sub is not None,
                "meta": any(f.meta for f in fields),
                "data": any(not f.meta for f in fields),
                "init=False": any(not f.init for f in fields),
                "drop": any(f.drop for f in fields),
                "kw_only": any(f.kw_only for f in fields),
                "factory": any(f.default == "factory" for f in fields),
                "frozen": spec.frozen,
                "slots": spec.slots,
                "infer": spec.infer,
            }.items()
            if present
        )

    collect()
    assert seen == {
        "inheritance",
        "meta",
        "data",
        "init=False",
        "drop",
        "kw_only",
        "factory",
        "frozen",
        "slots",
        "infer",
    }
