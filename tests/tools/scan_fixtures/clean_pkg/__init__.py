"""Typechecked classes that never re-run their check on unflatten."""

import typecheck_guard

typecheck_guard.install()  # before the classes below are defined

from . import models as models  # noqa: E402
