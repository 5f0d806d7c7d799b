"""The regions of the differential suite that attack what the plugin puts in place of
the user's or JAX's objects (issue 21): the generated guards on constructors, the
generated dataclass flatten/unflatten, the marked unflattens, the proxy that
`unflatten_safe(jitted)` returns. Each must behave exactly as what it replaces.

- `callforms`: defaults omitted and passed (`None` under an array annotation,
  `scale: float = 1`, `struct.field(default=None)`), positional and keyword
  arguments as written, keyword-only and positional-only parameters, `*args,
  **kwargs` wrappers whose `__wrapped__` signature differs (a `functools.wraps`
  decorator under the checker, chex's mappable `__init__`), parameter and field
  names that collide with every name a generated function uses, `.replace()`, and
  a construction nested in an unflatten whose hooks consume no mark;
- `serialize`: pickle, cloudpickle (by reference, and by value as for `__main__`)
  and `copy`/`deepcopy` of classes, instances, constructors, jitted and `@safe`
  functions, and objects holding them, before and after the first unflatten;
- `order`: `flatten_one_level` (the children's container, assigning into it),
  keypaths, `vars()` order, `repr`, pickle bytes, `node_data()`, for meta fields
  before, between and after data fields, and `__init__(**kwargs)` classes that
  write in keyword order;
- `memo`: inside a `@jaxtyped` function, a rebuild of a class whose checker reads
  the enclosing memo, then a construction inconsistent with the dims it bound;
- `proxy`: a jitted function used as a method (`__self__`, `__name__`, `lower`,
  `clear_cache`, ... on the bound form) and `copy`/`deepcopy`/pickle of it and of
  objects holding it.

Every program constructs, rebuilds (the class's first unflatten, where `install()`
puts its guards in place) and constructs again. Most values are what an `attempt`
returned: the comparison with the plain run is on the outcome of each step, and on
every observable of the values (`differential_harness.digest`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from differential_programs import (
    ARRAY,
    CLASS_CHECKERS,
    INIT_CHECKERS,
    Program,
    _indent,
    _name,
    source,
)

REGIONS = ("callforms", "serialize", "order", "memo", "proxy")

# What the programs of these regions use besides the common header.
PRELUDE = '''\
import copy
import inspect
import pickle
import sys

try:
    import cloudpickle
except ImportError:  # the `test` extra installs it
    cloudpickle = None

MODULE = sys.modules[__name__]
RUNS = []  # one entry per run of `main()`


def first_calls():
    """The phase of the calls of jitted functions made once per program (at its top
    level): `jit1` in its first run, `jitN` in the runs after (`--again`)."""
    return "jit1" if len(RUNS) <= 1 else "jitN"


def through(obj, how):
    """`obj` after a round trip: `pickle`, `cloudpickle`, `copy` or `deepcopy`."""
    if how == "pickle":
        return pickle.loads(pickle.dumps(obj))
    if how == "cloudpickle":
        require(cloudpickle is not None, "no cloudpickle")
        return pickle.loads(cloudpickle.dumps(obj))
    if how == "copy":
        return copy.copy(obj)
    return copy.deepcopy(obj)


def as_written(init):
    """A decorator that is not a checker: an `(self, *args, **kwargs)` wrapper that
    notes how it was called (how many positional arguments, the keywords in order)."""

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        note(f"{type(self).__name__}.__init__ args={len(args)} kwargs={list(kwargs)}")
        return init(self, *args, **kwargs)

    return __init__
'''

CHECKERS = ("jt_bt", "jt_tg", "bt", "tg")
B = ARRAY  # annotation of the second data field


class Field(NamedTuple):
    name: str
    annotation: str = ARRAY
    default: str | None = None  # source of the default, or no default
    static: bool = False  # a meta field (aux data)
    how: str = "plain"  # "plain" (`= default`), "field" (`struct.field(default=...)`)


def field_lines(
    route: str, fields: Sequence[Field], kw_only_from: int | None
) -> list[str]:
    """The class body's field declarations for `route`."""
    lines = []
    for i, f in enumerate(fields):
        if kw_only_from == i:
            lines.append("_: dataclasses.KW_ONLY")
        text = f"{f.name}: {f.annotation}"
        if route in ("struct", "pytreenode") and (f.static or f.how == "field"):
            args = ["pytree_node=False"] if f.static else []
            if f.default is not None:
                args.append(f"default={f.default}")
            text += f" = struct.field({', '.join(args)})"
        elif route in ("jaxdc_deco",) and (f.static or f.how == "field"):
            args = ["metadata=dict(static=True)"] if f.static else []
            if f.default is not None:
                args.insert(0, f"default={f.default}")
            text += f" = dataclasses.field({', '.join(args)})"
        elif f.how == "field" and f.default is not None:
            text += f" = dataclasses.field(default={f.default})"
        elif f.default is not None:
            text += f" = {f.default}"
        lines.append(text)
    return lines


DC_ROUTES = ("struct", "pytreenode", "jaxdc", "jaxdc_deco", "chex")


def dataclass(
    name: str,
    route: str,
    checker: str | None,
    fields: Sequence[Field],
    *,
    body: Iterable[str] = (),
    kw_only_from: int | None = None,
    above: Iterable[str] = (),
) -> list[str]:
    """A dataclass `name` registered through `route`, `checker` (a key of
    `CLASS_CHECKERS`) as its class decorator, above the registration."""
    lines = list(above)
    if checker == "bt557":
        lines.insert(0, 'require(HAS_PEP557, "this beartype has no is_pep557_fields")')
    if checker:
        lines.append(CLASS_CHECKERS[checker])
    lines += {
        "struct": ["@struct.dataclass"],
        "pytreenode": [],
        "jaxdc": ["@dataclasses.dataclass(frozen=True)"],
        "jaxdc_deco": [
            "@jax.tree_util.register_dataclass",
            "@dataclasses.dataclass(frozen=True)",
        ],
        "chex": ["@chex.dataclass"],
    }[route]
    if route == "jaxdc_deco":
        lines.insert(
            0,
            "require(jax_version() >= (0, 4, 36) and inspect"
            ".signature(jax.tree_util.register_dataclass).parameters['data_fields']"
            '.default is None, "register_dataclass infers no fields here")',
        )
    lines.append(
        f"class {name}(struct.PyTreeNode):"
        if route == "pytreenode"
        else f"class {name}:"
    )
    members = field_lines(route, fields, kw_only_from) + list(body)
    lines += _indent(members or ["pass"])
    if route == "jaxdc":
        data = [f.name for f in fields if not f.static]
        meta = [f.name for f in fields if f.static]
        lines.append(
            f"jax.tree_util.register_dataclass({name}, data_fields={data!r}, "
            f"meta_fields={meta!r})"
        )
    return lines


