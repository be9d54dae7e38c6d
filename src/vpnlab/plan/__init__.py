"""The plan stage: the study file and the plan: what a user asks for, validated, and the scenarios it makes."""
