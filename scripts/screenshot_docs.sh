#!/usr/bin/env bash
# Build the documentation site and look at every page the way a reader does: in a
# real browser (Chromium, headless), at desktop (1280px) and phone (390px) widths,
# in the light and the dark palette. Not run in CI; run it after changing a page and
# look at the screenshots.
#
#   apt-get install -y chromium        # Debian's package
#   bash scripts/screenshot_docs.sh [OUTDIR]
#
# Writes OUTDIR/<page>-<width>-<light|dark>.png (default OUTDIR: a new temporary
# folder) and prints, per page and width, every code block and table that is wider
# than the space it has (what a reader would have to scroll sideways to read). At
# 1280px everything should fit (samples are at most 88 columns). At 390px code
# blocks and program output scroll sideways, as on every documentation site, and
# tables and images should fit.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
PY=${PYTHON:-python}
MKDOCS=${MKDOCS:-mkdocs}
CHROMIUM=${CHROMIUM:-chromium}
HEIGHT=${HEIGHT:-2400}

SITE=$(mktemp -d)
NO_MKDOCS_2_WARNING=1 "$MKDOCS" build --strict --site-dir "$SITE" >/dev/null

# A probe, added to the served copy only: after layout it lists the code blocks and
# tables whose content is wider than their box, in <body data-overflow="...">, which
# `--dump-dom` prints.
PROBE='<script>
addEventListener("load", () => {
  const wide = [];
  for (const el of document.querySelectorAll(".md-content pre > code, .md-content .md-typeset__scrollwrap, .md-content img")) {
    if (el.scrollWidth > el.clientWidth + 1) {
      const block = el.closest("[class*=language-]");
      const kind = block ? block.className.match(/language-\w+/)[0] : el.tagName.toLowerCase();
      wide.push(kind + ": " + (el.textContent || el.getAttribute("src") || "").trim().slice(0, 40).replace(/\s+/g, " "));
    }
  }
  document.body.dataset.overflow = wide.join(" | ") || "none";
});
</script>'
find "$SITE" -name '*.html' -print0 | while IFS= read -r -d '' page; do
    "$PY" - "$page" "$PROBE" <<'EOF'
import sys
path, probe = sys.argv[1], sys.argv[2]
text = open(path, encoding="utf-8").read()
open(path, "w", encoding="utf-8").write(text.replace("</body>", probe + "</body>", 1))
EOF
done

PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$PY" -m http.server "$PORT" --bind 127.0.0.1 --directory "$SITE" >/dev/null 2>&1 &
SERVER=$!
trap 'kill "$SERVER"; rm -rf "$SITE"' EXIT
sleep 1

chromium() {
    # A fresh profile per shot: the palette toggle stores the reader's choice in
    # localStorage, and the dark shots must come from prefers-color-scheme alone.
    local profile
    profile=$(mktemp -d)
    timeout 60 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic \
        --no-first-run --disable-background-networking --disable-component-update \
        --disable-sync --hide-scrollbars --user-data-dir="$profile" "$@" 2>/dev/null || true
    rm -rf "$profile"
}

cd "$SITE"
find . -name index.html | sed 's|^\./||; s|index.html$||' | sort | while read -r page; do
    name=${page%/}
    name=${name//\//_}
    name=${name:-home}
    [ "$name" = 404.html ] && continue
    for width in 1280 390; do
        for scheme in light dark; do
            flags=()
            if [ "$scheme" = dark ]; then
                flags=(--force-dark-mode --blink-settings=preferredColorScheme=0)
            else
                flags=(--blink-settings=preferredColorScheme=1)
            fi
            chromium "${flags[@]}" --window-size="$width,$HEIGHT" \
                --screenshot="$OUT/$name-$width-$scheme.png" "http://127.0.0.1:$PORT/$page"
        done
        wide=$(chromium --window-size="$width,$HEIGHT" --dump-dom \
            "http://127.0.0.1:$PORT/$page" | grep -o 'data-overflow="[^"]*"' || true)
        echo "$name @ ${width}px: ${wide:-no probe result}"
    done
done
echo "screenshots in $OUT"