def custom(
    name: str,
    checker: str,
    params: Sequence[Field],
    *,
    this: str = "self",
    posonly: int = 0,
    kw_only_from: int | None = None,
    decorators: Iterable[str] = (),
    extra: Iterable[str] = (),
) -> list[str]:
    """A custom node `name` (`register_pytree_node_class`): `checker` on a
    hand-written `__init__(this, *params)` that stores each parameter; its data
    fields are its children, its static ones its aux data; its unflatten passes
    each as the signature allows (positional, else by keyword)."""
    declared = []
    for i, p in enumerate(params):
        if kw_only_from == i:
            declared.append("*")
        text = f"{p.name}: {p.annotation}"
        if p.default is not None:
            text += f" = {p.default}"
        declared.append(text)
        if posonly and i + 1 == posonly:
            declared.append("/")
    data = [p for p in params if not p.static]
    meta = [p for p in params if p.static]

    def passed(i: int, p: Field, value: str) -> str:
        by_keyword = kw_only_from is not None and i >= kw_only_from
        return f"{p.name}={value}" if by_keyword else value

    args = []
    for i, p in enumerate(params):
        if p.static:
            value = f"aux[{meta.index(p)}]"
        else:
            value = f"children[{data.index(p)}]"
        args.append(passed(i, p, value))
    children = ", ".join(f"{this}.{p.name}" for p in data)
    aux = ", ".join(f"{this}.{p.name}" for p in meta)
    lines = [
        "@jax.tree_util.register_pytree_node_class",
        f"class {name}:",
        f"    {INIT_CHECKERS[checker]}",
        *[f"    {d}" for d in decorators],
        f"    def __init__({this}, {', '.join(declared)}):",
        *[f"        {this}.{p.name} = {p.name}" for p in params],
        *_indent(extra),
        f"    def tree_flatten({this}):",
        f"        return ({children},), ({aux}{',' if meta else ''})",
        "    @classmethod",
        "    def tree_unflatten(cls, aux, children):",
        f'        hit("{name}")',
        f"        return cls({', '.join(args)})",
    ]
    return lines


def program(
    name: str,
    region: str,
    classes: Sequence[str],
    main: str,
    nodes: Iterable[tuple[str, str]],
    core: bool,
    relaxed: str | None = None,
) -> Program:
    text = source([PRELUDE, *classes], main)
    return Program(
        name,
        region,
        text,
        jit=any(word in text for word in ("jit(", "@jit", "@safe")),
        relaxed=relaxed,
        nodes=tuple(nodes),
        core=core,
    )


def attempts(prefix: str, calls: Sequence[str], indent: int = 8) -> str:
    pad = " " * indent
    return "".join(
        f'{pad}out["{prefix}{i}"] = attempt(lambda: {call})\n'
        for i, call in enumerate(calls)
    )


REBUILD = """\
    with phase("tree"):
        out["map"] = jax.tree.map(lambda v: v * 2, s)
        out["unflatten"] = jax.tree_util.tree_unflatten(*reversed(jax.tree.flatten(s)))
    step = jit(lambda s: jax.tree.map(lambda v: v + 1, s))
    with phase("jit1"):
        out["step"] = step(s)
    with phase("jitN"):
        out["stepN"] = step(s)
"""


def construct_rebuild_construct(
    make: str, calls: Sequence[str], after: Sequence[str] = ()
) -> str:
    """`main()`: construct `make`, try each of `calls`, rebuild (tree operations
    and a jitted step: the first unflatten), try each of `calls` again, then
    `after` (calls that need a rebuilt instance)."""
    return (
        "def main():\n"
        "    out = {}\n"
        '    with phase("construct"):\n'
        f"        s = {make}\n"
        '        out["s"] = s\n'
        + attempts("first", calls)
        + REBUILD
        + '    with phase("construct"):\n'
        + attempts("again", calls)
        + attempts("after", after)
        + "    return out\n"
    )


# --- region: call forms ---------------------------------------------------------------

POST_WORK = ["def __post_init__(self):", '    note(f"post_init {type(self).__name__}")']

# The names a generated guard, flatten or unflatten uses (or a builtin it calls),
# each taken by a parameter or field.
COLLIDING = (
    "self",
    "type",
    "mark",
    "building",
    "state",
    "args",
    "kwargs",
    "cls",
    "node",
    "meta",
    "data",
    "children",
    "aux",
    "keys",
    "values",
    "attributes",
    "name",
    "obj",
    "fn",
    "guard",
    "checked",
    "unchecked",
    "object",
    "getattr",
    "super",
    "dict",
    "zip",
    "d",
    "_cls",
    "_fn",
    "_new",
    "_init",
    "_slow",
    "_post",
    "_prepare",
    "_marks",
    "_unchecked",
    "_setattr",
    "_getattr",
    "_d0",
    "_m0",
    "_key0",
    "_name0",
    "_default0",
    "_factory0",
    "_tg_marks",
    "_tg_unchecked",
    "_tg_general",
    "_tg_state",
    "_tg_default1",
    "_tg_x",
    "__tracebackhide__",
)


