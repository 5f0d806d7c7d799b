"""One recogniser of checkers for the whole package: every checker form we support is
a layer `peel` can take off (and `unflatten_safe` then guards), and the profiler,
which reads the code that runs, sees its checks too."""

import dataclasses

import jaxtyping
import pytest
import typeguard
from beartype import BeartypeConf, beartype
from jaxtyping import jaxtyped
from typeguard import typechecked

import typecheck_guard
from helpers import passthrough
from typecheck_guard._compat._checkers import checker_of, checks_switched_off, peel

# typeguard 4.x instruments source it can find (module-level code), not these local
# classes: its forms are in test_typeguard4.py.
TYPEGUARD2 = not hasattr(typeguard, "suppress_type_checks")


def _forms():
    """(class, expected checkers) for each way users check an `__init__`."""
    forms = []
    if TYPEGUARD2:
        forms += _typeguard2_forms()

    class BeartypeDirect:
        @beartype
        def __init__(self, x: int):
            self.x = x

    @beartype
    @dataclasses.dataclass
    class BeartypeClass:
        x: int

    @jaxtyped(typechecker=beartype)
    @dataclasses.dataclass
    class JaxtypedBeartype:
        x: int

    return forms + [
        (BeartypeDirect, ("beartype",)),
        (BeartypeClass, ("beartype",)),
        (JaxtypedBeartype, ("jaxtyping",)),
    ]


def _typeguard2_forms():
    class TypeguardDirect:
        @typechecked
        def __init__(self, x: int):
            self.x = x

    @typechecked
    class TypeguardClass:
        def __init__(self, x: int):
            self.x = x

    @jaxtyped(typechecker=typechecked)
    @dataclasses.dataclass
    class JaxtypedTypeguard:
        x: int

    return [
        (TypeguardDirect, ("typeguard",)),
        (TypeguardClass, ("typeguard",)),
        (JaxtypedTypeguard, ("jaxtyping",)),
    ]


@pytest.mark.parametrize(
    "cls, checkers", _forms(), ids=lambda v: getattr(v, "__name__", "")
)
def test_every_checker_form_is_a_layer_we_can_peel(cls, checkers):
    layers = peel(cls.__init__)
    assert layers.checkers[:1] == checkers
    assert layers.unchecked is not None
    with pytest.raises(Exception):  # noqa: B017 (each checker raises its own error)
        cls("not an int")
    obj = object.__new__(cls)
    layers.unchecked(obj, "not an int")  # the body alone: no check
    assert obj.x == "not an int"


@pytest.mark.parametrize(
    "cls, checkers", _forms(), ids=lambda v: getattr(v, "__name__", "")
)
def test_the_profiler_sees_every_form_peel_recognises(cls, checkers):
    del checkers
    # On Python 3.11 the default profile sees jaxtyping's checks only (no profile
    # function); `every_checker` watches beartype and typeguard alone too.
    with typecheck_guard.profile(every_checker=True) as prof:
        cls(1)
    assert sum(s.count for s in prof.sites) >= 1


def test_typeguard2_wrapper_is_recognised_by_its_code_not_its_name():
    # `functools.wraps` renames typeguard 2's `wrapper` after the function it wraps.
    @typechecked
    def wrapper(x: int) -> int:
        return x

    @typechecked
    def other(x: int) -> int:
        return x

    assert other.__name__ == "other"
    assert checker_of(other) == "typeguard" == checker_of(wrapper)
    assert checker_of(passthrough(other)) is None


def test_beartype_pep557_fields_setattr_is_a_checker_layer():
    try:
        conf = BeartypeConf(is_pep557_fields=True)
    except TypeError:
        pytest.skip("BeartypeConf(is_pep557_fields=...) is newer than this beartype")

    @beartype(conf=conf)
    @dataclasses.dataclass
    class Fields:
        x: int

    assert checker_of(Fields.__setattr__) == "beartype"
    layers = peel(Fields.__setattr__)
    assert layers.checkers == ("beartype",)
    obj = Fields(1)
    with pytest.raises(Exception):  # noqa: B017
        obj.x = "bad"  # type: ignore[assignment]
    assert layers.unchecked is not None
    layers.unchecked(obj, "x", "unchecked")
    assert obj.x == "unchecked"


def test_a_foreign_layer_above_a_checker_is_not_peeled():
    class Logged:
        @passthrough
        @beartype
        def __init__(self, x: int):
            self.x = x

    layers = peel(Logged.__init__)
    assert layers.checkers == ("beartype",)
    assert layers.unchecked is None
    assert layers.blocker is Logged.__init__


def test_checks_switched_off_reads_jaxtyping_disable():
    assert not checks_switched_off()
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        assert checks_switched_off()
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)
    assert not checks_switched_off()
