"""Suite-wide test settings.

Under CI (the ``CI`` environment variable set, as `.ci/run` runs), hypothesis draws its examples
from a fixed seed, so a run is reproducible; locally every run explores new examples.
"""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
