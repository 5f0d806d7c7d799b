"""`install()` unflattens a class through `__new__` only when that is provably what
JAX's unflatten builds: each class here was once unflattened through `__new__` (and
differently from JAX) before the rule of `_adapt/_rule.py`; now its own
`cls(**fields)` runs, marked so that only its check is skipped, with the reason
recorded."""

import dataclasses
import functools as ft
import linecache
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from flax import struct
from jaxtyping import jaxtyped

import typecheck_guard
from helpers import requires
from typecheck_guard._adapt._register import adapted_how, marked_why


def _left_to_jax(cls: type, words: str) -> None:
    """`cls` unflattens through its library's own `cls(**fields)`, marked."""
    assert adapted_how(cls) is not None
    reason = marked_why(cls)
    assert reason is not None and words in reason, reason


def test_init_false_field_set_in_post_init(installed):
    @dataclasses.dataclass
    class D:
        x: jax.Array
        double: Any = dataclasses.field(init=False, default=None)

        def __post_init__(self):
            self.double = self.x * 2

    jax.tree_util.register_dataclass(D, data_fields=["x"], meta_fields=[])
    _left_to_jax(D, "__post_init__")
    d = jax.tree.map(lambda v: v + 1, D(jnp.ones(2)))
    assert d.double.tolist() == [4.0, 4.0]  # recomputed by JAX's __init__


@requires(
    "jax",
    "0.10.0",
    "older jax ignores a `drop_fields` name longer than one character: "
    "`init_fields.difference_update(*drop_fields)` removes its letters",
)
def test_dropped_field_set_in_post_init(installed):
    @dataclasses.dataclass
    class D:
        x: jax.Array
        total: Any = 0

        def __post_init__(self):
            self.total = float(self.x.sum())

    jax.tree_util.register_dataclass(
        D, data_fields=["x"], meta_fields=[], drop_fields=["total"]
    )
    _left_to_jax(D, "__post_init__")
    assert jax.tree.map(lambda v: v * 3, D(jnp.ones(2))).total == 6.0


def test_attributes_from_super_post_init_and_helpers(installed):
    @struct.dataclass
    class Base:
        x: jax.Array

        def __post_init__(self):
            object.__setattr__(self, "from_base", 1)

    @struct.dataclass
    class ViaSuper(Base):
        def __post_init__(self):
            super().__post_init__()

    @struct.dataclass
    class ViaHelper:
        x: jax.Array

        def __post_init__(self):
            self._derive()

        def _derive(self):
            object.__setattr__(self, "derived", 2)

    for cls, name in ((ViaSuper, "from_base"), (ViaHelper, "derived")):
        _left_to_jax(cls, "__post_init__")
        out = jax.tree.map(lambda v: v, cls(x=jnp.ones(1)))
        assert hasattr(out, name)
        out = jax.jit(lambda o: o)(cls(x=jnp.ones(1)))
        assert hasattr(out, name)


def test_custom_new_taking_the_arguments(installed):
    @struct.dataclass
    class N:
        x: jax.Array

        def __new__(cls, x):
            return super().__new__(cls)

    _left_to_jax(N, "__new__")
    assert jax.tree.map(lambda v: v + 1, N(jnp.ones(1))).x.tolist() == [2.0]


def test_metaclass_call(installed):
    calls = []

    class Meta(type):
        def __call__(cls, *args, **kwargs):
            calls.append(1)
            return super().__call__(*args, **kwargs)

    @struct.dataclass
    class M(metaclass=Meta):
        x: jax.Array

    _left_to_jax(M, "metaclass")
    m = M(jnp.ones(1))
    jax.tree.map(lambda v: v, m)
    assert len(calls) == 2  # JAX's unflatten runs it, as without install()


def test_custom_setattr(installed):
    @dataclasses.dataclass
    class S:
        x: jax.Array

        def __setattr__(self, name, value):
            object.__setattr__(self, name, value)
            object.__setattr__(self, "last", name)

    jax.tree_util.register_dataclass(S)
    _left_to_jax(S, "__setattr__")
    assert jax.tree.map(lambda v: v, S(jnp.ones(1))).last == "x"


def test_user_written_init_and_init_var(installed):
    @dataclasses.dataclass
    class Own:
        x: jax.Array

        def __init__(self, x):
            self.x = x
            self.seen = True

    @dataclasses.dataclass
    class WithInitVar:
        x: jax.Array
        scale: dataclasses.InitVar[float] = 1.0

    jax.tree_util.register_dataclass(Own)
    jax.tree_util.register_dataclass(WithInitVar)
    _left_to_jax(Own, "not the one @dataclass generated")
    _left_to_jax(WithInitVar, "InitVar")
    assert jax.tree.map(lambda v: v, Own(jnp.ones(1))).seen


def test_empty_checked_post_init_is_adapted(installed, typecheck):
    @struct.dataclass
    class E:
        x: jax.Array

        @jaxtyped(typechecker=typecheck)
        def __post_init__(self) -> None:
            """Only checks."""

    assert adapted_how(E) == "flax.struct.dataclass"
    e = E(jnp.ones(2))
    typecheck.reset()
    jax.tree.map(lambda v: v, e)
    jax.jit(lambda o: o)(e)
    assert typecheck.calls == 0


