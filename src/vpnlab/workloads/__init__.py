"""Workload kinds: one module each, all keeping the contract in base.py (catalog.py lists them)."""