class Form(NamedTuple):
    """A call form: the fields, the valid instance every program rebuilds, the calls
    tried before and after the first unflatten, the calls tried on the rebuilt
    instance, and where it applies."""

    fields: tuple[Field, ...]
    make: str
    calls: tuple[str, ...]
    after: tuple[str, ...] = ()
    routes: tuple[str, ...] = (*DC_ROUTES, "custom")
    kw_only_from: int | None = None
    posonly: int = 0
    post: tuple[str, ...] = ()  # a `__post_init__` of its own (else POST_WORK)
    decorators: tuple[str, ...] = ()  # under the checker, on a hand-written __init__
    init: bool = False  # dataclasses: a hand-written __init__ with the checker


X_ = Field("x")
REPLACES = (
    "dataclasses.replace(out['map'], x=Y)",
    "dataclasses.replace(out['map'], x=BAD)",
)

FORMS: dict[str, Form] = {
    # `b: Float[Array, "n"] = None`: never checked when not passed (beartype and
    # typeguard check what is passed).
    "default_none": Form(
        (X_, Field("b", default="None")),
        "C(x=X, b=Y)",
        ("C(x=X)", "C(X)", "C(x=X, b=Y)", "C(x=X, b=None)", "C(x=BAD)", "C(X, BAD)"),
        REPLACES,
    ),
    # `scale: float = 1`, a static field: the int default is never checked.
    "default_scale": Form(
        (X_, Field("scale", "float", "1", static=True)),
        "C(x=X, scale=1.0)",
        ("C(x=X)", "C(X)", "C(X, 2.0)", "C(x=X, scale=1)", "C(x=BAD)"),
        REPLACES,
        routes=("struct", "pytreenode", "jaxdc", "jaxdc_deco", "custom"),
    ),
    # A derived field, `struct.field(default=None)`, set by `__post_init__`.
    "derived_none": Form(
        (X_, Field("total", 'Float[Array, ""]', "None", how="field")),
        "C(x=X)",
        ("C(x=X)", "C(X)", "C(x=X, total=jnp.sum(X))", "C(x=BAD)"),
        REPLACES,
        routes=DC_ROUTES,
        post=(
            "def __post_init__(self):",
            "    if self.total is None:",
            "        object.__setattr__(self, 'total', jnp.sum(self.x))",
        ),
    ),
    # Keyword-only fields (`dataclasses.KW_ONLY`; `*` in a custom `__init__`).
    "kwonly": Form(
        (X_, Field("b", default="None")),
        "C(x=X, b=Y)",
        ("C(X)", "C(x=X)", "C(X, b=Y)", "C(x=X, b=BAD)", "C(BAD)"),
        REPLACES,
        routes=("struct", "jaxdc", "chex", "custom"),
        kw_only_from=1,
    ),
    # Positional-only parameters (custom nodes).
    "posonly": Form(
        (X_, Field("b", default="None")),
        "C(X, Y)",
        ("C(X)", "C(X, Y)", "C(X, b=Y)", "C(x=X)", "C(BAD)", "C(X, BAD)"),
        routes=("custom",),
        posonly=1,
    ),
    # A `functools.wraps` decorator under the checker: `(self, *args, **kwargs)`,
    # whose `__wrapped__` has the real signature.
    "wraps_init": Form(
        (X_, Field("b", default="None")),
        "C(x=X, b=Y)",
        ("C(x=X)", "C(X)", "C(X, Y)", "C(b=Y, x=X)", "C(x=BAD)"),
        REPLACES,
        decorators=("@as_written",),
        init=True,
    ),
    # Keywords in another order than the fields'.
    "reordered": Form(
        (X_, Field("b")),
        "C(b=Y, x=X)",
        ("C(b=Y, x=X)", "C(X, Y)", "C(X, b=Y)", "C(b=BAD, x=X)"),
        REPLACES,
        decorators=("@as_written",),
        init=True,
    ),
    # chex's own `(self, *args, **kwargs)` `__init__` (mappable: refuses positional
    # arguments), under the checker, with a `__post_init__` that does work.
    "chex_mappable": Form(
        (X_, Field("b", default="None")),
        "C(x=X, b=Y)",
        ("C(x=X)", "C(x=X, b=Y)", "C(X)", "C(x=BAD)"),
        (
            "out['map'].replace(x=Y)",
            "out['map'].replace(x=BAD)",
            "C(**dict(out['map']))",
            *REPLACES,
        ),
        routes=("chex",),
    ),
}


def _init_body(fields: Sequence[Field], kw_only_from: int | None) -> list[str]:
    """A hand-written dataclass `__init__` with the fields' parameters."""
    params = []
    for i, f in enumerate(fields):
        if kw_only_from == i:
            params.append("*")
        params.append(
            f"{f.name}: {f.annotation}" + (f" = {f.default}" if f.default else "")
        )
    return [
        f"def __init__(self, {', '.join(params)}):",
        *[f"    object.__setattr__(self, {f.name!r}, {f.name})" for f in fields],
    ]


def _callform_class(
    route: str, checker: str, form: Form, post: str
) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    if route == "custom":
        lines = custom(
            "C",
            checker,
            form.fields,
            posonly=form.posonly,
            kw_only_from=form.kw_only_from,
            decorators=form.decorators,
        )
        return lines, (("C", "hits"),)
    body: list[str] = []
    if form.init:
        body += [INIT_CHECKERS[checker], *form.decorators]
        body += _init_body(form.fields, form.kw_only_from)
    if form.post:
        body += list(form.post)
    elif post == "work":
        body += POST_WORK
    lines = dataclass(
        "C",
        route,
        None if form.init else checker,
        form.fields,
        body=body,
        kw_only_from=form.kw_only_from,
    )
    return lines, (("C", "all"),)


def _names_program(name: str, route: str, checker: str, core: bool) -> Program:
    """A field (parameter) named `name`, next to `x`."""
    other = Field(name, ARRAY)
    if route == "custom":
        # A parameter named `self` needs another name for the instance.
        this = "this" if name == "self" else "self"
        classes = custom("C", checker, (X_, other), this=this)
        nodes: tuple[tuple[str, str], ...] = (("C", "hits"),)
    else:
        classes = dataclass("C", route, checker, (X_, other), body=POST_WORK)
        nodes = (("C", "all"),)
    kw = f"**{{'x': X, {name!r}: Y}}"
    bad = f"**{{'x': X, {name!r}: BAD}}"
    calls = (f"C({kw})", "C(X, Y)", f"C({bad})", "C(X, BAD)", f"vars(C({kw}))")
    main = construct_rebuild_construct(f"C({kw})", calls)
    return program(
        _name("callforms", "names", name.strip("_") or name, route, checker)
        + ("-u" if name.startswith("_") else ""),
        "callforms",
        classes,
        main,
        nodes,
        core,
    )


