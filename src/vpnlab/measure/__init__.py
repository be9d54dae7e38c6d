"""The measure stage: what is measured beside a workload: the CPU meter and the observers."""
