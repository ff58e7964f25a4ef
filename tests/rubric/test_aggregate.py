"""The documented reward formula, computed by amaris from verdicts."""

import pytest

from amaris.rubric.aggregate import aggregate, normalise


def test_normalise_maps_the_scale_to_unit_interval() -> None:
    assert [normalise(v) for v in range(5)] == [0.0, 0.25, 0.5, 0.75, 1.0]
    with pytest.raises(ValueError):
        normalise(5)
    with pytest.raises(ValueError):
        normalise(-1)


@pytest.mark.parametrize(
    ("weights", "verdicts", "expected"),
    [
        ([1.0], [4], 1.0),
        ([1.0], [0], 0.0),
        ([1.0], [3], 0.75),
        ([1.0, 0.5], [4, 2], (1.0 * 1.0 + 0.5 * 0.5) / 1.5),
        ([2.0, 1.0, 1.0], [4, 0, 2], (2.0 + 0.0 + 0.5) / 4.0),
        # a pitfall clearly present takes away its weight relative to the positive total
        ([1.0, -0.5], [4, 4], (1.0 - 0.5) / 1.0),
        ([1.0, -0.5], [4, 0], 1.0),
        ([1.0, -0.5], [4, 2], (1.0 - 0.25) / 1.0),
        # clamped at 0 when pitfalls outweigh what was earned
        ([1.0, -2.0], [2, 4], 0.0),
        # pitfalls only: 1 - share of pitfall weight present
        ([-1.0, -3.0], [4, 0], 0.75),
    ],
)
def test_weighted_formula(weights: list[float], verdicts: list[int], expected: float) -> None:
    assert aggregate(weights, verdicts) == pytest.approx(expected)


def test_rejects_misaligned_or_empty_input() -> None:
    for weights, verdicts in (([1.0, 1.0], [4]), ([1.0], [4, 4])):
        with pytest.raises(ValueError, match="weights and verdicts differ in length"):
            aggregate(weights, verdicts)
    with pytest.raises(ValueError, match="no criteria to aggregate"):
        aggregate([], [])
