# New: `typecheck-guard run` drops the warning filters numpy installs at import (it imports
# numpy via jax before the program, then puts the filters back as they were): numpy's
# RankWarning ('always' under python) is shown once instead of every time.
# MODES: run
import warnings
import numpy as np

shown = []
warnings.showwarning = lambda msg, cat, *a, **k: shown.append(cat.__name__)
for _ in range(3):
    np.polyfit([0.0, 1.0, 2.0], [0.0, 1.0, 2.0], 5)  # rank-deficient fit
print("warnings shown", shown)
