# New region: `typecheck-guard run` exit paths: sys.exit from a thread, os._exit, SystemExit(None),
# an exception group, an exception raised in an atexit handler, and an exception's __notes__.
# MODES: run
# COMPARE: stderr
import sys, threading, atexit


def t():
    sys.exit(5)  # only ends the thread


th = threading.Thread(target=t)
th.start(); th.join()
print("after thread exit")
atexit.register(lambda: print("atexit", flush=True))
e = ValueError("v")
e.add_note("a note")
raise ExceptionGroup("grp", [e, KeyError("k")])
