#!/usr/bin/env python3
"""Outside programs (three review rounds; lines starting INFO are not compared): run every
p_*.py program of this folder plain and with the plugin, in separate
processes, and print a table of differences.

usage: run_all.py [--only SUBSTR] [--jobs N] [PYTHON ...]

PYTHON defaults to the project's .venv (Python 3.11, jax 0.10) and .venv312
(Python 3.12, jax 0.12) when they exist.  Exit status 1 on any difference.

Each program's header may say
  # MODES: install block wrap run     (modes compared against plain; default: install)
  # COMPARE: stderr                   (also compare normalised stderr)
Mode `run` runs the program as `python -m typecheck_guard run PROG` (TG_MODE=plain);
mode `env` runs `python PROG` with TYPECHECK_GUARD=install (TG_MODE=plain).
"""
import os
import re
import subprocess
import sys
import concurrent.futures as cf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # the repository
DEFAULT_PYS = [p for p in (f"{ROOT}/.venv/bin/python", f"{ROOT}/.venv312/bin/python") if os.path.exists(p)]
ADDR = re.compile(r"0x(?!ADDR)[0-9a-fA-F]+")


def header(path):
    modes, compare = ["install"], []
    with open(path) as f:
        for line in f:
            if line.startswith("# MODES:"):
                modes = line.split(":", 1)[1].split()
            if line.startswith("# COMPARE:"):
                compare = line.split(":", 1)[1].split()
    return modes, compare


def run(py, prog, mode, timeout=400):
    env = dict(os.environ, TG_MODE="plain" if mode in ("run", "env") else mode, PYTHONHASHSEED="0",
               JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=1",
               PYTHONPATH=HERE, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TYPECHECK_GUARD", None)
    if mode == "env":
        env["TYPECHECK_GUARD"] = "install"
    cmd = [py, "-m", "typecheck_guard", "run", prog] if mode == "run" else [py, prog]
    try:
        p = subprocess.run(cmd, cwd=HERE, env=env, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return "timeout", (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), ""


def norm(text, drop_counts):
    lines = []
    for l in text.splitlines():
        if drop_counts and l.startswith("COUNT"):
            continue
        if l.startswith("INFO"):  # round 3: informational (expected-skip counts), not compared
            continue
        lines.append(ADDR.sub("0xADDR", l))
    return lines


def norm_err(text):
    out = []
    for l in text.splitlines():
        l = ADDR.sub("0xADDR", l)
        if "typecheck_guard" in l and l.strip().startswith("File"):
            continue
        out.append(l)
    return out


def key(l):
    for sep in (": OK", ": EXC"):
        if sep in l:
            return l.split(sep, 1)[0]
    return l.rsplit(":", 1)[0] if l.startswith("COUNT") else l.split(":", 1)[0]


def classify(plain, other, rc0, rc1):
    if rc0 != rc1:
        return "crash"
    if plain == other:
        return ""
    kinds = set()
    pm = {key(l): l for l in plain}
    for l in other:
        k = key(l)
        if k in pm and pm[k] != l:
            a, b = pm[k], l
            if k.startswith("COUNT"):
                try:
                    if int(b.rsplit(":", 1)[1]) < int(a.rsplit(":", 1)[1]):
                        kinds.add("lost check")
                        continue
                except ValueError:
                    pass
            if "EXC" in a and "EXC" not in b and ("TypeCheckError" in a or "Violation" in a or "TypeError" in a):
                kinds.add("lost check")
            elif ("EXC" in a) != ("EXC" in b):
                kinds.add("crash")
            else:
                kinds.add("changed value")
    if not kinds and plain != other:
        kinds.add("changed value")
    return "/".join(sorted(kinds))


def first_diff(a, b):
    import difflib

    d = [l for l in difflib.unified_diff(a, b, "plain", "plugin", n=0, lineterm="") if not l.startswith(("---", "+++", "@@"))]
    return d[:8]


def main(argv):
    only, jobs, pys = None, 2, []
    it = iter(argv)
    for a in it:
        if a == "--only":
            only = next(it)
        elif a == "--jobs":
            jobs = int(next(it))
        else:
            pys.append(a)
    pys = pys or DEFAULT_PYS
    progs = sorted(f for f in os.listdir(HERE) if f.startswith("p_") and f.endswith(".py"))
    if only:
        progs = [p for p in progs if only in p]
    results = {}

    def run_prog(py, prog):  # the modes of one program run one after another (shared files)
        modes, _ = header(os.path.join(HERE, prog))
        for m in ["plain"] + modes:
            results[(py, prog, m)] = run(py, prog, m)

    with cf.ThreadPoolExecutor(jobs) as ex:
        list(ex.map(lambda t: run_prog(*t), [(py, prog) for py in pys for prog in progs]))
    rows, ndiff = [], 0
    for py in pys:
        ver = subprocess.run([py, "-c", "import sys,jax;print(f'py{sys.version_info[0]}.{sys.version_info[1]}/jax{jax.__version__}')"],
                             capture_output=True, text=True).stdout.strip()
        for prog in progs:
            modes, compare = header(os.path.join(HERE, prog))
            rc0, o0, e0 = results[(py, prog, "plain")]
            for m in modes:
                rc1, o1, e1 = results[(py, prog, m)]
                drop = m == "block"
                a, b = norm(o0, drop), norm(o1, drop)
                kind = classify(a, b, rc0, rc1)
                if "stderr" in compare and not kind and norm_err(e0) != norm_err(e1):
                    kind = "changed stderr"
                    a, b = norm_err(e0), norm_err(e1)
                note = ""
                if drop and not kind and norm(o0, False) != norm(o1, False):
                    note = "(count-only diff: documented cache)"
                rows.append((prog, ver, m, f"rc={rc0}", f"rc={rc1}", kind or "none", note))
                if kind:
                    ndiff += 1
                    print(f"### {prog} [{ver}] mode={m}: {kind}")
                    for l in first_diff(a, b):
                        print("    " + l[:220])
                    if rc1 != rc0:
                        tail = (e1 if rc1 else e0).strip().splitlines()[-3:]
                        for l in tail:
                            print("    stderr| " + l[:220])
    print()
    w = max(len(r[0]) for r in rows) if rows else 10
    print(f"{'program':<{w}}  {'python/jax':<18} {'mode':<8} {'plain':<7} {'plugin':<7} difference")
    for r in rows:
        print(f"{r[0]:<{w}}  {r[1]:<18} {r[2]:<8} {r[3]:<7} {r[4]:<7} {r[5]} {r[6]}")
    print(f"\n{ndiff} difference(s)")
    return 1 if ndiff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
