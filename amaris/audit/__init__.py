"""The audit judge, reward fidelity and the Goodhart alarm (docs/fidelity.md).

:mod:`~amaris.audit.sampling` draws a step's sample, :mod:`amaris.scoring.regrade` has the
auditor grade it, :mod:`~amaris.audit.fidelity` compares the two judges,
:mod:`~amaris.audit.alarm` decides whether they diverge, :mod:`~amaris.audit.pause` stops
scoring on an alarm when asked to, :mod:`~amaris.audit.monitor` feeds ``/metrics``.
"""
