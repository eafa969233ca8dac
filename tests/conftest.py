"""Suite-wide settings.

Under CI (the CI environment variable is set) hypothesis runs derandomized, so a given
commit always explores the same examples and a red CI run is reproducible locally with
``CI=1 python -m pytest``; developers' runs keep exploring new examples.
"""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")
