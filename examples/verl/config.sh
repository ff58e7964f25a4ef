# verl >= 0.9 (main_ppo) overrides: amaris as the custom reward function. verl reads it from
# reward.custom_reward_function; the top-level custom_reward_function of older verl
# versions is ignored there (verl then scores with its built-in rules, amaris unasked).
# Prompt: extra_info["prompt"] (or "question"), or AmarisRewardManager below takes verl's
# raw_prompt; extra_info["index"] (or "uid") groups the n responses to one prompt.
# Agent episodes: agent_loop.yaml (beside this file) makes verl's tool_agent loop record its
# chat and why it ended; amaris then scores each tool_agent sample as a trajectory. Give the
# loop its tools and parser as usual (actor_rollout_ref.rollout.multi_turn.format,
# .function_tool_path or .tool_config_path). anchor_ids: the anchors of amaris's config.yaml
# (A1, A2, ... in its order), answered as reward keys beside anchors and adaptive.
AMARIS=$(python -c 'import amaris.integrations.verl as m, os; print(os.path.dirname(m.__file__))')
HERE=$(cd "$(dirname "$0")" && pwd)
python3 -m verl.trainer.main_ppo \
    reward.custom_reward_function.path="$AMARIS/verl.py" \
    reward.custom_reward_function.name=compute_score_async \
    +reward.custom_reward_function.reward_kwargs.url=http://127.0.0.1:8002 \
    +reward.custom_reward_function.reward_kwargs.high_level_goal="math assistant" \
    "+reward.custom_reward_function.reward_kwargs.anchor_ids=[A1]" \
    reward.reward_manager.source=importlib \
    reward.reward_manager.name=AmarisRewardManager \
    reward.reward_manager.module.path="$AMARIS/verl_manager.py" \
    actor_rollout_ref.rollout.agent.agent_loop_config_path="$HERE/agent_loop.yaml" \
    "$@"
# GDPO (a reward per objective): algorithm.adv_estimator=gdpo
# "+algorithm.gdpo_reward_keys=[anchors,A1]" (not adaptive while it is null: GDPO reads null
# as NaN). Or keep verl's naive manager (reward.reward_manager.name=naive) when extra_info
# has the prompt; dapo and gdpo managers drop the agent loop's record (text path only).
# rate_limited turns a raised judge outage into reward 0.0: with it, set
# +reward.custom_reward_function.reward_kwargs.unscored_score=<value> (docs/integrations.md).
# amaris: pipeline.rollouts_per_step = data.train_batch_size * actor_rollout_ref.rollout.n
