"""The run stage: running a plan: rounds of repetitions, each testbed -> tunnel -> proof -> workload, and stopping rules."""
