"""The audit judge, reward fidelity and the Goodhart alarm (docs/fidelity.md).

:mod:`~amaris.trust.audit.sampling` draws a step's sample,
:mod:`~amaris.trust.audit.regrade` has the auditor grade it,
:mod:`~amaris.trust.audit.fidelity` compares the two judges, :mod:`~amaris.trust.audit.alarm`
decides whether they diverge, :mod:`~amaris.trust.audit.pause` stops scoring on an alarm
when asked to, :mod:`~amaris.trust.audit.monitor` feeds ``/metrics``.
"""
