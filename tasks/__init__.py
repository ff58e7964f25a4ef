"""Prefect tasks, one per file, named for the verb."""
