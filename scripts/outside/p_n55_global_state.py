# Region: process-wide state that install() / `typecheck-guard run` / runtime_checks might
# change besides the registry: import hooks, warning filters, logging, env vars, signal
# handlers, recursion limit, excepthooks, jax/jaxtyping config values, builtins.
# MODES: install run guard
import os
import sys

if os.environ.get("TG_MODE") == "install":
    import typecheck_guard
    typecheck_guard.install()
if os.environ.get("TG_MODE") == "guard":
    import typecheck_guard
    typecheck_guard.runtime_checks("log")

import builtins, logging, signal, threading, warnings
import jax, jaxtyping

print("meta_path", [type(f).__name__ if not isinstance(f, type) else f.__name__ for f in sys.meta_path])
print("path_hooks", len(sys.path_hooks))
print("warnings filters", [(a, str(m.pattern) if hasattr(m, "pattern") else m, c.__name__) for a, m, c, *_ in warnings.filters][:12])
root = logging.getLogger()
print("root logger", logging.getLevelName(root.level), [type(h).__name__ for h in root.handlers])
print("loggers configured", sorted(n for n, l in logging.root.manager.loggerDict.items()
                                    if isinstance(l, logging.Logger) and (l.handlers or l.level) and not n.startswith(("jax", "absl"))))
print("env keys", sorted(k for k in os.environ if k.startswith(("JAX", "XLA", "TYPECHECK", "JAXTYPING", "TG_")) and k != "TG_MODE"))
print("sigint", signal.getsignal(signal.SIGINT))
print("recursionlimit", sys.getrecursionlimit())
print("excepthooks", sys.excepthook is sys.__excepthook__, threading.excepthook is threading.__excepthook__)
print("displayhook", sys.displayhook is sys.__displayhook__)
print("profile/trace", sys.getprofile(), sys.gettrace(), threading.getprofile() if hasattr(threading, "getprofile") else None)
print("builtins extra", sorted(n for n in dir(builtins) if "guard" in n.lower() or "typecheck" in n.lower()))
cfg = {k: getattr(jax.config, k) for k in ["jax_enable_x64", "jax_disable_jit", "jax_traceback_filtering", "jax_debug_nans",
                                           "jax_enable_checks", "jax_numpy_rank_promotion", "jax_default_matmul_precision"]}
print("jax config", cfg)
print("jaxtyping config", {k: getattr(jaxtyping.config, k) for k in dir(jaxtyping.config) if k.startswith("jaxtyping")})
import gc
print("gc", gc.isenabled(), gc.get_threshold(), len(gc.callbacks))
print("threads", sorted(t.name for t in threading.enumerate()))
print("tree_util registry size delta", "n/a")
