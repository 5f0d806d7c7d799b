"""Which Python frames are JAX rebuilding a tree: the one fact `unflatten_safe` needs
to call a construction an unflatten.

JAX's C++ unflatten leaves no Python frame of its own: a constructor it calls sees,
as its caller, the last Python frame before C++. We found (and test) that JAX's own
Python code reaches that C++ unflatten almost only through the functions of
`jax._src.tree_util` (`tree_unflatten`, `tree_map`, `tree_map_with_path`, the Python
mirror of a dataclass node's unflatten, ...) and, from jax 0.11 on,
`jax._src.flattree` (`FlatTree.unflatten`): `jax.eval_shape`, `jit`'s first call,
`grad`, `vmap`, `scan`, `device_put`, Flax NNX's and Equinox's partitioning all go
through them; the AOT objects of `jax._src.stages` (`Lowered.in_avals`, `out_info`,
...) call `treedef.unflatten` from a few functions of their own, which we name.

Two kinds of frame count:

- `TREE`: a named function of those two modules. Their generator expressions and
  lambdas are left out (`tree_map` calls the function you pass from its generator
  expression: `jax.tree.map(MyClass, xs)` is a construction), and so are the
  functions that call a function you pass from their own frame: `tree_reduce`, the
  `__call__` of the hashable-callable shim, `FlatTree.map`/`map2`/`map3`/`filter`.
- `DISPATCH`: a frame that calls a jitted function's C++ dispatch and nothing else
  of the user's: our `unflatten_safe(jitted)` wrapper and the runtime guard's
  (registered with `register_dispatch`), Equinox's `filter_jit` call path
  (`equinox._jit._call`, in older releases `_JitWrapper._call`), Flax NNX's
  (`flax.nnx.transforms.compilation.JitWrapped.__call__`, in older releases the
  `jit_wrapper` closure of `jit`) and, from jax 0.9 on, `jax.pmap`'s Python
  wrapper (`jax._src.pmap`'s `wrapped`). None of them calls user code: they prepare arguments and call the
  jitted function, and the user's function runs deeper, while tracing.

We rejected reading the caller's bytecode to see which call it is making: it is
clever, version-specific and misses indirections. A frame is classified once per
code object and remembered.
"""

from __future__ import annotations

import os
import sys
from types import CodeType
from typing import Any, Final

__all__ = [
    "DISPATCH",
    "NONE",
    "TREE",
    "kind",
    "register_dispatch",
    "register_through",
    "through",
]

NONE: Final = 0
TREE: Final = 1
DISPATCH: Final = 2

# Functions of those modules that call a function the user passed from their own
# frame (`FlatTree.map(f)` calls `f` directly).
_CALLS_USER_CODE: Final = frozenset(
    {"tree_reduce", "__call__", "map", "map2", "map3", "filter"}
)
# Library functions that only dispatch a jitted call, found by identity once their
# module is imported: (module, attribute path).
_LIBRARY_DISPATCH: Final = (
    ("equinox._jit", "_call"),
    ("equinox._jit", "_JitWrapper._call"),  # older releases (0.11.5)
    ("flax.nnx.transforms.compilation", "JitWrapped.__call__"),
)
# `jax._src.stages`: the AOT objects rebuild the arguments' and outputs' trees with
# placeholder leaves (`ArgInfo`, `ShapeDtypeStruct`, shardings) through the C++
# `treedef.unflatten`, from these functions, which call nothing of the user's. The
# module's other functions (`__call__`, `trace`, `lower`, ...) are not listed.
_STAGES_TREE_CODE: Final = frozenset(
    {
        "make_args_info",
        "_traced_args_info",
        "_traced_out_info",
        "in_avals",
        "out_info",
        "out_avals",
        "lojax_pytree",
        "input_shardings",
        "output_shardings",
        "input_formats",
        "output_formats",
        "input_layouts",
        "output_layouts",
    }
)
# A closure has no attribute path: by (file, function name), `jax.pmap`'s wrapper and
# Flax NNX's `jit` wrapper before `JitWrapped` (flax 0.10.0), which calls the
# jitted function between `extract.to_tree` and `extract.from_tree`.
_CLOSURE_DISPATCH: Final = (
    (os.path.join("jax", "_src", "pmap.py"), "wrapped"),
    (os.path.join("flax", "nnx", "transforms", "compilation.py"), "jit_wrapper"),
)

_dispatch_codes: set[CodeType] = set()
# id(code) -> (code, kind): by id, as a code object hashes its whole contents on
# every lookup (microseconds for a function with nested code); the entry holds the
# code, so that its id stays its own.
_kinds: dict[int, tuple[CodeType, int]] = {}
_tree_files: tuple[str, ...] | None = None


# The runtime guard's frames around a jitted call it watches (its wrapper's `__call__`
# and `_watch.watch`): they only watch, so for what a construction *is* they are
# transparent, and the frame that called the guard's wrapper is the one that
# counts. (Without it, a jitted call made in a `with unflatten_safe()` block while
# the guard watches would look like one made through `unflatten_safe(jitted)`, and
# watching would change which checks run.) By id, holding the codes.
_through: dict[int, CodeType] = {}


def register_through(fn: Any) -> Any:
    """Mark `fn`'s frame as one to look through (the runtime guard's)."""
    _through[id(fn.__code__)] = fn.__code__
    return fn


def through(code: CodeType) -> bool:
    """Whether a frame running `code` is one of the runtime guard's own."""
    return id(code) in _through


def register_dispatch(fn: Any) -> Any:
    """Mark `fn`'s frame as a dispatch frame (used as a decorator by our wrappers
    around jitted callables)."""
    _dispatch_codes.add(fn.__code__)
    _kinds.pop(id(fn.__code__), None)
    return fn


def _tree_code_files() -> tuple[str, ...]:
    global _tree_files
    if _tree_files is None:
        from jax._src import tree_util

        # From jax 0.11 on, `FlatTree` (what `grad`, `vjp` and `linearize` rebuild
        # their outputs with) lives in its own module next to `tree_util`.
        here = os.path.dirname(tree_util.__file__)
        _tree_files = (
            tree_util.__file__,
            os.path.join(here, "flattree.py"),
            os.path.join(here, "stages.py"),
        )
    return _tree_files


def _classify(code: CodeType) -> int:
    if code in _dispatch_codes:
        return DISPATCH
    filename = code.co_filename
    name = code.co_name
    files = _tree_code_files()
    if filename in files:
        if filename == files[2]:
            return TREE if name in _STAGES_TREE_CODE else NONE
        if name.startswith("<") or name in _CALLS_USER_CODE:
            return NONE
        return TREE
    for path, function in _CLOSURE_DISPATCH:
        if name == function and filename.endswith(path):
            return DISPATCH
    for module, path in _LIBRARY_DISPATCH:
        obj: Any = sys.modules.get(module)
        for attribute in path.split("."):
            obj = getattr(obj, attribute, None)
        if getattr(obj, "__code__", None) is code:
            return DISPATCH
    return NONE


def kind(code: CodeType) -> int:
    """`TREE`, `DISPATCH` or `NONE` for the code object of a caller frame."""
    entry = _kinds.get(id(code))
    if entry is not None:
        return entry[1]
    result = _classify(code)
    _kinds[id(code)] = (code, result)
    return result
