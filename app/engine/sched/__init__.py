"""Scheduling: which sequences run in the next step and how many tokens each (policies, the adaptive batch)."""
