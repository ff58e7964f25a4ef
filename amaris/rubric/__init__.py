"""Rubrics: versions, their store, scopes, guardrails of updates, the verdict scale and the
reward formula."""
