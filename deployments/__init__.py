"""Prefect deployments and schedules, as code."""
