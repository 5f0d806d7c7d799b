#!/usr/bin/env bash
# What a new user gets: build the sdist and the wheel, install the wheel in fresh
# virtual environments with the extras the README recommends (and with less), and
# run what the README runs. Not part of CI (each environment downloads jax and
# flax: a minute or two each); run it before a release.
#
#   bash scripts/check_install.sh [PYTHON_VERSION ...]     # default: 3.10 3.13
#
# Interpreters come from `pyenv prefix 3.X` where pyenv is installed, else
# `python3.X` on PATH. Checks, per Python:
#   [flax,beartype]  `--version`; README's Python blocks run; `bench --smoke` prints
#                    its table with the equinox cases skipped, and exits 0
#   [beartype]       `bench --smoke` skips the flax cases with what to install, exit 0
#   no extra         `bench` says which checker to install, exit 2
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
VERSIONS=("$@")
[ ${#VERSIONS[@]} -gt 0 ] || VERSIONS=(3.10 3.13)

interpreter() {
    if command -v pyenv >/dev/null && prefix=$(pyenv prefix "$1" 2>/dev/null); then
        echo "$prefix/bin/python"
    else
        echo "python$1"
    fi
}

BUILDER=$(interpreter "${VERSIONS[0]}")
"$BUILDER" -m venv "$WORK/build"
if ! { "$WORK/build/bin/pip" install -q build &&
    "$WORK/build/bin/python" -m build --outdir "$WORK/dist" "$ROOT"; } >"$WORK/build.log" 2>&1; then
    tail -20 "$WORK/build.log"
    exit 1
fi
WHEEL=$(ls "$WORK"/dist/*.whl)
echo "built $(basename "$WHEEL") and $(basename "$WORK"/dist/*.tar.gz)"

# The README's ```python blocks, as one script (tests/test_docs.py runs them too).
"$WORK/build/bin/python" - "$ROOT/README.md" "$WORK/readme.py" <<'EOF'
import re, sys
text = open(sys.argv[1]).read()
blocks = re.findall(r"^```python[^\n]*\n(.*?)^```[ \t]*$", text, re.M | re.S)
open(sys.argv[2], "w").write("\n\n".join(blocks))
EOF

fail=0
expect() {  # expect NAME WANTED_EXIT_CODE GREP_PATTERN -- command...
    local name=$1 want=$2 pattern=$3
    shift 4
    local out code=0
    out=$("$@" 2>&1) || code=$?
    if [ "$code" = "$want" ] && grep -q -- "$pattern" <<<"$out"; then
        echo "  ok: $name"
    else
        echo "  FAILED: $name (exit $code, wanted $want; looked for: $pattern)"
        tail -20 <<<"$out" | sed 's/^/    /'
        fail=1
    fi
}

for version in "${VERSIONS[@]}"; do
    python=$(interpreter "$version")
    echo "Python $version ($("$python" --version 2>&1))"
    for extras in "[flax,beartype]" "[beartype]" ""; do
        venv="$WORK/venv-$version-${extras//[^a-z]/_}"
        "$python" -m venv "$venv"
        "$venv/bin/pip" install -q "$WHEEL$extras" 2>&1 | grep -v '^WARNING: Location' || true
        tg="$venv/bin/typecheck-guard"
        case "$extras" in
        "[flax,beartype]")
            echo " with $extras: $("$venv/bin/pip" list 2>/dev/null | grep -iE '^(jax|flax|jaxtyping|beartype) ' | tr -s ' ' | tr '\n' ';')"
            expect "--version" 0 "typecheck-guard" -- "$tg" --version
            expect "README examples" 0 "" -- "$venv/bin/python" -W error::UserWarning "$WORK/readme.py"
            expect "bench --smoke" 0 "equinox is not installed" -- "$tg" bench --smoke
            ;;
        "[beartype]")
            echo " with $extras:"
            expect "bench --smoke without flax" 0 "pip install 'typecheck-guard\[flax\]'" -- "$tg" bench --smoke
            ;;
        "")
            echo " with no extra:"
            expect "bench without a checker" 2 "no typechecker to measure with" -- "$tg" bench --smoke
            ;;
        esac
    done
done
exit $fail
