"""The file to give OpenRLHF: ``--remote_rm_url examples/openrlhf/reward_func.py``.

Configuration from the environment: AMARIS_URL, AMARIS_API_KEY, AMARIS_STEP,
AMARIS_RETRY_SECONDS, AMARIS_UNSCORED_SCORE (see amaris/integrations/openrlhf.py).
"""

from amaris.integrations.openrlhf import reward_func

__all__ = ["reward_func"]
