"""Moved to :mod:`amaris.trust.audit`; :mod:`amaris.audit.models` is kept for the task
results Prefect pickled under its name."""
