"""Small helpers for tests: steps that exercise the seed scenarios."""

from __future__ import annotations

from typing import Any

import jax


def run_cached(step: Any, state: Any, n: int = 20) -> Any:
    """Call `step` once (trace and compile), then `n` more times (cache hits)."""
    state = step(state)
    for _ in range(n):
        state = step(state)
    return jax.block_until_ready(state)
