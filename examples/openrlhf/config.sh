# OpenRLHF 0.11: amaris as the remote reward (either form), the reference answer as label.
# (OpenRLHF < 0.11 spells these --remote_rm_url and --label_key.)
python3 -m openrlhf.cli.train_ppo_ray \
    --reward.remote_url "$(dirname "$0")/reward_func.py" \
    --data.label_key answer \
    "$@"
#   or: --reward.remote_url "http://127.0.0.1:8002/get_reward?step=0"   (no step: the open step)
#   or, agent episodes (multi-turn; amaris scores each whole episode at its end), instead
#   of --reward.remote_url: --train.agent_func_path "$(dirname "$0")/agent_func.py"
# Judge outage: the step fails (amaris's reason in OpenRLHF's log with the file form),
# unless amaris runs with scoring.on_failure: neutral (then scoring.neutral_score, flagged).
# amaris: pipeline.rollouts_per_step = rollout.batch_size * rollout.n_samples_per_prompt
