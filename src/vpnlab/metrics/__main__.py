"""`python -m vpnlab.metrics`: the README's metric table, from the catalog's complete registry."""

from ..catalog import markdown_table

print(markdown_table())
