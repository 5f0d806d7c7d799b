import sys, os
from . import helper
print("name", __name__)
print("spec", __spec__.name if __spec__ else None, __spec__.parent if __spec__ else None)
print("package", repr(__package__))
print("argv0", os.path.relpath(sys.argv[0]), sys.argv[1:])
print("path0", repr(os.path.relpath(sys.path[0]) if sys.path[0] else sys.path[0]))
print("relative import", helper.VALUE)
print("builtins", type(__builtins__).__name__)
print("loader", type(__loader__).__name__)
print("main is me", sys.modules["__main__"].__dict__ is globals())
print("clipkg.mod in modules", "clipkg.mod" in sys.modules)
