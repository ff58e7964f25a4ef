"""The file to give OpenRLHF 0.11: ``--reward.remote_url examples/openrlhf/reward_func.py``.

Configuration from the environment: AMARIS_URL, AMARIS_API_KEY, AMARIS_STEP,
AMARIS_RETRY_SECONDS (see amaris/integrations/openrlhf.py). A judge outage fails the step
unless the amaris server runs with ``scoring.on_failure: neutral``.
"""

from amaris.integrations.openrlhf import reward_func

__all__ = ["reward_func"]
