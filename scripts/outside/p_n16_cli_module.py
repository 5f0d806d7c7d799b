# New region: `typecheck-guard run -m pkg.module` vs `python -m pkg.module` (this driver runs the
# child: plain -> python -m, install -> python -m typecheck_guard run -m).
# MODES: install
import os, sys, subprocess

mode = os.environ.get("TG_MODE", "plain")
for target in (["clipkg.mod", "a1"], ["clipkg", "b2"]):
    pre = [sys.executable, "-m"] if mode == "plain" else [sys.executable, "-m", "typecheck_guard", "run", "-m"]
    p = subprocess.run(pre + target, capture_output=True, text=True, cwd=os.path.dirname(os.path.abspath(__file__)))
    print("rc", p.returncode)
    print(p.stdout.strip())
    if p.returncode:
        print(p.stderr.strip().splitlines()[-1])