# A construction of the same class inside `__post_init__`, with the fields swapped
# (only `x` is strict): nested in an unflatten whose library route calls no hook
# we guard. The rebuild makes `x` of the nested one an int array: plain raises.
MARK_ROUTES = {
    # chex: `__new__`, field writes, then `__post_init__` (unchecked).
    "chex": ["@chex.dataclass", "class C:"],
    # A dataclass registered as a custom node whose unflatten uses `object.__new__`
    # (as JAX's docs advise) and calls `__post_init__` itself.
    "custom_new": ["@dataclasses.dataclass", "class C:"],
}


def _mark_program(route: str, checker: str, core: bool) -> Program:
    lines = [CLASS_CHECKERS[checker], *MARK_ROUTES[route]]
    lines += _indent(
        [
            f"x: {ARRAY}",
            'y: Shaped[Array, "n"]',
            "def __post_init__(self):",
            "    # One level down, with the fields swapped: an int `y` becomes `x`.",
            "    if concrete(self.y) and self.y.dtype == jnp.int32:",
            "        C(x=self.y, y=self.x)",
        ]
    )
    nodes: tuple[tuple[str, str], ...] = (("C", "all"),)
    if route == "custom_new":
        lines += [
            "def flatten_c(c):",
            "    return (c.x, c.y), None",
            "def unflatten_c(aux, children):",
            '    hit("C")',
            "    obj = object.__new__(C)",
            "    obj.x, obj.y = children",
            "    obj.__post_init__()",
            "    return obj",
            "jax.tree_util.register_pytree_node(C, flatten_c, unflatten_c)",
        ]
        nodes = (("C", "hits"),)
    main = """\
def main():
    out = {}
    with phase("construct"):
        s = C(x=X, y=Y)
        out["s"] = s
        out["first"] = attempt(lambda: C(x=X, y=BAD))
    treedef = jax.tree.structure(s)
    with phase("tree"):
        out["swap"] = attempt(lambda: jax.tree_util.tree_unflatten(treedef, [X, BAD]))
        out["map"] = jax.tree.map(lambda v: v * 2, s)
        out["swap2"] = attempt(lambda: jax.tree_util.tree_unflatten(treedef, [X, BAD]))
    with phase("construct"):
        out["again"] = attempt(lambda: C(x=X, y=BAD))
        out["again_bad"] = attempt(lambda: C(x=BAD, y=X))
    return out
"""
    return program(
        _name("callforms", "mark", route, checker),
        "callforms",
        lines,
        main,
        nodes,
        core,
    )


CALLFORM_CORE = {
    ("default_none", "struct", "bt", "work"),
    ("default_scale", "jaxdc", "bt", "work"),
    ("derived_none", "struct", "jt_bt", "work"),
    ("wraps_init", "custom", "jt_bt", "work"),
    ("chex_mappable", "chex", "jt_bt", "work"),
}


def region_callforms() -> list[Program]:
    programs = []
    for form_name, route, checker, post in itertools.product(
        tuple(FORMS), (*DC_ROUTES, "custom"), CHECKERS, ("work", "none")
    ):
        form = FORMS[form_name]
        if route not in form.routes:
            continue
        if post == "none" and (route == "custom" or form.post):
            continue  # (the post_init axis is the dataclasses')
        classes, nodes = _callform_class(route, checker, form, post)
        if form.kw_only_from is not None and route != "custom":
            classes = [
                'require(sys.version_info >= (3, 10), "dataclasses.KW_ONLY")',
                *classes,
            ]
        after = form.after if route != "custom" else ()
        main = construct_rebuild_construct(form.make, form.calls, after)
        programs.append(
            program(
                _name(
                    "callforms",
                    form_name,
                    route,
                    checker,
                    post if route != "custom" else "",
                ),
                "callforms",
                classes,
                main,
                nodes,
                (form_name, route, checker, post) in CALLFORM_CORE,
            )
        )
    for i, (name, route) in enumerate(
        itertools.product(COLLIDING, ("struct", "jaxdc", "chex", "custom"))
    ):
        checker = CHECKERS[i % len(CHECKERS)]
        core = (name, route) in {("type", "struct"), ("mark", "custom")}
        programs.append(_names_program(name, route, checker, core))
    for route, checker in itertools.product(tuple(MARK_ROUTES), CHECKERS):
        core = (route, checker) in {("chex", "tg"), ("custom_new", "jt_bt")}
        programs.append(_mark_program(route, checker, core))
    return programs


# --- region: serialization ------------------------------------------------------------

SERIALIZE_CLASS_FIELDS = (X_, Field("y"))
HOWS = ("pickle", "cloudpickle", "copy", "deepcopy")

SERIALIZE_HELPERS = '''\
@jit
def step(s):
    return jax.tree.map(lambda v: v + 1, s)


@safe
def double(s):
    return jax.tree.map(lambda v: v * 2, s)


class Holder:
    """An object holding a function (in its `__dict__`)."""

    def __init__(self, fn):
        self.fn = fn


def use(target, loaded, s):
    """What `loaded` (the round trip of `target`) does."""
    if target == "C":
        return loaded is C, loaded(x=X, y=Y), attempt(lambda: loaded(x=X, y=BAD))
    if target == "init":
        obj = object.__new__(C)
        return (
            loaded is C.__init__,
            getattr(loaded, "__name__", None),
            attempt(lambda: loaded(obj, x=X, y=BAD)),
        )
    if target == "s":
        return loaded
    if target in ("step", "double"):
        return loaded(s)
    if target == "holder":
        return loaded.fn(s)
    return loaded["fn"](s)


def probe(out, stage, s, targets, hows):
    for target in targets:
        obj = {
            "C": C,
            "init": C.__init__,
            "s": s,
            "step": step,
            "double": double,
            "holder": Holder(step),
            "box": {"fn": double},
        }[target]
        for how in hows:
            if how == "cloudpickle_dumps":
                # Loading a class pickled by value in the process that defined it
                # sets the loaded attributes on it (cloudpickle's class tracker):
                # only at the end of the program.
                out[f"{stage}.{target}.{how}"] = attempt(
                    lambda: bool(cloudpickle.dumps(obj))
                )
            else:
                out[f"{stage}.{target}.{how}"] = attempt(
                    lambda: use(target, through(obj, how), s)
                )
'''

