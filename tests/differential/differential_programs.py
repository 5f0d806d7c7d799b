"""The program generator of the differential suite: small, self-contained Python
programs, grouped by region, each defining typechecked pytree classes and running a
few constructions and tree operations on them (see `differential_runner.py` for
how they run and what is compared).

The regions that attack what the plugin puts in place of the user's or JAX's
objects (`callforms`, `serialize`, `order`, `memo`, `proxy`, `importhook`) are in
`differential_substitutes.py`, which builds on this module.

Each region enumerates its variants combinatorially (`generate(region)` gives all
of them, `--full` in `scripts/differential.py`). A default batch (`batch(region,
seed)`) takes the region's `core` programs (the shapes the issues reported) and a
seeded sample of the rest, so that the suite fits CI; the default seed differs per
Python minor version, so that CI's sessions cover different samples.

A program source starts with `from differential_harness import *` (`phase`, `jit`,
`attempt`, `hit`, `note`, `require`, `track`, `aot_attr`) and defines `main()`,
which returns a dict of the values the runner digests. `python prog.py MODE` runs
one alone.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
import sys
import textwrap
from collections.abc import Callable, Iterable

REGIONS = (
    "nested",
    "checkers",
    "custom",
    "shapes",
    "stacked",
    "static",
    "offswitch",
    "aot",
    "disable_jit",
    "slots",
    "treeops",
    "transforms",
    # What the plugin puts in place of the user's or JAX's objects, against what it
    # replaces (`differential_substitutes.py`).
    "callforms",
    "serialize",
    "order",
    "memo",
    "proxy",
    "importhook",
)

# Programs per region in a default batch (core programs first, then a sample).
DEFAULT_SIZE = 5


@dataclasses.dataclass(frozen=True)
class Program:
    name: str
    region: str
    source: str
    # Calls `jit(...)`: the `wrapper` mode differs from `plain` only for these.
    jit: bool
    # "placeholder": a tree of placeholder leaves (`None`, `ShapeDtypeStruct`, AOT
    # `ArgInfo`), which a check rejects: plain JAX raises, a mode covering the
    # operation must return what JAX returns without checks. "tradeoff": a tree
    # operation that makes invalid leaves: plain raises; the plugin may return what
    # JAX returns without checks (Equinox's trade-off) or raise as plain does.
    relaxed: str | None
    # The registered pytree classes whose unflattens a mode may skip; each with
    # "all" (a dataclass: every own check in an operation is an unflatten's) or
    # "hits" (a custom node: its checks under the program's unflatten function,
    # which calls `hit(name)`, are the unflatten's).
    nodes: tuple[tuple[str, str], ...]
    core: bool = False
    # How many times the harness runs `main()` in one interpreter: the runs after
    # the first make every construction again after the first run's unflattens
    # (`again()`).
    repeat: int = 1


HEADER = '''\
from differential_harness import *  # noqa: F403
if __name__ == "__main__":
    run_standalone(__file__)
import dataclasses
import functools
from typing import Annotated, Any, Callable

import chex
import jax
import jax.numpy as jnp
import numpy as np
from beartype import BeartypeConf, beartype
from beartype.vale import Is
from flax import struct
from jaxtyping import Array, Float, Int, PyTree, Shaped, jaxtyped
from typeguard import typechecked

X = jnp.arange(1.0, 4.0)
Y = jnp.ones(3)
BAD = jnp.ones(3, dtype=jnp.int32)


def concrete(a):
    return not isinstance(a, jax.core.Tracer)


def introspect(cls):
    """What reading the class tells, after its unflattens: its signature and its
    `__init__`'s, and the names of its `__init__`'s type hints."""
    import inspect
    import typing

    out = []
    for read in (
        lambda: str(inspect.signature(cls)),
        lambda: str(inspect.signature(cls.__init__)),
        lambda: sorted(typing.get_type_hints(cls.__init__)),
    ):
        try:
            out.append(read())
        except Exception as e:
            out.append(type(e).__name__)
    return out


# A validator that reads values (beartype; typeguard 2.13.3 ignores it). With numpy:
# a jax operation on a concrete array inside a trace gives a tracer.
Positive = Annotated[
    Float[Array, "n"], Is[lambda a: not concrete(a) or bool(np.all(np.asarray(a) > 0))]
]

try:
    BeartypeConf(is_pep557_fields=True)
    HAS_PEP557 = True
except TypeError:
    HAS_PEP557 = False


def casting(fn):
    """A decorator that is not a checker: casts array arguments to float32."""

    def cast(v):
        return jnp.asarray(v, jnp.float32) if hasattr(v, "dtype") else v

    @functools.wraps(fn)
    def cast_init(self, *args, **kwargs):
        return fn(self, *map(cast, args), **{k: cast(v) for k, v in kwargs.items()})

    return cast_init


def logging_init(cls):
    """A class decorator that is not a checker: notes each `__init__`."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        note(f"init {type(self).__name__}")
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    return cls


