"""`python -m typecheck_guard`: the `typecheck-guard` command."""

from ._cli import main

raise SystemExit(main())