SERIALIZE_MAIN = """\
def main():
    RUNS.append(1)
    out = {}
    with phase("construct"):
        s = C(x=X, y=Y)
        out["s"] = s
        probe(out, "before", s, ("C", "init", "s"), HOWS)
    with phase("tree"):
        r = jax.tree.map(lambda v: v * 2, s)
    with phase(first_calls()):
        out["step"] = step(s)
        out["double"] = double(s)
    with phase("construct"):
        probe(out, "after", r, ("C", "init", "s"), HOWS)
        out["again"] = attempt(lambda: C(x=X, y=BAD))
    # (copies of a jitted function compile again: first calls)
    with phase("jit1"):
        probe(out, "after", r, ("step", "double", "holder", "box"), HOWS)
    # Loading a class pickled by value in the process that defined it sets the
    # loaded attributes on it: put them back after (for the run after this one).
    saved = dict(vars(C))
    with phase("construct"):
        probe(out, "last", r, ("s", "init", "C"), LAST_HOWS)
        out["last"] = attempt(lambda: C(x=X, y=BAD))
    with phase("jit1"):
        probe(out, "last", r, ("step", "double", "holder", "box"), LAST_HOWS)
    for name, value in saved.items():
        if vars(C).get(name) is not value:
            attempt(lambda: setattr(C, name, value))
    return out
"""


def region_serialize() -> list[Program]:
    programs = []
    for route, checker, post, where in itertools.product(
        (*DC_ROUTES, "custom"), CHECKERS, ("work", "none"), ("module", "main")
    ):
        if route == "custom" and post == "none":
            continue
        if route == "jaxdc_deco":
            continue  # (the same class as `jaxdc` once registered)
        if route == "custom":
            classes = custom("C", checker, SERIALIZE_CLASS_FIELDS)
            nodes: tuple[tuple[str, str], ...] = (("C", "hits"),)
        else:
            body = POST_WORK if post == "work" else []
            classes = dataclass("C", route, checker, SERIALIZE_CLASS_FIELDS, body=body)
            nodes = (("C", "all"),)
        if where == "main":
            # Loading a class pickled by value in the process that defined it puts
            # the loaded methods on the live class. A typeguard 2 wrapper loaded so
            # raises NameError when called (cloudpickle doesn't capture every global
            # it reads): every rebuild then fails without the plugin, and with it the
            # rebuild's check (that broken wrapper) is skipped. Not the plugin's
            # difference: a class loaded by value in another process is tested in
            # tests/adapt/test_passthrough.py.
            last = "()" if "tg" in checker else "('cloudpickle',)"
            lines = [
                "HOWS = ('pickle', 'cloudpickle_dumps', 'copy', 'deepcopy')",
                f"LAST_HOWS = {last}",
            ]
        else:
            lines = [f"HOWS = {HOWS!r}", "LAST_HOWS = ()"]
        if where == "main":
            # cloudpickle pickles what `__main__` defines by value: so here.
            lines += [
                'require(cloudpickle is not None, "no cloudpickle")',
                "cloudpickle.register_pickle_by_value(MODULE)",
            ]
        lines += classes + ["", SERIALIZE_HELPERS]
        core = (route, checker, post, where) in {
            ("struct", "tg", "work", "main"),
            ("chex", "bt", "work", "main"),
            ("custom", "jt_tg", "work", "module"),
        }
        programs.append(
            program(
                _name(
                    "serialize",
                    route,
                    checker,
                    post if route != "custom" else "",
                    where,
                ),
                "serialize",
                lines,
                SERIALIZE_MAIN,
                nodes,
                core,
            )
        )
    return programs


# --- region: containers and order -----------------------------------------------------

LAYOUTS = {
    # (field names in declaration order; `m`, `k` are meta (static) fields)
    "meta_first": ("m", "x", "y"),
    "meta_middle": ("x", "m", "y"),
    "meta_last": ("x", "y", "m"),
    "two_meta": ("k", "x", "m", "y"),
    "no_meta": ("x", "y"),
}
META = {"m": ("int", "1"), "k": ("str", "'k'")}

ORDER_MAIN = """\
def main():
    out = {}
    with phase("construct"):
        s = C(MAKE)
        out["s"] = s
        out["s_reordered"] = C(REORDERED)
REBUILD
    with phase("tree"):
        for key in ("map", "unflatten", "step"):
            children, aux = jax.tree_util.flatten_one_level(out[key])
            out[key + ".children"] = type(children).__name__
            out[key + ".aux"] = aux
            out[key + ".assign"] = attempt(
                lambda: (children.__setitem__(0, children[0] * 3), list(children))[1]
            )
            out[key + ".vars"] = list(vars(out[key]))
            out[key + ".repr"] = repr(out[key])
            out[key + ".paths"] = [
                jax.tree_util.keystr(p)
                for p, _ in jax.tree_util.tree_flatten_with_path(out[key])[0]
            ]
    with phase("construct"):
        out["again"] = C(MAKE)
        out["again_reordered"] = C(REORDERED)
        out["again_bad"] = attempt(lambda: C(BAD))
    return out
"""


def _order_fields(layout: str) -> tuple[Field, ...]:
    fields = []
    for n in LAYOUTS[layout]:
        if n in META:
            fields.append(Field(n, META[n][0], static=True))
        else:
            fields.append(Field(n))
    return tuple(fields)