def casting_cls(cls):
    """A class decorator that is not a checker: casts `x` to float32 after `__init__`."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if hasattr(self.x, "dtype"):
            object.__setattr__(self, "x", jnp.asarray(self.x, jnp.float32))

    cls.__init__ = __init__
    return cls
'''

# The checker forms: as a class decorator, and on a hand-written `__init__`.
CLASS_CHECKERS = {
    "jt_bt": "@jaxtyped(typechecker=beartype)",
    "jt_tg": "@jaxtyped(typechecker=typechecked)",
    "bt": "@beartype",
    "tg": "@typechecked",
    "bt557": "@beartype(conf=BeartypeConf(is_pep557_fields=True))",
}
INIT_CHECKERS = {
    "jt_bt": "@jaxtyped(typechecker=beartype)",
    "jt_tg": "@jaxtyped(typechecker=typechecked)",
    "bt": "@beartype",
    "tg": "@typechecked",
}
ARRAY = 'Float[Array, "n"]'


def _indent(lines: Iterable[str], n: int = 4) -> list[str]:
    return [(" " * n + line) if line else "" for line in lines]


# --- dataclass-like classes -----------------------------------------------------------

DC_ROUTES = ("struct", "pytreenode", "jaxdc", "jaxdc_deco", "chex")


def dc_class(
    name: str,
    route: str,
    checker: str | None,
    *,
    order: str = "above",
    fields: Iterable[tuple[str, str]] = (("x", ARRAY), ("y", ARRAY)),
    static: Iterable[tuple[str, str, str]] = (),
    extra_fields: Iterable[str] = (),
    body: Iterable[str] = (),
    above: Iterable[str] = (),
    base: str | None = None,
) -> list[str]:
    """A dataclass `name` registered through `route`, with `checker` (a key of
    `CLASS_CHECKERS`) above or below the registration. `static` holds (field,
    annotation, default) of static fields; `extra_fields` are field lines as written;
    `above` are decorators put above everything."""
    fields = list(fields)
    static = list(static)
    lines: list[str] = []
    if checker == "bt557":
        lines.append('require(HAS_PEP557, "this beartype has no is_pep557_fields")')
    if route == "jaxdc_deco":
        lines.append(
            "require(jax_version() >= (0, 4, 36) and __import__('inspect')"
            ".signature(jax.tree_util.register_dataclass).parameters['data_fields']"
            '.default is None, "register_dataclass infers no fields here")'
        )
    check = [CLASS_CHECKERS[checker]] if checker else []
    regs = {
        "struct": ["@struct.dataclass"],
        "pytreenode": [],
        "jaxdc": ["@dataclasses.dataclass(frozen=True)"],
        "jaxdc_deco": [
            "@jax.tree_util.register_dataclass",
            "@dataclasses.dataclass(frozen=True)",
        ],
        "chex": ["@chex.dataclass(frozen=True)"],
    }[route]
    decos = list(above)
    if order == "above":
        decos += check + regs
    elif route == "jaxdc_deco":  # between the registration and the dataclass
        decos += regs[:1] + check + regs[1:]
    else:
        decos += regs + check
    lines += decos
    parents = [
        p for p in (base, "struct.PyTreeNode" if route == "pytreenode" else None) if p
    ]
    if base and route == "pytreenode":
        parents = [base]
    lines.append(
        f"class {name}({', '.join(parents)}):" if parents else f"class {name}:"
    )
    members = [f"{f}: {a}" for f, a in fields]
    for f, a, default in static:
        if route in ("struct", "pytreenode"):
            members.append(
                f"{f}: {a} = struct.field(pytree_node=False, default={default})"
            )
        elif route == "jaxdc_deco":
            members.append(
                f"{f}: {a} = dataclasses.field(default={default}, metadata=dict(static=True))"
            )
        else:
            members.append(f"{f}: {a} = dataclasses.field(default={default})")
    members += list(extra_fields)
    members += list(body)
    lines += _indent(members or ["pass"])
    if route == "jaxdc":
        data = [f for f, _ in fields] + [
            line.split(":")[0].strip()
            for line in extra_fields
            if "init=False" not in line
        ]
        meta = [f for f, _, _ in static]
        lines.append(
            f"jax.tree_util.register_dataclass({name}, data_fields={data!r}, "
            f"meta_fields={meta!r})"
        )
    return lines


def source(classes: Iterable[str], main: str) -> str:
    return HEADER + "\n\n" + "\n".join(classes) + "\n\n\n" + textwrap.dedent(main)


VALID_OPS = """\
    with phase("tree"):
        out["map"] = jax.tree.map(lambda v: v * 2, s)
        leaves, treedef = jax.tree.flatten(s)
        out["unflatten"] = jax.tree_util.tree_unflatten(treedef, leaves)
    step = jit(lambda s: jax.tree.map(lambda v: v + 1, s))
    with phase("jit1"):
        t = step(s)
    with phase("jitN"):
        t = step(step(t))
    out["step"] = t
    out["introspect"] = introspect(type(s))
"""


def standard_main(make: str, bad: str | None, ops: str = VALID_OPS) -> str:
    """Construct `make` (and `bad`, which must raise), then `ops` on it."""
    lines = ["def main():", "    out = {}", '    with phase("construct"):']
    lines.append(f"        s = {make}")
    lines.append('        out["s"] = s')
    if bad:
        lines.append(f'        out["bad"] = attempt(lambda: {bad})')
    return "\n".join(lines) + "\n" + ops + "    return out\n"


def _name(*parts: object) -> str:
    return "-".join(str(p) for p in parts if p not in (None, ""))


# --- region: nested constructions ------------------------------------------------------


def _inner(kind: str, checker: str, validator: bool) -> list[str]:
    ann = "Positive" if validator else ARRAY
    if kind == "struct":
        return dc_class("Inner", "struct", checker, fields=[("v", ann)])
    deco = INIT_CHECKERS[checker]
    return [
        "class Inner:",
        f"    {deco}",
        f"    def __init__(self, v: {ann}):",
        "        self.v = v",
    ]


NESTED_SCENARIOS = {
    # valid values throughout: nested checks run as often as without the plugin
    "ok": VALID_OPS,
    # a tree operation whose unflatten makes the nested construction fail
    "tree_fail": """\
    with phase("tree"):
        out["cast"] = attempt(lambda: jax.tree.map(lambda v: v.astype(jnp.int32), s))
        out["negate"] = attempt(lambda: jax.tree.map(lambda v: -v, s))
""",
    # the same, at trace time in a jitted step
    "jit_fail": """\
    step = jit(lambda s: jax.tree.map(lambda v: v.astype(jnp.int32), s))
    with phase("jit1"):
        out["cast"] = attempt(lambda: step(s))
    neg = jit(lambda s: jax.tree.map(lambda v: -v, s))
    with phase("jit1"):
        out["negate1"] = attempt(lambda: neg(s))
    with phase("jitN"):
        out["negateN"] = attempt(lambda: neg(s))
""",
    # a second construction with the signature of a passing one, whose nested
    # construction fails on its values
    "again_fail": """\
    with phase("construct"):
        out["again"] = attempt(lambda: MAKE_NEG)
        out["again2"] = attempt(lambda: MAKE_NEG)
