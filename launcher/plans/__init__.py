"""Spec -> plan: what a job is, as immutable values (training, tuning, ...). Pure."""
