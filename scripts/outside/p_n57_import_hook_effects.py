# Region: the meta-path finder install() / runtime_checks() put first in sys.meta_path: modules
# imported afterwards (equinox, flax.nnx, optax, a user module) must look as they do plain.
# MODES: install guard
import os, sys

if os.environ.get("TG_MODE") == "install":
    import typecheck_guard
    typecheck_guard.install()
if os.environ.get("TG_MODE") == "guard":
    import typecheck_guard
    typecheck_guard.runtime_checks("log")

import importlib, importlib.util, inspect, pkgutil
import equinox as eqx
from flax import nnx
import optax

for name, mod in [("equinox", eqx), ("flax.nnx", nnx), ("optax", optax)]:
    print(name, "loader", type(mod.__loader__).__name__, type(mod.__spec__.loader).__name__)
    print(name, "origin", os.path.basename(mod.__spec__.origin or ""), mod.__spec__.name)
    print(name, "find_spec loader", type(importlib.util.find_spec(name).loader).__name__)
print("filter_jit module", eqx.filter_jit.__module__, type(eqx.filter_jit).__name__)
print("filter_jit is _jit.filter_jit", eqx.filter_jit is importlib.import_module("equinox._jit").filter_jit)
print("nnx.jit module", nnx.jit.__module__, type(nnx.jit).__name__)
print("getsourcefile filter_jit", os.path.basename(inspect.getsourcefile(eqx.filter_jit) or ""))
print("reload optax", importlib.reload(optax).__name__)
print("pkgutil get_data", len(pkgutil.get_data("optax", "__init__.py") or b"") > 0)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hookpkg.mod as m
print("user module loader", type(m.__loader__).__name__, m.__spec__.name)
