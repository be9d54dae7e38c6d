"""Loaded by every Python process the test suite starts (its folder is on PYTHONPATH)."""

import execlog

execlog.install()
