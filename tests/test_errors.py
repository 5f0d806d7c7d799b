"""Misuse gets an error that names the user's class or argument and says what to write
instead; a library outside the supported range is refused at install()."""

import dataclasses
import re
import warnings

import jax
import pytest
from flax import struct

import typecheck_guard
from typecheck_guard._compat import (
    _jax as _jaxcompat,
    _jaxtyping as _jaxtypingcompat,
    _versions,
)


def test_register_dataclass_decorator_form_with_bad_data_fields_alone():
    with pytest.raises(TypeError) as caught:

        @typecheck_guard.register_dataclass(data_fields=5)  # pyright: ignore[reportArgumentType]
        @dataclasses.dataclass
        class Fields:
            x: int

    message = str(caught.value)
    assert message.startswith("typecheck_guard.register_dataclass(")
    assert "data_fields must be a sequence of field names, got 5 of type int" in message
    assert "Write data_fields=['x', 'y']" in message


def test_register_dataclass_on_a_non_class():
    with pytest.raises(TypeError, match=r"expects a class, got 3") as info:
        typecheck_guard.register_dataclass(3)  # pyright: ignore[reportCallIssue, reportArgumentType]
    assert "@dataclasses.dataclass" in str(info.value)


def test_register_dataclass_on_a_non_dataclass():
    class NotADataclass:
        def __init__(self, x):
            self.x = x

    with pytest.raises(TypeError) as info:
        typecheck_guard.register_dataclass(NotADataclass)
    message = str(info.value)
    assert "NotADataclass is not a dataclass" in message
    # The fix: decorate it, or name the fields.
    assert "@dataclasses.dataclass" in message
    assert "data_fields=[...]" in message and "meta_fields=[...]" in message
    # Naming the fields is the documented way for a plain class, as with JAX.
    typecheck_guard.register_dataclass(NotADataclass, data_fields=["x"], meta_fields=[])
    leaves, treedef = jax.tree.flatten(NotADataclass(1))
    assert leaves == [1] and treedef.unflatten([2]).x == 2


def _fresh_fields():
    # A new class per test: JAX never forgets a registration.
    @dataclasses.dataclass
    class Fields:
        x: int
        y: int
        z: int = 0

    Fields.__qualname__ = "Fields"
    return Fields


def test_unknown_field_names():
    cls = _fresh_fields()
    with pytest.raises(ValueError) as info:
        typecheck_guard.register_dataclass(
            cls, data_fields=["x", "y", "nope"], meta_fields=["z"]
        )
    message = str(info.value)
    assert message.startswith("typecheck_guard.register_dataclass(Fields)")
    assert "Unexpected: 'nope'" in message and "not a field of Fields" in message


def test_missing_field_names():
    cls = _fresh_fields()
    with pytest.raises(ValueError) as info:
        typecheck_guard.register_dataclass(cls, data_fields=["x"], meta_fields=[])
    message = str(info.value)
    assert "register_dataclass(Fields)" in message
    assert "Missing: 'y', 'z'" in message
    # ... and the fix, spelled out.
    assert "drop_fields=['y', 'z']" in message


def test_unknown_drop_field():
    cls = _fresh_fields()
    with pytest.raises(
        ValueError,
        match=r"drop_fields names 'w', which is not a field of Fields\. Its fields are: x, y, z",
    ):
        typecheck_guard.register_dataclass(
            cls, data_fields=["x", "y", "z"], meta_fields=[], drop_fields=["w"]
        )


def test_only_one_of_data_and_meta_fields():
    cls = _fresh_fields()
    with pytest.raises(
        TypeError, match=r"register_dataclass\(Fields\).*Add meta_fields=\[\.\.\.\]"
    ):
        typecheck_guard.register_dataclass(cls, data_fields=["x", "y", "z"])


def test_a_string_instead_of_a_list():
    cls = _fresh_fields()
    with pytest.raises(TypeError, match=re.escape("Write meta_fields=['z']")):
        typecheck_guard.register_dataclass(cls, data_fields=["x", "y"], meta_fields="z")


def test_overlapping_fields():
    cls = _fresh_fields()
    with pytest.raises(
        ValueError, match=r"register_dataclass\(Fields\): 'x' is listed in both"
    ):
        typecheck_guard.register_dataclass(
            cls, data_fields=["x", "y", "z"], meta_fields=["x"]
        )


def test_init_false_field_in_inferred_fields():
    # JAX's own inference lists init=False fields too, and refuses them; we say why.
    @dataclasses.dataclass
    class Cached:
        x: int
        cache: dict = dataclasses.field(init=False, default_factory=dict)

    with pytest.raises(ValueError) as info:
        typecheck_guard.register_dataclass(Cached)
    message = str(info.value)
    assert "Cached): " in message and "Unexpected: 'cache'." in message
    assert "'cache' is declared with init=False" in message
    assert "leave it out of data_fields and meta_fields" in message
    typecheck_guard.register_dataclass(Cached, data_fields=["x"], meta_fields=[])
    assert jax.tree.map(lambda v: v + 1, Cached(1)).cache == {}


