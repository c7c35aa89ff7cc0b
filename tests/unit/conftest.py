"""Hypothesis profiles for the unit tier.

Locally every run draws new examples, which is how the property tests find bugs (and they have:
see the regression tests beside each fix).  CI sets ``HYPOTHESIS_PROFILE=ci``: the same examples
on every run, so a red build always means the change broke something, not that today's draw was
unlucky.  Explore the decision core harder with ``PROPERTY_EXAMPLES=1000`` (default 100).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
