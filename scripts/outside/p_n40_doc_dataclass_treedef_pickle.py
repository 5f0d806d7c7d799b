# DOCUMENTED difference (how-it-works: What changes in a treedef): a flax.struct treedef pickled
# in a process that disagrees on install() -- wrong object / segfault.
# plain: dump plain -> load plain.  install: dump plain -> load install, and dump install -> load plain.
# MODES: install
import os, sys, subprocess

mode = os.environ.get("TG_MODE", "plain")
here = os.path.dirname(os.path.abspath(__file__))


NAMES = "St"


def run(m, action, stdin=None):
    p = subprocess.run([sys.executable, "-m", "tdpkg.worker", m, action, NAMES], input=stdin, capture_output=True, text=True, cwd=here)
    if p.returncode:
        return "CRASH rc=%s %s" % (p.returncode, (p.stderr.strip().splitlines() or [""])[-1][:120])
    return p.stdout.strip()


a, b = ("plain", "plain") if mode == "plain" else ("plain", "install")
print("A->B:", run(b, "load", run(a, "dump")).replace("\n", " | "))
print("B->A:", run(a, "load", run(b, "dump")).replace("\n", " | "))
