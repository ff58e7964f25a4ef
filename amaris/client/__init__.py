"""The trainer side's client of amaris: :class:`RewardClient` scores rollouts from a training
loop and controls its steps; the trainer adapters (:mod:`amaris.integrations`) call amaris
through it too.

* :mod:`~amaris.client.reward_client`: the client, every HTTP call it makes;
* :mod:`~amaris.client.errors`: what it raises, and for which answer;
* :mod:`~amaris.client.rewards`: one ``/get_reward`` exchange and its retries;
* :mod:`~amaris.client.bodies`: what it sends (the request models of :mod:`amaris.models`
  as JSON, or the JSON a caller passes);
* :mod:`~amaris.client.answers`: what waiting for a step answers (the server's own models,
  :mod:`amaris.step_answer`).
"""

from amaris.client.answers import (
    CanaryAnswer,
    DroppedAnswer,
    HackingAnswer,
    ScopeAnswer,
    WaitAnswer,
)
from amaris.client.bodies import (
    STEP_HEADER,
    MessageBody,
    MetadataBody,
    RolloutBody,
    ScoreItem,
    TextPartBody,
    ToolCallBody,
    ToolFunctionBody,
)
from amaris.client.errors import (
    AmarisError,
    AuthenticationError,
    InvalidRequestError,
    RewardUnscoredError,
    ServerUnavailableError,
    ServerUnreachableError,
    StepFailedError,
    UnexpectedAnswerError,
    raise_for_answer,
)
from amaris.client.reward_client import RewardClient
from amaris.client.rewards import Rewards, RewardUnavailableError

__all__ = [
    "STEP_HEADER",
    "AmarisError",
    "AuthenticationError",
    "CanaryAnswer",
    "DroppedAnswer",
    "HackingAnswer",
    "InvalidRequestError",
    "MessageBody",
    "MetadataBody",
    "RewardClient",
    "RewardUnavailableError",
    "RewardUnscoredError",
    "Rewards",
    "RolloutBody",
    "ScopeAnswer",
    "ScoreItem",
    "ServerUnavailableError",
    "ServerUnreachableError",
    "StepFailedError",
    "TextPartBody",
    "ToolCallBody",
    "ToolFunctionBody",
    "UnexpectedAnswerError",
    "WaitAnswer",
    "raise_for_answer",
]