def test_unflatten_restore_needs_a_default():
    @dataclasses.dataclass
    class Derived:
        x: int
        cache: dict = dataclasses.field(init=False)

    with pytest.raises(ValueError) as info:
        typecheck_guard.register_dataclass(Derived, data_fields=["x"], meta_fields=[])
    message = str(info.value)
    assert "register_dataclass(" in message and "Derived)" in message
    assert "'cache'" in message and "init=False" in message
    assert "dataclasses.field(init=False, default=...)" in message


def test_failed_registration_leaves_no_trace():
    # A rejected class can still be registered correctly afterwards.
    cls = _fresh_fields()
    with pytest.raises(ValueError):
        typecheck_guard.register_dataclass(cls, data_fields=["x"], meta_fields=[])
    typecheck_guard.register_dataclass(cls)
    assert (
        typecheck_guard._adapt._register.adapted_how(cls)
        == "typecheck_guard.register_dataclass"
    )


def test_adapting_a_class_twice():
    @typecheck_guard.register_dataclass
    @dataclasses.dataclass
    class Twice:
        x: int

    with pytest.raises(ValueError) as info:
        typecheck_guard.register_dataclass(Twice)
    message = str(info.value)
    assert "<locals>.Twice is already registered as a JAX pytree node" in message
    assert "by typecheck_guard.register_dataclass" in message
    assert "remove the second @typecheck_guard.register_dataclass" in message
    # The class still works: the failed second registration changed nothing.
    assert jax.tree.map(lambda v: v + 1, Twice(1)).x == 2


def test_adapting_a_flax_struct_class():
    @struct.dataclass
    class Flaxed:
        x: int

    with pytest.raises(ValueError) as info:
        typecheck_guard.register_dataclass(Flaxed)
    message = str(info.value)
    assert "Flaxed is already registered" in message
    assert "by flax.struct.dataclass" in message
    assert "typecheck_guard.install() before the class is defined" in message
    assert "unflatten_safe" in message


def test_adapting_a_register_pytree_node_class():
    @jax.tree_util.register_pytree_node_class
    class Custom:
        def __init__(self, x):
            self.x = x

        def tree_flatten(self):
            return (self.x,), None

        @classmethod
        def tree_unflatten(cls, aux, children):
            return cls(*children)

    with pytest.raises(ValueError) as info:
        typecheck_guard.register_dataclass(Custom, data_fields=["x"], meta_fields=[])
    message = str(info.value)
    assert "Custom is already registered" in message
    assert "register_pytree_node (unflatten:" in message and "tree_unflatten" in message
    assert "remove the other decorator" in message


def test_install_then_register_dataclass_on_an_adapted_struct(installed):
    @struct.dataclass
    class Adapted:
        x: int

    with pytest.raises(
        ValueError, match=r"Adapted is already registered .*by flax\.struct\.dataclass"
    ):
        typecheck_guard.register_dataclass(Adapted)


@pytest.mark.parametrize("bad", [3, "step", None, [jax.jit(lambda x: x)]])
def test_unflatten_safe_on_a_non_callable(bad):
    if bad is None:
        # `unflatten_safe(None)` is the context-manager form, not an error.
        assert (
            repr(typecheck_guard.unflatten_safe(None))  # pyright: ignore[reportArgumentType]
            == "typecheck_guard.unflatten_safe()"
        )
        return
    with pytest.raises(TypeError) as info:
        typecheck_guard.unflatten_safe(bad)
    message = str(info.value)
    assert f"got {bad!r} of type {type(bad).__name__}" in message
    assert "with typecheck_guard.unflatten_safe():" in message
    assert "typecheck_guard.unflatten_safe(jax.jit(step))" in message


def _fake_versions(monkeypatch, **found):
    # A fake version string for the packages named, the real one for the others.
    real = _versions.installed
    monkeypatch.setattr(_versions, "installed", lambda p: found.get(p, real(p)))


def _install_quietly():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", typecheck_guard.UnadaptedClassesWarning)
        typecheck_guard.install()


def _unsupported(package, found="0.0.1"):
    low, _ = _versions.SUPPORTED[package]
    return (
        f"typecheck_guard supports {package} >={low}, but {package} {found} is "
        f"installed. Install a supported version (pip install '{package}>={low}')."
    )


def _node_funnel():
    """The registration funnel install() patches whatever the jax version (its
    `register_dataclass` only where JAX's own unflatten calls `__init__`)."""
    from jax._src import tree_util as src

    from typecheck_guard._adapt._jax import funnel_name

    return getattr(src, funnel_name("register_pytree_node"))


