"""Redraw the documentation's overhead plot from the committed measurements.

    python scripts/plot_docs.py

reads `docs/images/bench-full.json` (written by `typecheck-guard bench --full --json
... --plot ...`) and writes `docs/images/overhead.png` and `overhead-dark.png`, the
images the Performance page shows in its light and dark palettes. No measuring:
the figures stay those of the JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

from typecheck_guard._tools._bench._report import plot
from typecheck_guard._tools._bench._run import SweepPoint

IMAGES = Path(__file__).parents[1] / "docs" / "images"

data = json.loads((IMAGES / "bench-full.json").read_text())
sweep = [SweepPoint(**p) for p in data["sweep"]]
plot(sweep, str(IMAGES / "overhead.png"), data["environment"], theme="light")
plot(sweep, str(IMAGES / "overhead-dark.png"), data["environment"], theme="dark")