""",
}


def region_nested() -> list[Program]:
    programs = []
    for where, outer_route, checker, inner_kind, scenario in itertools.product(
        ("post_init", "init", "factory", "same"),
        ("struct", "jaxdc", "chex", "custom"),
        ("jt_bt", "jt_tg", "bt", "tg"),
        ("plain", "struct"),
        tuple(NESTED_SCENARIOS),
    ):
        # Where the nested construction can sit for each route.
        if where == "init" and outer_route != "custom":
            continue
        if where in ("post_init", "same") and outer_route == "custom":
            continue
        if where == "factory" and outer_route != "jaxdc":
            continue
        if where == "same" and (inner_kind != "plain" or outer_route == "chex"):
            continue  # (chex has no static fields)
        # The outer class takes any array (`Shaped`): only the nested one rejects.
        loose = 'Shaped[Array, "n"]'
        validator = checker in ("jt_bt", "bt")
        classes = [] if where == "same" else _inner(inner_kind, checker, validator)
        nodes: list[tuple[str, str]] = []
        if outer_route == "custom":
            deco = INIT_CHECKERS[checker]
            classes += [
                "@jax.tree_util.register_pytree_node_class",
                "class Outer:",
                f"    {deco}",
                f"    def __init__(self, x: {loose}, y: {loose}):",
                "        self.x = x",
                "        self.y = y",
                "        self.inner = Inner(x)",
                "    def tree_flatten(self):",
                "        return (self.x, self.y), None",
                "    @classmethod",
                "    def tree_unflatten(cls, aux, children):",
                '        hit("Outer")',
                "        return cls(*children)",
            ]
            nodes.append(("Outer", "hits"))
            make, neg = "Outer(X, Y)", "Outer(-X, Y)"
        elif where == "same":
            # Another instance of the same class, one level down, with the fields
            # swapped: `x` must hold what `y` held.
            strict = "Positive" if validator else ARRAY
            body = [
                "def __post_init__(self):",
                "    if self.depth > 0:",
                "        Outer(x=self.y, y=self.x, depth=self.depth - 1)",
            ]
            classes += dc_class(
                "Outer",
                outer_route,
                checker,
                fields=[("x", strict), ("y", loose)],
                static=[("depth", "int", "0")],
                body=body,
            )
            nodes.append(("Outer", "all"))
            make, neg = "Outer(x=X, y=Y, depth=1)", "Outer(x=X, y=-Y, depth=1)"
        else:
            fields = [("x", loose), ("y", loose)]
            extra: list[str] = []
            body: list[str] = []
            if where == "post_init":
                body = ["def __post_init__(self):", "    Inner(self.x)"]
            else:  # factory: an init=False field built by a default_factory
                extra = [
                    "inner: Any = dataclasses.field(init=False, "
                    "default_factory=lambda: Inner(X))"
                ]
            classes += dc_class(
                "Outer",
                outer_route,
                checker,
                fields=fields,
                extra_fields=extra,
                body=body,
            )
            make, neg = "Outer(x=X, y=Y)", "Outer(x=-X, y=Y)"
            nodes.append(("Outer", "all"))
        main = standard_main(
            make, None, NESTED_SCENARIOS[scenario].replace("MAKE_NEG", neg)
        )
        name = _name(
            "nested", where, outer_route, checker, "inner_" + inner_kind, scenario
        )
        core = (where, outer_route, checker, scenario) in {
            ("post_init", "struct", "jt_bt", "again_fail"),
            ("init", "custom", "jt_bt", "tree_fail"),
            ("post_init", "struct", "jt_tg", "jit_fail"),
        } and inner_kind == ("plain" if where != "post_init" else "struct")
        programs.append(
            Program(
                name,
                "nested",
                source(classes, main),
                jit="jit(" in main,
                relaxed=None,
                nodes=tuple(nodes),
                core=core,
            )
        )
    return programs


# --- region: every checker form ----------------------------------------------------------


def region_checkers() -> list[Program]:
    programs = []
    for checker, order, route in itertools.product(
        tuple(CLASS_CHECKERS) + tuple("init_" + c for c in INIT_CHECKERS),
        ("above", "below"),
        DC_ROUTES,
    ):
        if route == "pytreenode" and order == "below":
            continue
        if checker.startswith("init_"):
            if order == "below":
                continue
            # The checker on a hand-written `__init__` of a dataclass.
            form = INIT_CHECKERS[checker[5:]]
            body = [
                form,
                f"def __init__(self, x: {ARRAY}, y: {ARRAY}):",
                "    object.__setattr__(self, 'x', x)",
                "    object.__setattr__(self, 'y', y)",
            ]
            classes = dc_class("C", route, None, body=body)
        else:
            classes = dc_class("C", route, checker, order=order)
        main = standard_main("C(x=X, y=Y)", "C(x=X, y=BAD)")
        core = (checker, order, route) in {
            ("tg", "above", "jaxdc"),
            ("bt557", "above", "struct"),
            ("init_tg", "above", "struct"),
            ("jt_tg", "above", "chex"),
        }
        programs.append(
            Program(
                _name("checkers", checker, order, route),
                "checkers",
                source(classes, main),
                jit=True,
                relaxed=None,
                nodes=(("C", "all"),),
                core=core,
            )
        )
    return programs


# --- region: custom nodes: registrations, unflatten styles, __init__ shapes ----------------

UNFLATTEN_STYLES = (
    "classmethod",
    "staticmethod",
    "closure",
    "partial",
    "lambda",
    "function",
    "new_setattr",
    "other_class",
    "temp",
)
INIT_SHAPES = (
    "plain",
    "validating",
    "derive_field",
    "derive_attr",
    "new",
    "cast_above",
    "cast_below",
)


def custom_class(registration: str, style: str, checker: str, shape: str) -> list[str]:
    """A custom pytree node `C` (children x, y), `checker` on its `__init__` (or on
    the class: `cls_bt`, `cls_tg`), registered with `registration` and unflattened
    in `style`."""
    lines: list[str] = []
    if style == "other_class":
        lines += [
            "class D:",
            f"    {INIT_CHECKERS['bt' if 'bt' in checker else 'tg']}",
            f"    def __init__(self, x: {ARRAY}, y: {ARRAY}):",
            "        self.x = x",
            "        self.y = y",
            "",
        ]
    if checker.startswith("cls_"):
        lines.append(CLASS_CHECKERS[checker[4:]])
    if registration == "node_class":
        lines.append("@jax.tree_util.register_pytree_node_class")
    lines.append("class C:")
    init_decos = [] if checker.startswith("cls_") else [INIT_CHECKERS[checker]]
    if shape == "cast_above":
        init_decos = ["@casting"] + init_decos
    elif shape == "cast_below":
        init_decos = init_decos + ["@casting"]
    body = init_decos + [
        f"def __init__(self, x: {ARRAY}, y: {ARRAY}):",
        "    self.x = x",
        "    self.y = y",
    ]
    if shape == "validating":
        body += [
            "    if hasattr(x, 'shape') and x.shape != y.shape:",
            "        raise ValueError('x and y differ in shape')",
        ]
    elif shape == "derive_field":
        body += ["    self.total = x + y if hasattr(x, 'dtype') else None"]
    elif shape == "derive_attr":
        body += ["    self._n = len(x) if hasattr(x, '__len__') else -1"]
    if shape == "new":
        body += [
            "def __new__(cls, *args, **kwargs):",
            "    obj = object.__new__(cls)",
            "    obj.born_with = len(args) + len(kwargs)",
            "    return obj",
        ]
    body += ["def tree_flatten(self):", "    return (self.x, self.y), 'aux'"]
    if registration == "with_keys":
        body += [
            "def flatten_with_keys(self):",
            "    return ((jax.tree_util.GetAttrKey('x'), self.x),"
            " (jax.tree_util.GetAttrKey('y'), self.y)), 'aux'",
        ]
    # `temp`: a temporary instance first, then the one returned. `other_class`: a
    # checked object of another class built from the children (a construction), and
    # the instance from its values.
    construct = {
        "other_class": "cls(*vars(D(*children)).values())",
        "temp": "cls(cls(*children).x, children[1])",
    }.get(style, "cls(*children)")
    if style == "new_setattr":
        make = [
            "obj = C.__new__(C)",
            "obj.x, obj.y = children",
            "return obj",
        ]
    else:
        make = [f"return {construct.replace('cls(', 'C(')}"]
    if style in ("classmethod",) or registration == "node_class":
        body += [
            "@classmethod",
            "def tree_unflatten(cls, aux, children):",
            '    hit("C")',
            *_indent(
                [
                    m.replace(" C(", " cls(")
                    .replace("(C(", "(cls(")
                    .replace("C.__new__(C)", "cls.__new__(cls)")
                    for m in make
                ]
            ),
        ]
    if style == "staticmethod":
        body += [
            "@staticmethod",
            "def unflatten(aux, children):",
            '    hit("C")',
            *_indent(make),
        ]
    lines += _indent(body)
    lines.append("")
    unflatten = {
        "classmethod": "C.tree_unflatten",
        "staticmethod": "C.unflatten",
        "closure": "make_unflatten()",
        "partial": "functools.partial(unflatten_with, C)",
        "lambda": '(lambda aux, children: (hit("C"), C(*children))[1])',
        "function": "unflatten_c",
        "new_setattr": "unflatten_c",
        "other_class": "unflatten_c",
        "temp": "unflatten_c",
    }[style]
    if style == "closure":
        lines += [
            "def make_unflatten():",
            "    def unflatten(aux, children):",
            '        hit("C")',
            *_indent(make, 8),
            "    return unflatten",
        ]
    elif style == "partial":
        lines += [
            "def unflatten_with(cls, aux, children):",
            '    hit("C")',
            *_indent([m.replace(" C(", " cls(").replace("(C(", "(cls(") for m in make]),
        ]
    elif style in ("function", "new_setattr", "other_class", "temp"):
        lines += [
            "def unflatten_c(aux, children):",
            '    hit("C")',
            *_indent(make),
        ]
    # The registered unflatten, by name: a program calls it itself (a construction).
    lines.append(
        f"UNFLATTEN = {'C.tree_unflatten' if registration == 'node_class' else unflatten}"
    )
    if registration == "node":
        lines.append("jax.tree_util.register_pytree_node(C, C.tree_flatten, UNFLATTEN)")
    elif registration == "with_keys":
        lines.append(
            "jax.tree_util.register_pytree_with_keys(C, C.flatten_with_keys, UNFLATTEN, C.tree_flatten)"
        )
    return lines


CUSTOM_OPS = (
    VALID_OPS
    + """\
    with phase("construct"):
        # The user's own call of the registered unflatten is a construction.
        out["by_hand"] = attempt(lambda: UNFLATTEN("aux", [X, BAD]))
        out["as_function"] = attempt(lambda: jax.tree.map(C, [X], [BAD]))
    with phase("tree"):
        out["half"] = jax.tree.map(lambda v: v.astype(jnp.float16), s)
