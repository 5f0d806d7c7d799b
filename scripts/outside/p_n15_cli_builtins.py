# New region: `typecheck-guard run`: __builtins__ in __main__ (a module under python).
# MODES: run
print(type(__builtins__).__name__)
print(__builtins__.len([1, 2]))
