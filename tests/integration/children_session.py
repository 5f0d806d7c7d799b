"""The test that `test_children.py` runs in a pytest-xdist worker:

    pytest -n 1 --typecheck-guard-install children_session.py

The worker is the parent of `children_program.py`'s children, and reports itself
(`self`): a worker that pytest-xdist started, with TYPECHECK_GUARD=install from
the session's option.
"""

import os

import children_program


def test_children():
    plan = children_program.parse(os.environ["CHILDREN_PLAN"])
    children_program.run(os.environ["CHILDREN_OUT"], plan)