"""
)


def region_custom() -> list[Program]:
    programs = []
    for registration, style, checker, shape in itertools.product(
        ("node", "node_class", "with_keys"),
        UNFLATTEN_STYLES,
        ("jt_bt", "jt_tg", "bt", "tg", "cls_bt", "cls_tg"),
        INIT_SHAPES,
    ):
        if registration == "node_class" and style != "classmethod":
            continue
        if style == "classmethod" and registration == "node_class":
            pass
        if checker.startswith("cls_") and shape.startswith("cast"):
            continue
        classes = custom_class(registration, style, checker, shape)
        main = standard_main("C(X, Y)", "C(X, BAD)", CUSTOM_OPS)
        nodes = (("C", "hits"),)
        core = (registration, style, checker, shape) in {
            ("node", "classmethod", "jt_bt", "derive_field"),
            ("node", "temp", "bt", "plain"),
            ("with_keys", "partial", "tg", "cast_above"),
            ("node_class", "classmethod", "cls_tg", "new"),
            ("node", "other_class", "jt_tg", "plain"),
        }
        programs.append(
            Program(
                _name("custom", registration, style, checker, shape),
                "custom",
                source(classes, main),
                jit=True,
                relaxed=None,
                nodes=nodes,
                core=core,
            )
        )
    return programs


# --- region: dataclass __post_init__ / __init__ shapes -----------------------------------

POST_INITS = {
    "none": [],
    "validating": [
        "def __post_init__(self):",
        "    if hasattr(self.x, 'shape') and self.x.shape != self.y.shape:",
        "        raise ValueError('x and y differ in shape')",
    ],
    "derive_field": [
        "def __post_init__(self):",
        "    if hasattr(self.x, 'dtype'):",
        "        object.__setattr__(self, 'y', self.x * 2)",
    ],
    "derive_attr": [
        "def __post_init__(self):",
        "    object.__setattr__(self, '_total', self.x + self.y if hasattr(self.x, 'dtype') else None)",
    ],
    "empty": ["def __post_init__(self):", "    pass"],
    "super": ["def __post_init__(self):", "    super().__post_init__()"],
    "checked": [
        "@beartype",
        "def __post_init__(self) -> None:",
        '    """Only its check."""',
    ],
    "checked_tg": [
        "@typechecked",
        "def __post_init__(self) -> None:",
        '    """Only its check."""',
    ],
    "new": [
        "def __new__(cls, *args, **kwargs):",
        "    obj = object.__new__(cls)",
        "    object.__setattr__(obj, 'born_with', len(args) + len(kwargs))",
        "    return obj",
    ],
    "cast_init": [],  # `C.__init__ = casting(C.__init__)` after the class
}


def region_shapes() -> list[Program]:
    programs = []
    for route, checker, post_init in itertools.product(
        ("struct", "pytreenode", "jaxdc", "chex"),
        ("jt_bt", "jt_tg", "bt", "tg", None),
        tuple(POST_INITS),
    ):
        if checker is None and not post_init.startswith("checked"):
            continue  # no checker on the class: only a checked `__post_init__`
        if route == "chex" and post_init in ("super", "new"):
            # chex makes a new class (zero-argument `super()` fails) and flattens
            # every attribute (`born_with` becomes a leaf): not what these test.
            continue
        classes: list[str] = []
        base = None
        if post_init == "super":
            classes += [
                "@dataclasses.dataclass(frozen=True)",
                "class Base:",
                "    def __post_init__(self):",
                "        object.__setattr__(self, 'from_base', 1)",
                "",
            ]
            base = "Base"
            if route == "pytreenode":
                classes[:2] = ["class Base(struct.PyTreeNode):"]
        classes += dc_class("C", route, checker, body=POST_INITS[post_init], base=base)
        if post_init == "cast_init":
            classes.append("C.__init__ = casting(C.__init__)")
        ops = (
            VALID_OPS
            + """\
    with phase("tree"):
        out["half"] = jax.tree.map(lambda v: v.astype(jnp.float16), s)
"""
        )
        main = standard_main("C(x=X, y=Y)", "C(x=X, y=BAD)", ops)
        core = (route, checker, post_init) in {
            ("struct", "jt_bt", "derive_attr"),
            ("chex", "tg", "validating"),
            ("jaxdc", "bt", "new"),
            ("struct", None, "checked"),
        }
        programs.append(
            Program(
                _name("shapes", route, checker, post_init),
                "shapes",
                source(classes, main),
                jit=True,
                relaxed=None,
                nodes=(("C", "all"),),
                core=core,
            )
        )
    return programs


# --- region: decorators stacked above the registration -----------------------------------

STACKS = {
    # (decorators above the registration, outermost first), checker position
    "checker": (["CHECK"], None),
    "casting_checker": (["@casting_cls", "CHECK"], None),
    "checker_casting": (["CHECK", "@casting_cls"], None),
    "logging_checker": (["@logging_init", "CHECK"], None),
    "checker_logging": (["CHECK", "@logging_init"], None),
    "casting_only": (["@casting_cls"], "below"),
}


def region_stacked() -> list[Program]:
    programs = []
    for stack, route, checker in itertools.product(
        tuple(STACKS),
        ("struct", "jaxdc_deco", "chex", "pytreenode"),
        ("jt_bt", "jt_tg", "bt", "tg"),
    ):
        above, position = STACKS[stack]
        above = [CLASS_CHECKERS[checker] if d == "CHECK" else d for d in above]
        if position == "below":
            classes = dc_class("C", route, checker, order="below", above=above)
        else:
            classes = dc_class("C", route, None, above=above)
        ops = (
            VALID_OPS
            + """\
    with phase("tree"):
        out["half"] = jax.tree.map(lambda v: v.astype(jnp.float16), s)
    half = jit(lambda s: jax.tree.map(lambda v: v.astype(jnp.float16), s))
    with phase("jit1"):
        out["half_jit"] = half(s)
    with phase("jitN"):
        out["half_jitN"] = half(s)