@pytest.mark.parametrize(
    ("package", "off"),
    [
        ("jax", "flax.struct, TrainState) still re-run their checks"),
        ("chex", "chex.dataclass classes still re-run their __post_init__ check"),
        ("jaxtyping", "PyTree[...] checks are not cached"),
    ],
)
def test_an_unsupported_version_switches_its_part_off_with_one_warning(
    package, off, monkeypatch
):
    _fake_versions(monkeypatch, **{package: "0.0.1"})
    _jaxcompat._load.cache_clear()
    _jaxtypingcompat.load.cache_clear()
    before = _node_funnel()
    try:
        with pytest.warns(typecheck_guard.PartsDisabledWarning) as caught:
            _install_quietly()
        (warning,) = caught
        message = str(warning.message)
        assert off in message and _unsupported(package) in message
        # The other parts are on.
        assert typecheck_guard.installed()
        assert (_node_funnel() is before) == (package == "jax")
    finally:
        typecheck_guard.uninstall()
        _jaxcompat._load.cache_clear()
        _jaxtypingcompat.load.cache_clear()
    assert _node_funnel() is before


def test_every_problem_is_named_at_once_and_nothing_left_is_refused(monkeypatch):
    _fake_versions(monkeypatch, jax="0.4.30", jaxtyping="0.2.20", chex="0.1.80")
    _jaxtypingcompat.load.cache_clear()
    before = _node_funnel()
    try:
        with pytest.raises(RuntimeError) as info:
            typecheck_guard.install()
    finally:
        _jaxtypingcompat.load.cache_clear()
    message = str(info.value)
    assert "installed nothing" in message
    for package, found in [("jax", "0.4.30"), ("jaxtyping", "0.2.20")]:
        assert _unsupported(package, found) in message
    if _versions.installed("chex") is not None:
        assert _unsupported("chex", "0.1.80") in message
    assert not typecheck_guard.installed()
    assert _node_funnel() is before


def test_unflatten_safe_of_a_jitted_function_checks_jax_when_wrapping(monkeypatch):
    _fake_versions(monkeypatch, jax="0.4.35")
    _jaxcompat._load.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="jax 0.4.35 is installed"):
            typecheck_guard.unflatten_safe(jax.jit(lambda x: x))
    finally:
        _jaxcompat._load.cache_clear()


def test_newer_than_supported_is_a_problem(monkeypatch):
    monkeypatch.setitem(_versions.SUPPORTED, "chex", ("0.1", "0.2"))
    assert _versions.problem("chex", "0.2.0") == (
        "typecheck_guard supports chex >=0.1,<0.2, but chex 0.2.0 is installed. "
        "Install a supported version (pip install 'chex>=0.1,<0.2')."
    )
    assert _versions.problem("chex", "0.1.9") is None


def test_a_library_that_is_not_installed_is_not_a_problem(monkeypatch):
    _fake_versions(monkeypatch, equinox=None)
    assert _versions.problem("equinox") is None


def test_installed_versions_are_supported():
    # The environment the suite runs in is inside the range it claims.
    for package in _versions.SUPPORTED:
        assert _versions.problem(package) is None, package


def test_supported_ranges_match_pyproject():
    import pathlib

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    pyproject = pathlib.Path(__file__).parents[1] / "pyproject.toml"
    if not pyproject.exists():  # installed without its source tree
        pytest.skip("no pyproject.toml")
    project = tomllib.loads(pyproject.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements.extend(extra)
    declared = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", requirement)
        if match:
            declared.setdefault(match[1], set()).add(match[2])
    for package in ("jax", "jaxtyping", "flax", "chex", "equinox"):
        low, _ = _versions.SUPPORTED[package]
        assert declared.get(package) == {low}, package


def test_version_parse():
    assert _versions.parse("0.6.0") == (0, 6, 0)
    assert _versions.parse("0.4.36.dev20241201+g1234") == (0, 4, 36)
    assert _versions.parse("0.10.2rc1") == (0, 10, 2)
    assert _versions.parse("0.10.2") > _versions.parse("0.6.0")


def test_runtime_checks_unknown_level():
    with pytest.raises(ValueError) as info:
        typecheck_guard.runtime_checks("sometimes")  # pyright: ignore[reportArgumentType]
    message = str(info.value)
    assert "runtime_checks: unknown level 'sometimes'" in message
    for level in ('"allow"', '"log"', '"disallow"'):
        assert level in message
    assert 'with typecheck_guard.runtime_checks("disallow"):' in message


def test_py_typed_is_shipped():
    import importlib.resources

    assert importlib.resources.files("typecheck_guard").joinpath("py.typed").is_file()
