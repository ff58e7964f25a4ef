"""Reward functions for RL trainers, each calling a running amaris over HTTP.

* :mod:`amaris.integrations.verl`: ``compute_score`` / ``compute_score_async``;
* :mod:`amaris.integrations.openrlhf`: ``reward_func`` for ``--remote_rm_url <file>.py``
  (or point ``--remote_rm_url`` at ``http://<amaris>/get_reward``);
* :mod:`amaris.integrations.trl`: ``amaris_reward_func(...)`` for ``GRPOTrainer``.

See ``docs/integrations.md``. The trainers themselves are not dependencies of amaris.
"""
