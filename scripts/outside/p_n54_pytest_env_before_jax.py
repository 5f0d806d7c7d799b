# New (eager-import family): with --typecheck-guard-install / --typecheck-guard=warn, JAX is
# imported before conftest.py runs, so a conftest that configures JAX through the environment
# (JAX_ENABLE_X64 here) no longer takes effect.
# MODES: install guard
import os, re, sys, subprocess

mode = os.environ.get("TG_MODE", "plain")
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytest_env")
cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-W", "ignore"]
cmd += {"plain": [], "install": ["--typecheck-guard-install"], "guard": ["--typecheck-guard=warn"]}[mode]
env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
p = subprocess.run(cmd, cwd=here, capture_output=True, text=True, env=env)
for line in p.stdout.splitlines():
    if line.startswith(("PASSED", "FAILED", "ERROR")):
        print(re.sub(r" - .*", "", line))
print("rc", p.returncode)