"""
        )
        main = standard_main("C(x=X, y=Y)", "C(x=X, y=BAD)", ops)
        core = (stack, route, checker) in {
            ("casting_checker", "struct", "jt_bt"),
            ("checker_logging", "jaxdc_deco", "tg"),
        }
        programs.append(
            Program(
                _name("stacked", stack, route, checker),
                "stacked",
                source(classes, main),
                jit=True,
                relaxed=None,
                nodes=(("C", "all"),),
                core=core,
            )
        )
    return programs


# --- region: static fields of awkward types -------------------------------------------------

# The static field's annotation and the value passed at construction (a mutable
# default is refused by dataclasses).
STATICS = {
    "mixed_keys": ("Any", '{0: "a", "ignore": 1}'),
    "dict_str": ("dict", '{"b": 1, "a": 2}'),
    "list": ("Any", "[1, 2]"),
    "tuple_str": ("tuple", '("w", "b")'),
    "callable": ("Callable", "jnp.tanh"),
    "lambda": ("Any", "lambda v: v"),
    "ndarray": ("Any", "np.arange(3)"),
    "nan": ("float", "float('nan')"),
    "set": ("Any", "frozenset({1, 'a'})"),
}


def region_static() -> list[Program]:
    programs = []
    for kind, route, checker in itertools.product(
        tuple(STATICS),
        ("struct", "pytreenode", "jaxdc", "jaxdc_deco"),
        ("jt_bt", "jt_tg", "bt", "tg"),
    ):
        ann, value = STATICS[kind]
        classes = dc_class("C", route, checker, static=[("meta", ann, "None")])
        kw = f", meta={value}"
        ops = """\
    with phase("construct"):
        out["again"] = attempt(lambda: C(x=X, y=YKW))
        out["again_bad"] = attempt(lambda: C(x=X, y=BADKW))
    with phase("tree"):
        out["map"] = attempt(lambda: jax.tree.map(lambda v: v * 2, s))
        out["unflatten"] = attempt(lambda: jax.tree_util.tree_unflatten(*reversed(jax.tree.flatten(s))))
    step = jit(lambda s: jax.tree.map(lambda v: v + 1, s))
    with phase("jit1"):
        out["step1"] = attempt(lambda: step(s))
    with phase("jitN"):
        out["stepN"] = attempt(lambda: step(s))
""".replace("KW", kw)
        main = standard_main(f"C(x=X, y=Y{kw})", f"C(x=X, y=BAD{kw})", ops)
        core = (kind, route, checker) in {
            ("mixed_keys", "struct", "jt_bt"),
            ("ndarray", "jaxdc", "tg"),
        }
        programs.append(
            Program(
                _name("static", kind, route, checker),
                "static",
                source(classes, main),
                jit=True,
                relaxed=None,
                nodes=(("C", "all"),),
                core=core,
            )
        )
    return programs


# --- region: checker off-switches toggled between calls ------------------------------------

OFFSWITCH = {
    # off, a wrong construction; on, the same wrong construction
    "construct": """\
    with phase("construct"):
        jaxtyping_disable(True)
        out["off"] = attempt(lambda: MAKE_BAD)
        jaxtyping_disable(False)
        out["on"] = attempt(lambda: MAKE_BAD)
""",
    # a right one on, the wrong one off, the wrong one on
    "good_off_on": """\
    with phase("construct"):
        out["good"] = attempt(lambda: MAKE_GOOD)
        jaxtyping_disable(True)
        out["off"] = attempt(lambda: MAKE_BAD)
        jaxtyping_disable(False)
        out["on"] = attempt(lambda: MAKE_BAD)
        out["on2"] = attempt(lambda: MAKE_BAD)
""",
    # a jitted step that constructs a wrong value at trace time, off then on
    "traced": """\
    with phase("construct"):
        jaxtyping_disable(True)
        out["off"] = attempt(lambda: jit(lambda: MAKE_BAD)())
        jaxtyping_disable(False)
        out["on"] = attempt(lambda: jit(lambda: MAKE_BAD)())
""",
    # unflattens while off, then on (the jitted step's cached call)
    "operate": """\
    step = jit(lambda s: jax.tree.map(lambda v: v + 1, s))
    jaxtyping_disable(True)
    with phase("jit1"):
        out["off"] = attempt(lambda: step(s))
    with phase("jitN"):
        out["offN"] = attempt(lambda: step(s))
    jaxtyping_disable(False)
    with phase("jitN"):
        out["onN"] = attempt(lambda: step(s))
    with phase("construct"):
        out["on_bad"] = attempt(lambda: MAKE_BAD)
""",
    # `__no_type_check__` on the checked `__init__`, set and cleared
    "no_type_check": """\
    with phase("construct"):
        init = C.__init__
        init.__no_type_check__ = True
        out["off"] = attempt(lambda: MAKE_BAD)
        init.__no_type_check__ = False
        out["on"] = attempt(lambda: MAKE_BAD)