def _kwargs_class(checker: str, fields: Sequence[Field], dc: bool) -> list[str]:
    """A class whose `__init__(**kwargs)` writes the attributes in keyword order,
    registered with `register_dataclass`: with explicit fields, or (`dc`) as a
    dataclass (`init=False`) whose static fields say so."""
    data = [f.name for f in fields if not f.static]
    meta = [f.name for f in fields if f.static]
    lines = []
    if dc:
        lines += [
            "require(jax_version() >= (0, 4, 36) and inspect"
            ".signature(jax.tree_util.register_dataclass).parameters['data_fields']"
            '.default is None, "register_dataclass infers no fields here")',
            "@jax.tree_util.register_dataclass",
            "@dataclasses.dataclass(init=False, repr=False)",
        ]
    lines.append("class C:")
    if dc:
        for f in fields:
            static = " = dataclasses.field(metadata=dict(static=True))"
            lines.append(f"    {f.name}: {f.annotation}{static if f.static else ''}")
    lines += [
        f"    {INIT_CHECKERS[checker]}",
        f"    def __init__(self, **kwargs: {ARRAY} | int | str):",
        "        for k, v in kwargs.items():",
        "            setattr(self, k, v)",
        "    def __repr__(self):",
        "        return f'C({vars(self)})'",
    ]
    if not dc:
        lines.append(
            f"jax.tree_util.register_dataclass(C, data_fields={data!r}, "
            f"meta_fields={meta!r})"
        )
    return lines


def region_order() -> list[Program]:
    programs = []
    for route, layout, checker, post in itertools.product(
        ("struct", "pytreenode", "jaxdc", "jaxdc_deco", "kwargs", "kwargs_dc"),
        tuple(LAYOUTS),
        CHECKERS,
        ("work", "none"),
    ):
        kwargs = route.startswith("kwargs")
        if kwargs and post == "none":
            continue
        fields = _order_fields(layout)
        if kwargs:
            classes = _kwargs_class(checker, fields, route == "kwargs_dc")
        else:
            body = POST_WORK if post == "work" else []
            classes = dataclass("C", route, checker, fields, body=body)

        def kw(values: dict[str, str], order: Sequence[str]) -> str:
            return ", ".join(f"{n}={values[n]}" for n in order)

        values = {
            n: META[n][1] if n in META else ("X" if n == "x" else "Y")
            for n in LAYOUTS[layout]
        }
        order = LAYOUTS[layout]
        bad = {**values, "y": "BAD"}
        main = (
            ORDER_MAIN.replace("REBUILD\n", REBUILD)
            .replace("REORDERED", kw(values, order[::-1]))
            .replace("MAKE", kw(values, order))
            .replace("BAD)", kw(bad, order) + ")")
        )
        core = (route, layout, checker, post) in {
            ("struct", "meta_first", "bt", "work"),
            ("jaxdc", "meta_middle", "jt_bt", "none"),
            ("kwargs", "meta_last", "tg", "work"),
        }
        programs.append(
            program(
                _name("order", route, layout, checker, "" if kwargs else post),
                "order",
                classes,
                main,
                (("C", "all"),),
                core,
            )
        )
    return programs


# --- region: memo effects -------------------------------------------------------------

MEMO_OPS = {
    # a rebuild of `s` inside the `@jaxtyped` function, and its phase on each call
    "tree_map": ("jax.tree.map(lambda v: v * 2, s)", "tree", "tree"),
    "unflatten": (
        "jax.tree_util.tree_unflatten(*reversed(jax.tree.flatten(s)))",
        "tree",
        "tree",
    ),
    "jit_identity": ("IDENTITY(s)", "jit1", "jitN"),
    "jit_map": ("STEP(s)", "jit1", "jitN"),
}
MEMO_MAKES = {
    # a construction whose `n` (4) differs from the one the rebuild bound (3)
    "same": "C(x=X4, y=X4)",
    "other": "D(v=X4)",
    "function": "takes_n(X4)",
}
MEMO_CHECKERS = ("bt", "tg", "init_bt", "init_tg", "jt_bt")

MEMO_MAIN = """\
X4 = jnp.ones(4)


@beartype
class D:
    def __init__(self, v: Float[Array, "n"]):
        self.v = v


@beartype
def takes_n(a: Float[Array, "n"]) -> int:
    return a.shape[0]


@jaxtyped(typechecker=ENCLOSING)
def inside(s: Any, ph: str) -> Any:
    with phase(ph):
        rebuilt = REBUILD
    with phase("construct"):
        inconsistent = attempt(lambda: MAKE)
    return {"rebuilt": rebuilt, "inconsistent": inconsistent}


def main():
    global IDENTITY, STEP  # new ones in each run: their first call is `jit1`
    IDENTITY = jit(lambda s: s)
    STEP = jit(lambda s: jax.tree.map(lambda v: v + 1, s))
    out = {}
    with phase("construct"):
        s = C(x=X, y=Y)
        out["s"] = s
        out["outside"] = attempt(lambda: MAKE)
    for i, ph in enumerate(PHASES):
        for k, v in inside(s, ph).items():
            out[f"{k}{i}"] = v
    return out
"""


