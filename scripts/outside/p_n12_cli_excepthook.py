# New region: `typecheck-guard run` and a program's own sys.excepthook.
# MODES: run
# COMPARE: stderr
import sys


def hook(t, v, tb):
    sys.stderr.write(f"custom hook: {t.__name__}: {v}\n")


sys.excepthook = hook
print("before")
raise RuntimeError("boom")