def test_unflatten_writes_fields_as_init_does(installed):
    @dataclasses.dataclass
    class Ordered:
        a: int = dataclasses.field(metadata=dict(static=True))
        b: jax.Array
        z: int = dataclasses.field(init=False, default=5)
        c: list = dataclasses.field(default_factory=list)

    jax.tree_util.register_dataclass(
        Ordered, data_fields=["b"], meta_fields=["a"], drop_fields=["c"]
    )
    assert adapted_how(Ordered) is not None
    constructed = Ordered(a=1, b=jnp.ones(1))
    back = jax.tree.map(lambda v: v, constructed)
    # In field order; `z` stays on the class, as the generated __init__ leaves it.
    assert list(vars(back)) == list(vars(constructed)) == ["a", "b", "c"]
    assert back.z == 5


def _derives(typecheck):
    @jaxtyped(typechecker=typecheck)
    @struct.dataclass
    class Derives:
        x: jax.Array

        def __post_init__(self):
            object.__setattr__(self, "y", 1)

    return Derives


def test_unadapted_scan_and_install_give_one_answer(typecheck):
    from typecheck_guard._adapt._coverage import finding

    before = _derives(typecheck)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    after = _derives(typecheck)
    (record,) = [r for r in typecheck_guard.unadapted() if r.cls is before]
    assert record.registration == "flax.struct.dataclass"
    assert record.reason.startswith("registered before typecheck_guard.install()")
    assert "typecheck-guard run" in record.fix and "unflatten_safe" in record.fix
    found, _ = finding(record)
    assert found.registration == record.registration
    assert found.install_covers and found.unflatten_safe_covers
    # The same class defined after install(): covered, so neither lists it.
    assert not [r for r in typecheck_guard.unadapted() if r.cls is after]
    constructed = after(x=jnp.ones(1))
    typecheck.reset()
    assert jax.tree.map(lambda v: v, constructed).y == 1
    assert typecheck.calls == 0  # the unflatten ran __post_init__, not the check


# A check install() can't skip: it warns (tests/adapt/test_unskippable.py).
@pytest.mark.filterwarnings("ignore::typecheck_guard.UnadaptedClassesWarning")
def test_a_decorator_above_the_check_is_reported_the_same_everywhere(
    installed, typecheck
):
    from typecheck_guard._adapt._coverage import finding

    def logged(init):
        @ft.wraps(init)
        def wrapper(self, *args, **kwargs):
            init(self, *args, **kwargs)

        return wrapper

    @struct.dataclass
    class Logged:
        x: jax.Array

    Logged.__init__ = logged(jaxtyped(typechecker=typecheck)(Logged.__init__))
    (record,) = [r for r in typecheck_guard.unadapted() if r.cls is Logged]
    assert "not a typechecker" in record.reason
    assert "outermost" in record.fix
    found, _ = finding(record)
    assert not found.install_covers and not found.unflatten_safe_covers
    # install() runs the decorator and the check, as JAX does: same value.
    typecheck.reset()
    constructed = Logged(x=jnp.ones(1))
    per_construction = typecheck.calls
    out = jax.tree.map(lambda v: v + 1, constructed)
    assert out.x.tolist() == [2.0]
    assert per_construction > 0 and typecheck.calls == 2 * per_construction


# Field names JAX's register_dataclass accepts that are not plain identifiers.
ODD = ["a-b", "class", "x.real", "\ufb01eld"]  # the last is "field" with a ligature


class Odd:
    def __init__(self, **kwargs: Any) -> None:
        for name, value in kwargs.items():
            setattr(self, name, value)


def _odd_class() -> type:
    return type("Odd", (Odd,), {})


@pytest.mark.parametrize("route", ["typecheck_guard", "install"])
def test_non_identifier_field_names(route, request):
    theirs, ours = _odd_class(), _odd_class()
    jax.tree_util.register_dataclass(theirs, data_fields=ODD[:3], meta_fields=ODD[3:])
    if route == "install":
        request.getfixturevalue("installed")
        jax.tree_util.register_dataclass(ours, data_fields=ODD[:3], meta_fields=ODD[3:])
        _left_to_jax(ours, "not a dataclass")
    else:
        typecheck_guard.register_dataclass(
            ours, data_fields=ODD[:3], meta_fields=ODD[3:]
        )
        assert adapted_how(ours) == "typecheck_guard.register_dataclass"
    values = {name: jnp.full(1, i) for i, name in enumerate(ODD[:3])}
    values["x"] = jnp.full(1, 9)  # what `node.x.real` would read
    values[ODD[3]] = "meta"
    t, o = theirs(**values), ours(**values)
    (t_leaves, _), (o_leaves, _) = (
        jax.tree_util.tree_flatten_with_path(t),
        jax.tree_util.tree_flatten_with_path(o),
    )
    assert [(p, v.tolist()) for p, v in o_leaves] == [
        (p, v.tolist()) for p, v in t_leaves
    ]
    back = jax.tree.map(lambda v: v + 1, o)
    assert [getattr(back, n).tolist() for n in ODD[:3]] == [[1], [2], [3]]
    assert getattr(back, ODD[3]) == "meta" and not hasattr(back, "field")


