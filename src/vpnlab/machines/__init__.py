"""The machines stage: where a run measures: this machine's capabilities, the VM backend, unpacked packages, provenance."""
