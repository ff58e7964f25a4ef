"""Reward functions for RL trainers, each calling a running amaris over HTTP.

* :mod:`amaris.integrations.verl`: ``compute_score`` / ``compute_score_async``
  (``reward.custom_reward_function.*``), and :mod:`amaris.integrations.verl_manager`
  (imports verl) for the prompt from verl's ``raw_prompt``;
* :mod:`amaris.integrations.openrlhf`: ``reward_func`` for ``--reward.remote_url <file>.py``
  (or point ``--reward.remote_url`` at ``http://<amaris>/get_reward``), and
  :mod:`amaris.integrations.openrlhf_agent` (imports OpenRLHF) for
  ``--train.agent_func_path``;
* :mod:`amaris.integrations.trl`: ``amaris_reward_func(...)`` for ``GRPOTrainer``, and
  ``amaris_reward_funcs(...)``: one reward function per key of the reward vector;
* :mod:`amaris.integrations.verifiers` (imports verifiers): ``AmarisJudge``;
* :mod:`amaris.integrations.nemo_gym` (imports NeMo Gym): ``AmarisResourcesServer``;
* :mod:`amaris.integrations.episodes`: an agent's chat written as ``rollout.messages``.

See ``docs/integrations.md``. The trainers themselves are not dependencies of amaris.
"""