""",
}


def region_offswitch() -> list[Program]:
    programs = []
    for scenario, route, checker in itertools.product(
        tuple(OFFSWITCH),
        ("struct", "jaxdc", "custom", "chex"),
        ("jt_bt", "jt_tg", "bt", "tg"),
    ):
        if route == "custom":
            classes = custom_class("node", "classmethod", checker, "plain")
            good, bad, nodes = "C(X, Y)", "C(X, BAD)", (("C", "hits"),)
        else:
            classes = dc_class("C", route, checker)
            good, bad, nodes = "C(x=X, y=Y)", "C(x=X, y=BAD)", (("C", "all"),)
        classes = [
            "def jaxtyping_disable(value):",
            "    import jaxtyping",
            '    jaxtyping.config.update("jaxtyping_disable", value)',
            "",
        ] + classes
        ops = OFFSWITCH[scenario].replace("MAKE_BAD", bad).replace("MAKE_GOOD", good)
        main = standard_main(good, None, ops)
        core = (scenario, route, checker) in {
            ("construct", "struct", "jt_bt"),
            ("good_off_on", "jaxdc", "jt_tg"),
            ("operate", "custom", "jt_bt"),
        }
        programs.append(
            Program(
                _name("offswitch", scenario, route, checker),
                "offswitch",
                source(classes, main),
                jit="jit(" in ops,
                relaxed=None,
                nodes=nodes,
                core=core,
            )
        )
    return programs


# --- region: AOT and placeholder trees ----------------------------------------------------

AOT_OPS = {
    "lower": 'lowered = jit(STEP).lower(s)\n        out["text"] = len(lowered.as_text()) > 0',
    "compile": 'out["compiled"] = type(jit(STEP).lower(s).compile()).__name__',
    "lowered_in_avals": 'out["v"] = aot_attr(jit(STEP).lower(s), "in_avals")',
    "lowered_out_info": 'out["v"] = aot_attr(jit(STEP).lower(s), "out_info")',
    "lowered_args_info": 'out["v"] = aot_attr(jit(STEP).lower(s), "args_info")',
    "compiled_in_avals": 'out["v"] = aot_attr(jit(STEP).lower(s).compile(), "in_avals")',
    "compiled_out_info": 'out["v"] = aot_attr(jit(STEP).lower(s).compile(), "out_info")',
    "compiled_shardings": 'out["v"] = aot_attr(jit(STEP).lower(s).compile(), "output_shardings")',
    "eval_shape": 'out["v"] = jax.eval_shape(STEP, s)',
    "eval_shape_make": 'out["v"] = jax.eval_shape(lambda: MAKE)',
    "tree_none": 'out["v"] = jax.tree.map(lambda _: None, s)',
    "tree_sds": 'out["v"] = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), s)',
    "tree_pspec": 'out["v"] = jax.tree.map(lambda _: jax.sharding.PartitionSpec(), s)',
}


def region_aot() -> list[Program]:
    programs = []
    for op, route, checker in itertools.product(
        tuple(AOT_OPS), ("struct", "jaxdc", "custom"), ("jt_bt", "jt_tg", "bt", "tg")
    ):
        if route == "custom":
            classes = custom_class("node", "classmethod", checker, "plain")
            make, nodes = "C(X, Y)", (("C", "hits"),)
        else:
            classes = dc_class("C", route, checker)
            make, nodes = "C(x=X, y=Y)", (("C", "all"),)
        body = AOT_OPS[op].replace(
            "STEP", "(lambda s: jax.tree.map(lambda v: v + 1, s))"
        )
        body = body.replace("MAKE", make)
        ops = f'    with phase("aot"):\n        {body}\n'
        main = standard_main(make, None, ops)
        core = (op, route, checker) in {
            ("lowered_out_info", "struct", "jt_bt"),
            ("compiled_in_avals", "custom", "tg"),
            ("tree_none", "jaxdc", "jt_tg"),
        }
        programs.append(
            Program(
                _name("aot", op, route, checker),
                "aot",
                source(classes, main),
                jit="jit(" in body,
                relaxed="placeholder",
                nodes=nodes,
                core=core,
            )
        )
    return programs


# --- region: jax.disable_jit() ---------------------------------------------------------------

DISABLE_JIT = {
    "jit_cls": 'out["v"] = attempt(lambda: jit(C)(x=X, y=ARG))',
    "jit_partial": 'out["v"] = attempt(lambda: jit(functools.partial(C, x=X))(y=ARG))',
    "jit_step": 'out["v"] = attempt(lambda: jit(lambda s: jax.tree.map(lambda v: v + 1, s))(s))',
    "jit_step_make": 'out["v"] = attempt(lambda: jit(lambda a: C(x=a, y=ARG))(X))',
}


def region_disable_jit() -> list[Program]:
    programs = []
    for op, arg, route, checker in itertools.product(
        tuple(DISABLE_JIT),
        ("Y", "BAD"),
        ("struct", "jaxdc", "chex"),
        ("jt_bt", "jt_tg", "bt", "tg"),
    ):
        if op == "jit_step" and arg == "BAD":
            continue
        classes = dc_class("C", route, checker)
        body = DISABLE_JIT[op].replace("ARG", arg)
        ph = "jit1" if op == "jit_step" else "construct"
        again = body.replace('out["v"]', 'out["again"]')
        ph2 = "jitN" if ph == "jit1" else ph
        ops = (
            "    with jax.disable_jit():\n"
            f'        with phase("{ph}"):\n'
            f"            {body}\n"
            f'        with phase("{ph2}"):\n'
            f"            {again}\n"
        )
        main = standard_main("C(x=X, y=Y)", None, ops)
        core = (op, arg, route, checker) in {
            ("jit_cls", "BAD", "struct", "jt_bt"),
            ("jit_partial", "BAD", "jaxdc", "tg"),
        }
        programs.append(
            Program(
                _name("disable_jit", op, arg.lower(), route, checker),
                "disable_jit",
                source(classes, main),
                jit=True,
                relaxed=None,
                nodes=(("C", "all"),),
                core=core,
            )
        )
    return programs


# --- region: hand-written __slots__, slots=True -------------------------------------------------

SLOTS = {
    "weakref": '__slots__ = ("x", "y", "__weakref__")',
    "dict": '__slots__ = ("x", "y", "__dict__")',
    "slots_true": None,
}


def region_slots() -> list[Program]:
    programs = []
    for slots, z, route, checker in itertools.product(
        tuple(SLOTS),
        ("z_default", "no_z", "z_data"),
        ("jaxdc", "jaxdc_explicit_drop"),
        ("jt_bt", "jt_tg", "bt", "tg"),
    ):
        if z == "z_data" and slots != "slots_true":
            continue  # a field with a default next to __slots__: refused at class creation
        deco_args = "frozen=True" + (", slots=True" if slots == "slots_true" else "")
        lines = [
            CLASS_CHECKERS[checker],
            f"@dataclasses.dataclass({deco_args})",
            "class C:",
        ]
        members = [f"x: {ARRAY}", f"y: {ARRAY}"]
        if SLOTS[slots]:
            members.insert(0, SLOTS[slots])
        data = ["x", "y"]
        if z == "z_default":
            members.append("z: float = dataclasses.field(init=False, default=0.5)")
        elif z == "z_data":
            members.append("z: Any = dataclasses.field(default=0.5)")
            data.append("z")
        lines += _indent(members)
        drop = (
            ', drop_fields=["z"]'
            if route == "jaxdc_explicit_drop" and z == "z_default"
            else ""
        )
        lines.append(
            f"jax.tree_util.register_dataclass(C, data_fields={data!r}, meta_fields=[]{drop})"
        )
        ops = (
            VALID_OPS
            + """\
    with phase("tree"):
        out["z_after"] = getattr(out["map"], "z", "<none>")
        out["has_dict"] = hasattr(out["map"], "__dict__") and sorted(vars(out["map"]))
