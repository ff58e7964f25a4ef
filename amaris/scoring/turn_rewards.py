"""A trajectory's reward spread over its assistant turns (``include_turns``).

The reward (:func:`amaris.rubric.aggregate.aggregate`) is a sum of per-criterion shares:
with ``P`` the sum of the positive weights and ``s_i`` criterion ``i``'s normalised verdict,
a positive criterion's share is ``w_i s_i / P`` and a pitfall's ``-|w_i| s_i / P``. Each
share is split evenly over the turns the criterion is attributed to:

* a judged criterion: the assistant messages the judge named in its verdict's ``turns``
  (indexes that are not an assistant message of the rollout are dropped);
* a rule criterion: the final answer's turn (the last assistant message), which is what
  the rule checks (:meth:`amaris.models.Rollout.answer`);
* a criterion with no attribution: every assistant turn alike.

When the pitfalls take more than the positive criteria give (the reward is clamped at 0),
their shares are scaled down so that together they take exactly what was given. Without a
positive criterion (a reward of ``1 - sum |w_i| s_i / N``) the 1 is spread over every turn.
So the turns' rewards sum to the rollout's reward. A turn lists under ``met`` the positive
criteria attributed to it whose verdict is above the scale's minimum, and under ``broke``
the pitfalls attributed to it that hold (their behaviour is present). A reward that no
criterion made (a degenerate reply's floor) is spread over every turn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from amaris.models import CriterionResult
from amaris.rubric.aggregate import normalise
from amaris.trajectory import Message, TurnReward


def _shares(verdicts: Sequence[CriterionResult]) -> tuple[list[float], float]:
    """Each criterion's share of the reward, and the share no criterion holds (the base
    of a rubric without a positive criterion)."""
    positive = sum(c.weight for c in verdicts if c.weight > 0)
    negative = sum(-c.weight for c in verdicts if c.weight < 0)
    signed = [c.weight * normalise(c.verdict) for c in verdicts]
    if positive <= 0:
        return [w / negative if negative > 0 else 0.0 for w in signed], 1.0
    gained = sum(w for w in signed if w > 0)
    lost = -sum(w for w in signed if w < 0)
    scale = gained / lost if lost > gained else 1.0
    return [(w if w > 0 else w * scale) / positive for w in signed], 0.0


def turn_rewards(
    messages: Sequence[Message],
    reward: float,
    verdicts: Sequence[CriterionResult] = (),
    attributed: Mapping[str, Sequence[int]] | None = None,
) -> list[TurnReward]:
    """One entry per assistant message of ``messages``, in order, whose rewards sum to
    ``reward``: the ``verdicts``' shares split over the turns they are ``attributed`` to
    (per criterion id, the judge's message indexes; see the module docstring), or, with no
    verdicts, ``reward`` spread evenly."""
    turns = [i for i, message in enumerate(messages) if message.role == "assistant"]
    assistant = frozenset(turns)
    rewards = dict.fromkeys(turns, 0.0)
    met: dict[int, list[str]] = {i: [] for i in turns}
    broke: dict[int, list[str]] = {i: [] for i in turns}
    everywhere = reward
    if verdicts:
        shares, everywhere = _shares(verdicts)
        for criterion, share in zip(verdicts, shares, strict=True):
            if criterion.kind == "rule":
                named: Sequence[int] = (turns[-1],)
            else:
                given = (attributed or {}).get(criterion.id, ())
                named = [i for i in dict.fromkeys(given) if i in assistant]
            if not named:
                everywhere += share
                continue
            for index in named:
                rewards[index] += share / len(named)
            if normalise(criterion.verdict) > 0 and criterion.weight != 0:
                held = met if criterion.weight > 0 else broke
                for index in named:
                    held[index].append(criterion.id)
    spread = everywhere / len(turns)
    return [
        TurnReward(index=i, reward=rewards[i] + spread, met=met[i], broke=broke[i]) for i in turns
    ]
