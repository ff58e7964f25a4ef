"""amaris as a verifiers 0.4.0 judge plugin: ``[[env.taskset.task.judges]] id = "amaris_judge"``.

verifiers finds a judge by its id, a module exporting one ``Judge`` in ``__all__``; this one
re-exports amaris's (amaris/integrations/verifiers.py), whose own dotted name verifiers'
loader cannot resolve. Its options are ``AmarisJudgeConfig``'s (eval.toml).
"""

from amaris.integrations.verifiers import AmarisJudge

__all__ = ["AmarisJudge"]