"""
        )
        main = standard_main("C(x=X, y=Y)", "C(x=X, y=BAD)", ops)
        core = (slots, z, route, checker) in {
            ("weakref", "z_default", "jaxdc", "jt_bt"),
            ("dict", "z_default", "jaxdc", "tg"),
        }
        programs.append(
            Program(
                _name("slots", slots, z, route, checker),
                "slots",
                source(lines, main),
                jit=True,
                relaxed=None,
                nodes=(("C", "all"),),
                core=core,
            )
        )
    return programs


# --- region: tree operations on valid values; direct constructions of invalid ones --------------

TREEOPS = {
    "tree_map": ('out["v"] = jax.tree.map(lambda v: v * 2, s)', "tree", None),
    "tree_map_path": (
        'out["v"] = jax.tree_util.tree_map_with_path(lambda p, v: v + len(p), s)',
        "tree",
        None,
    ),
    "tree_map_list": (
        'out["v"] = jax.tree.map(lambda a, b: a + b, [s, s], [s, s])',
        "tree",
        None,
    ),
    "tree_unflatten": (
        'out["v"] = jax.tree_util.tree_unflatten(jax.tree.structure(s), jax.tree.leaves(s))',
        "tree",
        None,
    ),
    "grad": ('out["v"] = jax.grad(lambda s: jnp.sum(s.x * s.y))(s)', "tree", None),
    "vmap": (
        'out["v"] = jax.vmap(lambda a: jnp.sum(jax.tree.map(lambda v: v * a, s).x))(jnp.arange(2.0))',
        "tree",
        None,
    ),
    "scan": (
        'out["v"] = jax.lax.scan(lambda c, _: (jax.tree.map(lambda v: v + 1, c), None), s, None, length=3)[0]',
        "tree",
        None,
    ),
    "device_put": ('out["v"] = jax.device_put(s)', "tree", None),
    "jit_identity": (
        'out["v"] = (lambda f: f(f(f(s))))(jit(lambda s: s))',
        "jit1",
        None,
    ),
    "jit_grad": (
        'out["v"] = (lambda f: f(f(s)))(jit(lambda s: jax.tree.map(lambda a, g: a - 0.1 * g, s, jax.grad(lambda t: jnp.sum(t.x ** 2))(s))))',
        "jit1",
        None,
    ),
    # Constructions: checked with and without the plugin.
    "bad_direct": ('out["v"] = attempt(lambda: MAKE_BAD)', "construct", None),
    "bad_traced": (
        'out["v"] = attempt(lambda: jit(lambda: MAKE_BAD)())',
        "construct",
        None,
    ),
    "bad_tree_map_cls": (
        'out["v"] = attempt(lambda: jax.tree.map(lambda a, b: CLS(a, b), [X], [BAD]))',
        "construct",
        None,
    ),
    "bad_eval_shape": (
        'out["v"] = attempt(lambda: jax.eval_shape(lambda: MAKE_BAD))',
        "construct",
        None,
    ),
    "bad_replace": (
        'out["v"] = attempt(lambda: dataclasses.replace(s, y=BAD))',
        "construct",
        None,
    ),
    "bad_vmap_cls": (
        'out["v"] = attempt(lambda: jax.vmap(CLS)(jnp.ones((2, 3)), jnp.ones((2, 3), jnp.int32)))',
        "construct",
        None,
    ),
    "bad_callback": (
        'out["v"] = attempt(lambda: jit(lambda a: jax.pure_callback(lambda v: np.float32(1.0 if isinstance(attempt(lambda: CLS(v, np.ones(3, np.int32))), Raised) else 0.0), jax.ShapeDtypeStruct((), jnp.float32), a))(X))',
        "construct",
        None,
    ),
    # Equinox's trade-off: a tree operation that makes invalid leaves.
    "bad_unflatten": (
        'out["v"] = jax.tree_util.tree_unflatten(jax.tree.structure(s), [X, BAD])',
        "tree",
        "tradeoff",
    ),
    "astype_int": (
        'out["v"] = jax.tree.map(lambda v: v.astype(jnp.int32), s)',
        "tree",
        "tradeoff",
    ),
    "astype_int_jit": (
        'out["v"] = jit(lambda s: jax.tree.map(lambda v: v.astype(jnp.int32), s))(s)',
        "jit1",
        "tradeoff",
    ),
}


def _operation_programs(
    region: str,
    table: dict[str, tuple[str, str, str | None]],
    core: set[tuple[str, str, str]],
    loops: Callable[[str], bool],
    loops_why: str,
    helpers: str = "",
) -> list[Program]:
    """One program per operation of `table` (`(body, phase, relaxed)`), class route
    and checker: the class `C` (a custom node, or a dataclass), constructed, then
    the operation in its phase. `MAKE_BAD` in a body is an invalid construction of
    `C`, `CLS` the class; `loops(op)` tells the operations that loop over a carry,
    which a chex class can't be on jax 0.4.x (`loops_why`); `helpers` is module
    code the bodies call."""
    programs = []
    for op, route, checker in itertools.product(
        tuple(table),
        ("struct", "jaxdc", "chex", "custom"),
        ("jt_bt", "jt_tg", "bt", "tg"),
    ):
        body, ph, relaxed = table[op]
        if route == "custom":
            if op == "bad_replace":
                continue  # no dataclass to replace a field of
            classes = custom_class("node", "classmethod", checker, "plain")
            make, bad, nodes = "C(X, Y)", "C(X, BAD)", (("C", "hits"),)
        else:
            classes = dc_class("C", route, checker)
            make, bad, nodes = "C(x=X, y=Y)", "C(x=X, y=BAD)", (("C", "all"),)
        body = body.replace("MAKE_BAD", bad).replace("CLS", "C")
        ops = f'    with phase("{ph}"):\n        {body}\n'
        if route == "chex" and loops(op):
            # jax 0.4.x's loops fail on a chex carry, in their own error message.
            ops = f'    require(jax_version() >= (0, 5, 0), "{loops_why}")\n' + ops
        main = standard_main(make, None, ops)
        programs.append(
            Program(
                _name(region, op, route, checker),
                region,
                source([*classes, "", helpers] if helpers else classes, main),
                jit="jit(" in body,
                relaxed=relaxed,
                nodes=nodes,
                core=(op, route, checker) in core,
            )
        )
    return programs


def region_treeops() -> list[Program]:
    return _operation_programs(
        "treeops",
        TREEOPS,
        {
            ("astype_int", "struct", "jt_bt"),
            ("bad_tree_map_cls", "custom", "tg"),
            ("scan", "chex", "bt"),
            ("bad_callback", "jaxdc", "jt_tg"),
        },
        loops=lambda op: op == "scan",
        loops_why="scan of a chex carry",
    )


# --- region: control flow and differentiation carrying the class ------------------------------

# Module-level helpers the `transforms` programs call (`custom_vjp`, `custom_jvp`).
TRANSFORM_HELPERS = """\
@jax.custom_vjp
def vjp_sin(s):
    return jax.tree.map(jnp.sin, s)


def _vjp_sin_fwd(s):
    return vjp_sin(s), s


def _vjp_sin_bwd(s, g):
    return (jax.tree.map(lambda a, b: jnp.cos(a) * b, s, g),)


vjp_sin.defvjp(_vjp_sin_fwd, _vjp_sin_bwd)


@jax.custom_jvp
def jvp_sin(s):
    return jax.tree.map(jnp.sin, s)


@jvp_sin.defjvp
def _jvp_sin_jvp(primals, tangents):
    (s,), (t,) = primals, tangents
    return jvp_sin(s), jax.tree.map(lambda a, b: jnp.cos(a) * b, s, t)
