# verl (main_ppo) overrides: amaris as the custom reward function.
# Dataset preprocessing: put the prompt text in extra_info["prompt"] (or "question");
# extra_info["index"] (or "uid") groups the n responses to one prompt.
python3 -m verl.trainer.main_ppo \
    custom_reward_function.path="$(python -c 'import amaris.integrations.verl as m; print(m.__file__)')" \
    custom_reward_function.name=compute_score \
    +custom_reward_function.reward_kwargs.url=http://127.0.0.1:8002 \
    +custom_reward_function.reward_kwargs.high_level_goal="math assistant" \
    "$@"
# verl's reward loop (async): custom_reward_function.name=compute_score_async
# amaris: pipeline.rollouts_per_step = data.train_batch_size * actor_rollout_ref.rollout.n
