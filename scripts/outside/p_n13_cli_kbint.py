# New region: `typecheck-guard run` and an uncaught KeyboardInterrupt (python dies by SIGINT).
# MODES: run
print("before", flush=True)
raise KeyboardInterrupt
