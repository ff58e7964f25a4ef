"""Judge trust: the mechanisms by which amaris checks its own judge (docs/judge-trust.md).

* the pre-check (:mod:`~amaris.trust.precheck`) and its learned rules
  (:mod:`~amaris.trust.learned_rules`, stored by :mod:`~amaris.trust.rule_store`):
  degenerate replies get the floor on ``/score``, unjudged;
* the rubric canary (:mod:`amaris.trust.rubric_canary`): a candidate rubric re-scores
  probes before it is published;
* the judge canaries (:mod:`~amaris.trust.judge_canaries`, their probes mined from the
  step's replies by :mod:`~amaris.trust.mining`): the training judge scores probes whose
  right reward is known, and an alarm teaches the pre-check a rule;
* the audit judge (:mod:`amaris.trust.audit`): a second judge re-grades a sample of each
  step, and the Goodhart alarm reads the two judges' disagreement; it shares one call
  budget with the judge canaries (:mod:`~amaris.trust.budget`).

They reach the judge through :mod:`~amaris.trust.judging`. Their Prefect tasks are
``tasks/canary.py``, ``tasks/judge_canaries.py`` and ``tasks/audit.py``.
"""
