# Region: `pytest --typecheck-guard-install` (zero-edit) vs plain pytest on a small suite.
# plain: pytest -p no:cacheprovider; install: the same plus --typecheck-guard-install.
# MODES: install
import os, re, sys, subprocess

mode = os.environ.get("TG_MODE", "plain")
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytest_proj")
cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-W", "ignore"]
if mode == "install":
    cmd.append("--typecheck-guard-install")
p = subprocess.run(cmd, cwd=here, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=here))
for line in p.stdout.splitlines():
    if line.startswith(("PASSED", "FAILED", "ERROR")):
        print(re.sub(r" - .*", "", line))
print("rc", p.returncode)