"""

STEP = "lambda c: jax.tree.map(lambda v: v + 1, c)"

# (body, phase, relaxed): a transformation whose carry, operand, output or tangent
# is an instance of the class, eagerly and inside `jit`; then constructions of an
# invalid one inside the traced function, which every mode must still reject.
TRANSFORMS = {
    "while_loop": (
        f'out["v"] = jax.lax.while_loop(lambda c: c.x[0] < 4.0, {STEP}, s)',
        "tree",
        None,
    ),
    "fori_loop": (
        'out["v"] = jax.lax.fori_loop(0, 3, lambda i, c: jax.tree.map(lambda v: v + i, c), s)',
        "tree",
        None,
    ),
    "cond": (
        f'out["v"] = jax.lax.cond(True, {STEP}, lambda c: c, s)',
        "tree",
        None,
    ),
    "switch": (
        f'out["v"] = jax.lax.switch(1, [lambda c: c, {STEP}], s)',
        "tree",
        None,
    ),
    "scan_ys": (
        f'out["v"] = jax.lax.scan(lambda c, _: (({STEP})(c), c.x), s, None, length=2)',
        "tree",
        None,
    ),
    "value_and_grad_aux": (
        'out["v"] = jax.value_and_grad(lambda s: (jnp.sum(s.x * s.y), s), has_aux=True)(s)',
        "tree",
        None,
    ),
    "jvp": (
        'out["v"] = jax.jvp(lambda s: jax.tree.map(jnp.sin, s), (s,), (s,))',
        "tree",
        None,
    ),
    "linearize": (
        'out["v"] = (lambda r: (r[0], r[1](s)))(jax.linearize(lambda s: jax.tree.map(jnp.sin, s), s))',
        "tree",
        None,
    ),
    "vjp": (
        'out["v"] = (lambda r: (r[0], r[1](r[0])))(jax.vjp(lambda s: jax.tree.map(jnp.sin, s), s))',
        "tree",
        None,
    ),
    "checkpoint": (
        'out["v"] = jax.checkpoint(lambda s: jax.tree.map(jnp.sin, s))(s)',
        "tree",
        None,
    ),
    # The backward pass of a `custom_vjp` function rebuilds its arguments from
    # `object()` leaves for their key paths: a placeholder tree.
    "custom_vjp_grad": (
        'out["v"] = jax.grad(lambda s: jnp.sum(vjp_sin(s).x))(s)',
        "tree",
        "placeholder",
    ),
    "custom_jvp_grad": (
        'out["v"] = jax.grad(lambda s: jnp.sum(jvp_sin(s).y))(s)',
        "tree",
        None,
    ),
    "named_call": (
        f'out["v"] = jax.named_call({STEP}, name="step")(s)',
        "tree",
        None,
    ),
    "jit_while_loop": (
        f'out["v"] = (lambda f: f(f(s)))(jit(lambda s: jax.lax.while_loop(lambda c: c.x[0] < 9.0, {STEP}, s)))',
        "jit1",
        None,
    ),
    "jit_cond": (
        f'out["v"] = (lambda f: f(f(s)))(jit(lambda s: jax.lax.cond(s.x[0] > 0, {STEP}, lambda c: c, s)))',
        "jit1",
        None,
    ),
    "jit_remat_grad": (
        'out["v"] = (lambda f: f(f(s)))(jit(jax.grad(jax.checkpoint(lambda s: jnp.sum(jax.tree.map(jnp.sin, s).x)))))',
        "jit1",
        None,
    ),
    "jit_custom_vjp": (
        'out["v"] = (lambda f: f(f(s)))(jit(lambda s: jax.grad(lambda t: jnp.sum(vjp_sin(t).x))(s)))',
        "jit1",
        "placeholder",
    ),
    # Constructions inside a traced function, from arrays (no instance goes in, so
    # every check of the phase is a construction's): the invalid one is rejected
    # by every mode, at trace time.
    "bad_in_cond": (
        'out["v"] = attempt(lambda: jax.lax.cond(True, lambda a: CLS(x=a, y=BAD).x, lambda a: CLS(x=a, y=a).x, X))',
        "construct",
        None,
    ),
    "bad_in_while_body": (
        'out["v"] = attempt(lambda: jax.lax.while_loop(lambda a: a[0] < 4.0, lambda a: CLS(x=a + 1, y=BAD).x, X))',
        "construct",
        None,
    ),
    "bad_in_scan_body": (
        'out["v"] = attempt(lambda: jax.lax.scan(lambda a, _: (CLS(x=a, y=BAD).x, None), X, None, length=2))',
        "construct",
        None,
    ),
    "bad_in_checkpoint": (
        'out["v"] = attempt(lambda: jax.checkpoint(lambda a: CLS(x=a, y=BAD).x)(X))',
        "construct",
        None,
    ),
    "bad_in_jit_grad": (
        'out["v"] = attempt(lambda: jit(jax.grad(lambda a: jnp.sum(CLS(x=a, y=a.astype(jnp.int32)).x)))(X))',
        "construct",
        None,
    ),
    "good_in_vmap_grad": (
        'out["v"] = jax.vmap(jax.grad(lambda a: jnp.sum(CLS(x=a, y=a * 2).y)))(jnp.ones((2, 3)))',
        "construct",
        None,
    ),
    # Equinox's trade-off: a transformation whose output stacks the class's leaves.
    "scan_stacked": (
        'out["v"] = jax.lax.scan(lambda c, _: (c, c), s, None, length=2)[1]',
        "tree",
        "tradeoff",
    ),
    "vmap_out": (
        'out["v"] = jax.vmap(lambda a: jax.tree.map(lambda v: v * a, s))(jnp.arange(2.0))',
        "tree",
        "tradeoff",
    ),
}


def region_transforms() -> list[Program]:
    return _operation_programs(
        "transforms",
        TRANSFORMS,
        {
            ("while_loop", "struct", "jt_bt"),
            ("custom_vjp_grad", "custom", "tg"),
            ("bad_in_cond", "jaxdc", "jt_tg"),
            ("jit_cond", "chex", "bt"),
        },
        loops=lambda op: "scan" in op or "loop" in op,
        loops_why="a loop over a chex carry",
        helpers=TRANSFORM_HELPERS,
    )


_GENERATORS: dict[str, Callable[[], list[Program]]] = {
    "nested": region_nested,
    "checkers": region_checkers,
    "custom": region_custom,
    "shapes": region_shapes,
    "stacked": region_stacked,
    "static": region_static,
    "offswitch": region_offswitch,
    "aot": region_aot,
    "disable_jit": region_disable_jit,
    "slots": region_slots,
    "treeops": region_treeops,
    "transforms": region_transforms,
}


def _generator(region: str) -> Callable[[], list[Program]]:
    if region in _GENERATORS:
        return _GENERATORS[region]
    import differential_substitutes  # it builds on this module

    return differential_substitutes.GENERATORS[region]


def generate(region: str) -> list[Program]:
    """Every program of `region`, in a fixed order."""
    programs = _generator(region)()
    names = [p.name for p in programs]
    assert len(set(names)) == len(names), f"duplicate program names in {region}"
    return programs


def again(programs: Iterable[Program]) -> list[Program]:
    """`programs`, each running its `main()` twice: every construction is made again
    after the first run's unflattens (where `install()` has put its guards in
    place), and compared too (the values under keys ending in `@again`)."""
    return [dataclasses.replace(p, repeat=2) for p in programs]


def default_seed() -> int:
    """The seed of the default batches: one per Python minor version, so that CI's
    sessions (one per Python) sample different programs."""
    return 1000 + sys.version_info[1]


def batch(
    region: str, seed: int | None = None, size: int = DEFAULT_SIZE
) -> list[Program]:
    """The region's core programs, then a seeded sample of the others, `size` in all
    (or the core programs, if there are more of them)."""
    programs = generate(region)
    core = [p for p in programs if p.core]
    rest = [p for p in programs if not p.core]
    rng = random.Random(f"{region}/{default_seed() if seed is None else seed}")
    return core + rng.sample(rest, max(0, min(len(rest), size - len(core))))
