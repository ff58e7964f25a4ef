# OpenRLHF: amaris as the remote reward (either line), the reference answer as label.
python3 -m openrlhf.cli.train_ppo_ray \
    --remote_rm_url "$(dirname "$0")/reward_func.py" \
    --label_key answer \
    "$@"
#   or: --remote_rm_url "http://127.0.0.1:8002/get_reward?step=0"   (no step: the open step)
# amaris: pipeline.rollouts_per_step = rollout_batch_size * n_samples_per_prompt
