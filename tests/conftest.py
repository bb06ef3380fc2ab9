"""Suite-wide test setup: hypothesis profiles, and testing the installed `irtool`.

Profiles: "ci" (derandomized, fixed example counts, chosen when the CI variable is set) and
"dev" (more examples, random). `HYPOTHESIS_PROFILE=name` overrides the choice. A test that
needs more or fewer examples than the profile's default sets `max_examples` itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# `python -m pytest` puts the checkout root first on sys.path, where `irtool/` lacks the
# `irtool.passes` / `irtool.grammar` subpackages that installing maps in from `passes/` and
# `grammar/`. Import the installed package instead (an editable install points back here).
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT]

settings.register_profile(
    "ci", derandomize=True, max_examples=200, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.register_profile(
    "dev", max_examples=1000, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


@pytest.fixture
def default_recursion_limit() -> Iterator[None]:
    """Run the test at CPython's default recursion limit (1000), whatever raised it before.

    Deep-program tests use it to show that nothing recurses with the program's size; hypothesis
    raises the limit while its tests run and may leave it raised for later tests.
    """
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)
