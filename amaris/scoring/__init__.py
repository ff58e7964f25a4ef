"""Scoring: the hot path from a rollout to a reward (judge, reward path). The reward formula
is :mod:`amaris.rubric.aggregate`, the pre-check before the judge :mod:`amaris.trust.precheck`."""