def region_memo() -> list[Program]:
    programs = []
    for route, checker, enclosing, op, post in itertools.product(
        ("struct", "jaxdc", "chex", "custom"),
        MEMO_CHECKERS,
        ("jt_bt", "jt_tg"),
        tuple(MEMO_OPS),
        ("work", "none"),
    ):
        if route == "custom" and (
            post == "none" or not checker.startswith(("init_", "jt_"))
        ):
            continue
        if route == "chex" and checker.startswith("init_"):
            continue  # (chex rebuilds with `__new__`: no check, plain or not)
        fields = (X_, Field("y"))
        if route == "custom":
            classes = custom("C", checker.replace("init_", ""), fields)
            nodes: tuple[tuple[str, str], ...] = (("C", "hits"),)
        elif checker.startswith("init_"):
            body = [INIT_CHECKERS[checker[5:]], *_init_body(fields, None)]
            if post == "work":
                body += POST_WORK
            classes = dataclass("C", route, None, fields, body=body)
            nodes = (("C", "all"),)
        else:
            body = POST_WORK if post == "work" else []
            classes = dataclass("C", route, checker, fields, body=body)
            nodes = (("C", "all"),)
        if not checker.startswith("jt_"):
            # Its check reads the enclosing `@jaxtyped` function's memo, where every
            # rebuild of this program is made: the plugin keeps those checks, which
            # bind the dimensions a later construction is checked against.
            nodes = ()
        rebuild, ph1, ph2 = MEMO_OPS[op]
        make = list(MEMO_MAKES.values())[
            (len(programs) + MEMO_CHECKERS.index(checker)) % len(MEMO_MAKES)
        ]
        make_name = next(k for k, v in MEMO_MAKES.items() if v == make)
        main = (
            MEMO_MAIN.replace(
                "ENCLOSING", {"jt_bt": "beartype", "jt_tg": "typechecked"}[enclosing]
            )
            .replace("REBUILD", rebuild)
            .replace("MAKE", make)
            .replace("PHASES", repr((ph1, ph2)))
        )
        core = (route, checker, enclosing, op, post) in {
            ("struct", "bt", "jt_bt", "jit_identity", "work"),
            ("custom", "init_tg", "jt_tg", "tree_map", "work"),
            ("jaxdc", "tg", "jt_bt", "tree_map", "none"),
        }
        programs.append(
            program(
                _name(
                    "memo",
                    route,
                    checker,
                    "in_" + enclosing,
                    op,
                    make_name,
                    post if route != "custom" else "",
                ),
                "memo",
                classes,
                main,
                nodes,
                core,
            )
        )
    return programs


# --- region: the proxy of `unflatten_safe(jitted)` ------------------------------------

PROXY_HOLDERS = {
    # a registered pytree whose method is a jitted function (a class attribute):
    # `struct` is a flax dataclass with the checker on the class (`dataclass()`)
    "struct": [],
    "custom": [
        "@jax.tree_util.register_pytree_node_class",
        "class M:",
        "    CHECK",
        f"    def __init__(self, w: {ARRAY}):",
        "        self.w = w",
        "    apply = jit(apply_w)",
        "    def tree_flatten(self):",
        "        return (self.w,), None",
        "    @classmethod",
        "    def tree_unflatten(cls, aux, children):",
        '        hit("M")',
        "        return cls(*children)",
        "",
        "def make():",
        "    return M(X)",
    ],
    # an object that is no pytree: itself a static argument
    "static": [
        "class M:",
        "    CHECK",
        f"    def __init__(self, w: {ARRAY}):",
        "        self.w = w",
        "    apply = jit(apply_w, static_argnums=0)",
        "",
        "def make():",
        "    return M(X)",
    ],
}

PROXY_PROBES = {
    "attrs": (
        "type(m.apply).__name__",
        "m.apply.__self__ is m",
        "m.apply.__name__",
        "m.apply.__qualname__",
        "m.apply.__doc__",
        "m.apply.__module__",
        "m.apply.__func__ is M.__dict__['apply']",
        "m.apply.__wrapped__ is apply_w",
        "M.apply.__wrapped__ is apply_w",
        "M.apply.__name__",
        "m.apply == m.apply",
        "hash(m.apply) == hash(m.apply)",
        "str(inspect.signature(m.apply))",
        "str(inspect.signature(M.apply))",
        "callable(m.apply)",
        "m.apply(X)",
        "M.apply(m, X)",
    ),
    "aot": (
        "type(m.apply.lower(X)).__name__",
        "m.apply.clear_cache()",
        "type(m.apply.trace(X)).__name__",
        "m.apply.eval_shape(X)",
        "type(M.apply.lower(m, X)).__name__",
        "len(M.apply.lower(m, X).as_text()) > 0",
        "M.apply.clear_cache()",
        "m.apply(X)",
    ),
    "copy": (
        "copy.copy(M.apply)(m, X)",
        "copy.deepcopy(M.apply)(m, X)",
        "copy.copy(m.apply)(X)",
        "copy.deepcopy(m.apply)(X)",
        "copy.copy(m).apply(X)",
        "copy.deepcopy(m).apply(X)",
        "copy.deepcopy({'f': M.apply})['f'](m, X)",
        "copy.deepcopy(Holder(M.apply)).fn(m, X)",
        "copy.copy(Holder(M.apply)).fn(m, X)",
        "type(pickle.loads(pickle.dumps(M.apply))).__name__",
        "type(pickle.loads(pickle.dumps(m))).__name__",
        "m.apply(X)",
    ),
}

PROXY_MAIN = """\
class Holder:
    def __init__(self, fn):
        self.fn = fn


def main():
    RUNS.append(1)
    out = {}
    with phase("construct"):
        m = make()
        out["m"] = attempt(lambda: vars(m))
        out["bad"] = attempt(lambda: M(BAD))
    with phase(first_calls()):
PROBES    with phase("construct"):
        out["again"] = attempt(lambda: M(BAD))
    return out
"""


def region_proxy() -> list[Program]:
    programs = []
    for holder, group, checker in itertools.product(
        tuple(PROXY_HOLDERS), tuple(PROXY_PROBES), CHECKERS
    ):
        if holder == "struct":
            lines = dataclass(
                "M", "struct", checker, (Field("w"),), body=["apply = jit(apply_w)"]
            )
            lines += ["", "def make():", "    return M(w=X)"]
        else:
            lines = [
                line.replace("CHECK", INIT_CHECKERS[checker])
                for line in PROXY_HOLDERS[holder]
            ]
        classes = [
            "def apply_w(self, v):",
            '    """Scale `v` by the weights."""',
            "    return self.w * v",
            "",
            *lines,
        ]
        probes = PROXY_PROBES[group]
        if holder != "static":
            # Lowering with the instance as an argument rebuilds it with placeholder
            # leaves, which its check rejects: a covered operation (`aot` region).
            probes = tuple(p for p in probes if "M.apply.lower(m" not in p)
        main = PROXY_MAIN.replace("PROBES", attempts("probe", probes))
        main = main.replace("M(BAD)", "M(w=BAD)" if holder == "struct" else "M(BAD)")
        core = (holder, group, checker) in {
            ("struct", "attrs", "jt_bt"),
            ("custom", "copy", "bt"),
            ("static", "aot", "tg"),
        }
        programs.append(
            program(
                _name("proxy", holder, group, checker),
                "proxy",
                classes,
                main,
                (("M", "all" if holder == "struct" else "hits"),),
                core,
            )
        )
    return programs


