# New region: `typecheck-guard run prog.py` must run the program exactly as `python prog.py`.
# MODES: run
import sys, os, pickle, inspect, traceback, types

print("argv", sys.argv[1:], os.path.basename(sys.argv[0]))
print("argv0 abs", os.path.isabs(sys.argv[0]))
print("name", __name__)
print("file", os.path.basename(__file__), os.path.isabs(__file__))
print("spec", __spec__)
print("package", repr(__package__))
print("loader", type(__loader__).__name__)
print("cached", repr(globals().get("__cached__", "<absent>")))
print("builtins type", type(__builtins__).__name__)
print("globals keys", sorted(k for k in globals() if k.startswith("__")))
print("main module is me", sys.modules["__main__"].__dict__ is globals())
print("sys.path[0]", sys.path[0] == os.path.dirname(os.path.abspath(__file__)), repr(sys.path[0])[:1])
print("path has extra", [p for p in sys.path if "typecheck" in p.lower()])
print("jax imported", "jax" in sys.modules)
print("modules not in plain", sorted(m for m in sys.modules if m.startswith(("typecheck_guard",)))[:0])
print("stack depth", len(traceback.extract_stack()))
print("bottom frame", os.path.basename(traceback.extract_stack()[0].filename))
print("__doc__", repr(__doc__))
x: int = 3
print("module annotations", globals().get("__annotations__"))


class Local:
    def __init__(self, v):
        self.v = v


def fn():
    return 1


print("pickle main class", pickle.loads(pickle.dumps(Local(5))).v)
print("pickle fn", pickle.loads(pickle.dumps(fn))())
print("getsource", inspect.getsource(fn).splitlines()[0])
print("getmodule", inspect.getmodule(fn).__name__)
print("warnings filters", len(__import__("warnings").filters))
print("stdin isatty same", sys.stdin.isatty() == sys.stdout.isatty() or "n/a")
print("flags", sys.flags.optimize, sys.flags.dont_write_bytecode, sys.flags.inspect)
print("excepthook default", sys.excepthook is sys.__excepthook__)
print("profile/trace", sys.getprofile(), sys.gettrace())
import multiprocessing as mp


def square(v):
    return v * v


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as p:
        print("spawn pool", p.map(square, [3]))
    import atexit
    atexit.register(lambda: print("atexit ran", flush=True))