def test_generated_functions_of_same_named_classes_keep_their_sources():
    def make(names):
        class Same:
            pass

        typecheck_guard.register_dataclass(Same, data_fields=names, meta_fields=[])
        return jax._src.tree_util._registry[Same].from_iter

    first, second = make(["a"]), make(["b"])
    assert first.__code__.co_filename != second.__code__.co_filename
    for fn in (first, second):
        assert "".join(linecache.getlines(fn.__code__.co_filename)) == fn.__source__


def test_register_dataclass_misuse_messages():
    @dataclasses.dataclass
    class D:
        x: int
        y: int = 0

    with pytest.raises(TypeError, match=r"D\): data_fields must be a sequence.*got 5"):
        typecheck_guard.register_dataclass(D, data_fields=5, meta_fields=[])  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=r"D\): drop_fields must .* the string 'y'. Write drop_fields"
    ):
        typecheck_guard.register_dataclass(
            D, data_fields=["x"], meta_fields=[], drop_fields="y"
        )


@pytest.mark.parametrize(
    ("given", "write"),
    [
        ("xy", "data_fields=['xy']"),  # a field's name
        ("x, y", "data_fields=['x', 'y']"),
        ("x y", "data_fields=['x', 'y']"),
        ("yx", "data_fields=['y', 'x']"),  # one name per letter
        ("q", "data_fields=[...], a list of its fields ('x', 'y', 'xy')"),
    ],
)
def test_register_dataclass_a_string_for_names_suggests_the_fields(given, write):
    @dataclasses.dataclass
    class D:
        x: int
        y: int
        xy: int

    with pytest.raises(TypeError) as info:
        typecheck_guard.register_dataclass(D, data_fields=given, meta_fields=[])
    assert str(info.value).endswith(f"got the string {given!r}. Write {write}.")


def test_install_rejects_a_non_bool_pytree_cache():
    with pytest.raises(TypeError, match="pytree_cache"):
        typecheck_guard.install(pytree_cache="no")  # type: ignore[arg-type]
    assert not typecheck_guard.installed()


@pytest.mark.parametrize(
    "fields",
    [
        {"data_fields": ["y"], "meta_fields": []},
        # JAX's message quotes the list as it was given.
        {"data_fields": ["x"]},
    ],
)
def test_jax_rejection_passes_through_alone(fields):
    def attempt():
        @dataclasses.dataclass
        class Bad:
            x: int

        try:
            jax.tree_util.register_dataclass(Bad, **fields)
        except (TypeError, ValueError) as e:
            return e
        raise AssertionError("JAX accepted it")

    want = attempt()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()
    try:
        got = attempt()
    finally:
        typecheck_guard.uninstall()
    assert str(got) == str(want)
    assert got.__context__ is None and got.__cause__ is None


def test_chex_unflatten_is_chex_s_less_the_empty_post_init(installed, typecheck):
    import chex

    @chex.dataclass
    class C:
        b: jax.Array
        a: jax.Array

        @jaxtyped(typechecker=typecheck)
        def __post_init__(self) -> None:
            pass

    c = C(b=jnp.ones(1), a=jnp.zeros(1))
    assert adapted_how(C) == "chex.dataclass"
    c.extra = jnp.ones(2)  # flattened with the fields, dropped by chex's unflatten
    typecheck.reset()
    back = jax.tree.map(lambda v: v, c)
    assert typecheck.calls == 0
    assert list(vars(back)) == ["b", "a"]  # field order, as chex sets them


def test_chex_post_init_doing_work_runs_chex_s_unflatten_marked(installed, typecheck):
    import chex

    @chex.dataclass
    class Counted:
        x: jax.Array

        @jaxtyped(typechecker=typecheck)
        def __post_init__(self) -> None:
            object.__setattr__(self, "n", 1)

    c = Counted(x=jnp.ones(1))
    _left_to_jax(Counted, "__post_init__")
    del c.n
    typecheck.reset()
    assert jax.tree.map(lambda v: v, c).n == 1  # chex's unflatten ran it
    assert typecheck.calls == 0  # but not its check
    assert not [r for r in typecheck_guard.unadapted() if r.cls is Counted]


def test_field_iterators_reach_jax_whole(installed):
    @dataclasses.dataclass
    class FromIterators:
        x: jax.Array
        y: int = dataclasses.field(default=0, metadata=dict(static=True))

    jax.tree_util.register_dataclass(
        FromIterators, data_fields=iter(["x"]), meta_fields=iter(["y"])
    )
    back = jax.tree.map(lambda v: v + 1, FromIterators(jnp.ones(1), 3))
    assert back.x.tolist() == [2.0] and back.y == 3