GENERATORS = {
    "callforms": region_callforms,
    "serialize": region_serialize,
    "order": region_order,
    "memo": region_memo,
    "proxy": region_proxy,
}


# --- region: a package under jaxtyping's import hook ----------------------------------

# The hooked module: every function and class of it gets jaxtyping's decorator,
# the registered flatten/unflatten functions included. `total` is a helper that a
# constructor body calls (checked, as the body is).
HOOKED_COMMON = """\
import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct
from jaxtyping import Array, Float

from differential_harness import hit


def total(x: Float[Array, "n"], y: Float[Array, "n"]) -> Float[Array, "n"]:
    return x + y
"""

HOOKED_NODES = {
    "node_class": """
@jax.tree_util.register_pytree_node_class
class Node:
    def __init__(self, x: Float[Array, "n"], y: Float[Array, "n"]):
        self.x = x
        self.y = y
        self.t = total(x, y)

    def tree_flatten(self) -> tuple[tuple[Float[Array, "n"], Float[Array, "n"]], None]:
        return (self.x, self.y), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: Any) -> "Node":
        hit("Node")
        return cls(*children)
""",
    "with_keys": """
@jax.tree_util.register_pytree_with_keys_class
class Node:
    def __init__(self, x: Float[Array, "n"], y: Float[Array, "n"]):
        self.x = x
        self.y = y
        self.t = total(x, y)

    def tree_flatten_with_keys(self) -> tuple[Any, None]:
        return ((jax.tree_util.GetAttrKey("x"), self.x), (jax.tree_util.GetAttrKey("y"), self.y)), None

    def tree_flatten(self) -> tuple[tuple[Float[Array, "n"], Float[Array, "n"]], None]:
        return (self.x, self.y), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: Any) -> "Node":
        hit("Node")
        return cls(*children)
""",
    "functions": """
class Node:
    def __init__(self, x: Float[Array, "n"], y: Float[Array, "n"]):
        self.x = x
        self.y = y
        self.t = total(x, y)


def flatten_node(node: Node) -> tuple[tuple[Float[Array, "n"], Float[Array, "n"]], None]:
    return (node.x, node.y), None


def unflatten_node(aux: None, children: Any) -> Node:
    hit("Node")
    return Node(*children)


jax.tree_util.register_pytree_node(Node, flatten_node, unflatten_node)
""",
    # A dataclass registered as a custom node, whose `__post_init__` calls a helper
    # (a Gaussian-process library's dataset node).
    "dataclass": """
@dataclasses.dataclass
class Node:
    x: Float[Array, "n"]
    y: Float[Array, "n"]

    def __post_init__(self) -> None:
        self.t = total(self.x, self.y)


def flatten_node(node: Node) -> tuple[tuple[Float[Array, "n"], Float[Array, "n"]], None]:
    return (node.x, node.y), None


def unflatten_node(aux: None, children: Any) -> Node:
    hit("Node")
    return Node(*children)


jax.tree_util.register_pytree_node(Node, flatten_node, unflatten_node)
""",
    "struct": """
@struct.dataclass
class Node:
    x: Float[Array, "n"]
    y: Float[Array, "n"]

    def __post_init__(self) -> None:
        total(self.x, self.y)
""",
}

HOOK_OPS = {
    "jit_identity": "jit(lambda n: n)",
    "jit_map": "jit(lambda n: jax.tree.map(lambda v: v + 1, n))",
}

HOOK_MAIN = '''\
import importlib
import os
import tempfile

import jaxtyping

PKG = __name__ + "_hooked"


def load():
    """Import the hooked module (`SOURCE`) under jaxtyping's import hook."""
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, PKG + ".py"), "w") as f:
        f.write(SOURCE)
    sys.path.insert(0, folder)
    try:
        with jaxtyping.install_import_hook(PKG, CHECKER):
            module = importlib.import_module(PKG)
    finally:
        sys.path.remove(folder)
    track(module.Node)
    # The checks of the registered functions are the class's.
    for name in ("flatten_node", "unflatten_node"):
        if hasattr(module, name):
            attribute(getattr(module, name), "Node")
    return module


def main():
    m = load()
    Node = m.Node
    out = {}
    with phase("construct"):
        n = Node(X, Y)
        out["n"] = n
        out["bad"] = attempt(lambda: Node(X, BAD))
    step = STEP
    with phase("jit1"):
        out["step1"] = step(n)
    with phase("jitN"):
        out["step2"] = step(n)
        out["step3"] = step(out["step2"])
    with phase("tree"):
        out["map"] = jax.tree.map(lambda v: v * 2, n)
    with phase("construct"):
        out["again"] = Node(X, Y)
        out["again_bad"] = attempt(lambda: Node(X, BAD))
        out["helper_bad"] = attempt(lambda: m.total(X, BAD))
    return out
'''


def region_importhook() -> list[Program]:
    programs = []
    for route, checker, op in itertools.product(
        tuple(HOOKED_NODES),
        ("beartype.beartype", "typeguard.typechecked"),
        tuple(HOOK_OPS),
    ):
        module = HOOKED_COMMON + HOOKED_NODES[route]
        main = (
            HOOK_MAIN.replace("SOURCE", repr(module))
            .replace("CHECKER", repr(checker))
            .replace("STEP", HOOK_OPS[op])
        )
        short = checker.split(".")[0]
        core = (route, short, op) in {
            ("dataclass", "beartype", "jit_identity"),
            ("node_class", "typeguard", "jit_map"),
        }
        programs.append(
            program(
                _name("importhook", route, short, op),
                "importhook",
                [],
                main,
                (("Node", "all"),),
                core,
            )
        )
    return programs


GENERATORS["importhook"] = region_importhook
REGIONS = (*REGIONS, "importhook")
