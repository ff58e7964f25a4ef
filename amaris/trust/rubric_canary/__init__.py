"""The rubric canary: a candidate rubric re-scores a probe set before it is published.

:mod:`~amaris.trust.rubric_canary.check` judges the probes,
:mod:`~amaris.trust.rubric_canary.plan` chooses them within the budget,
:mod:`~amaris.trust.rubric_canary.probes` writes the synthetic ones (master keys, claim and
phrase probes) and :mod:`~amaris.trust.rubric_canary.report` decides (docs/pipeline.md,
"Guardrails: meaning, and the rubric canary").
"""
