"""Expected scores from token logprobs, and k sampled verdicts combined.

Pure functions on real token streams (as ``parse_logprobs`` builds them from a completion):
no conftest fixture, so ``python -m bench.evaluations.mutation verdicts`` runs these with
``--noconftest``.
"""

from __future__ import annotations

import math

import pytest

from amaris.llm.providers import TokenLogprob
from amaris.scoring.verdicts import combine, expected_scores


def sure(text: str) -> TokenLogprob:
    """A token the model is sure of."""
    return TokenLogprob(text, 0.0, ((text, 0.0),))


def position(probabilities: dict[str, float]) -> TokenLogprob:
    """One token position: the most likely token chosen, every token its alternative."""
    ranked = sorted(probabilities.items(), key=lambda item: -item[1])
    top = tuple((t, math.log(p)) for t, p in ranked)
    return TokenLogprob(ranked[0][0], top[0][1], top)


def text_of(tokens: list[TokenLogprob]) -> str:
    return "".join(t.token for t in tokens)


def test_one_verdict_is_the_mean_over_the_score_tokens() -> None:
    tokens = [sure('{"id": "A1", "score": '), position({"3": 0.5, "4": 0.3, "1": 0.2}), sure("}")]
    assert expected_scores(tokens, text_of(tokens), [3]) == [pytest.approx(1.5 + 1.2 + 0.2)]
    # a verdict given as a float is the same verdict
    assert expected_scores(tokens, text_of(tokens), [3.0]) == [pytest.approx(2.9)]


def test_each_verdict_reads_its_own_position_whatever_the_field_order() -> None:
    tokens = [
        sure('{"verdicts": [{"id": "A1", "score": '),
        position({"4": 0.75, "2": 0.25}),
        sure(', "reason": "ok"}, {"id": "R1", "reason": "fine", "score":'),
        position({" 1": 0.5, " 0": 0.5}),
        sure("}]}"),
    ]
    # ties: the first listed is chosen (" 1"), the verdict read from it is 1
    assert expected_scores(tokens, text_of(tokens), [4, 1]) == [
        pytest.approx(3.5),
        pytest.approx(0.5),
    ]


def test_a_score_quoted_inside_a_reason_is_not_a_verdict() -> None:
    reason = '"the reply says \\"score\\": 1, and \\\\ \\"score\\": 2", '
    tokens = [
        sure('{"id": "A1", "reason": ' + reason + '"score": '),
        position({"4": 0.5, "3": 0.5}),
        sure("}"),
    ]
    assert expected_scores(tokens, text_of(tokens), [4]) == [pytest.approx(3.5)]
    # "score" as a value, not a key, is not one either
    tokens = [sure('{"id": "score", "note": "score", "score" :\n  '), position({"2": 1.0})]
    assert expected_scores(tokens, text_of(tokens), [2]) == [pytest.approx(2.0)]
    tokens = [sure('{"a": {"b": "score"}, "c": ["score"], "score": '), position({"1": 1.0})]
    assert expected_scores(tokens, text_of(tokens), [1]) == [pytest.approx(1.0)]


def test_an_escaped_quote_does_not_end_a_string() -> None:
    tokens = [sure('{"reason": "it says \\"4 twice", "score": '), position({"3": 1.0})]
    assert expected_scores(tokens, text_of(tokens), [3]) == [pytest.approx(3.0)]


def test_compact_json_with_spaces_inside_strings_is_read() -> None:
    tokens = [sure('{"reason":"a b","score":'), position({"3": 0.5, "2": 0.5})]
    assert expected_scores(tokens, text_of(tokens), [3]) == [pytest.approx(2.5)]


def test_a_sampled_token_is_read_whatever_the_alternatives_listed_before_it() -> None:
    # sampled at a temperature: the chosen token is not the most likely one, and the most
    # likely one is not a score after the chosen token's prefix
    chosen = TokenLogprob(
        ": 2",
        math.log(0.25),
        ((" :", math.log(0.5)), (": 2", math.log(0.25)), (": 3", math.log(0.25))),
    )
    tokens = [sure('{"score"'), chosen, sure("}")]
    assert expected_scores(tokens, text_of(tokens), [2]) == [pytest.approx(2.5)]


def test_a_stray_character_outside_strings_opens_no_string() -> None:
    # a repaired answer may keep characters that are no JSON
    tokens = [sure('{"note": !"x", "score": '), position({"2": 0.5, "1": 0.5})]
    assert expected_scores(tokens, text_of(tokens), [2]) == [pytest.approx(1.5)]


def test_only_the_answer_is_read_not_reasoning_or_text_around_it() -> None:
    answer = [sure('{"score": '), position({"2": 0.5, "4": 0.5}), sure("}")]
    draft = [sure('{"score": '), position({"0": 1.0}), sure("}")]
    tail = [sure(' {"score": 1}')]
    tokens = [sure("<think>"), *draft, sure("</think>"), *answer, *tail]
    body = text_of(answer)
    assert expected_scores(tokens, body, [2]) == [pytest.approx(3.0)]
    # surrounding whitespace in the answer does not matter
    assert expected_scores(tokens, f"\n {body} \n", [2]) == [pytest.approx(3.0)]


def test_the_last_copy_of_the_answer_in_the_tokens_is_read() -> None:
    # a reasoning model drafting the very answer it then gives
    first = [sure('{"score": '), position({"1": 1.0}), sure("}")]
    final = [sure('{"score": '), position({"1": 0.5, "3": 0.5}), sure("}")]
    tokens = [*first, sure(" "), *final]
    assert expected_scores(tokens, text_of(final), [1]) == [pytest.approx(2.0)]


def test_a_rubric_of_hundreds_of_criteria_is_read_whole() -> None:
    tokens = [sure('{"verdicts": [')]
    for index in range(300):
        tokens += [
            sure(f'{", " if index else ""}{{"score": '),
            position({"3": 0.5, "4": 0.5}),
            sure("}"),
        ]
    tokens.append(sure("]}"))
    assert expected_scores(tokens, text_of(tokens), [3] * 300) == [pytest.approx(3.5)] * 300


def test_a_merged_token_is_read_after_its_prefix_and_before_its_suffix() -> None:
    # tokenizers merge the colon with the digit, or the digit with the brace
    tokens = [
        sure('{"a": {"score"'),
        position({": 3": 0.5, ": 2": 0.25, ":4": 0.125, "x 4": 0.125}),
        sure('}, "b": {"score": '),
        position({"4}": 0.5, " 4}": 0.25, "0,": 0.25}),
        sure("}"),
    ]
    expected = expected_scores(tokens, text_of(tokens), [3, 4])
    # ":4" does not start with the chosen token's prefix ": "; "x 4" neither
    assert expected == [pytest.approx((3 * 0.5 + 2 * 0.25) / 0.75), pytest.approx(3.0)]


def test_spellings_of_one_score_add_up_and_other_tokens_are_renormalised_away() -> None:
    tokens = [
        sure('{"score": '),
        position({"4": 0.3, " 4": 0.2, "40": 0.2, "7": 0.1, "yes": 0.1, "0": 0.1}),
    ]
    # 4 and " 4" are one score; 40 and 7 are off the scale, "yes" no score at all
    assert expected_scores(tokens, text_of(tokens), [4]) == [pytest.approx(4 * 0.5 / 0.6)]
    # a chosen token outside the top list still counts, with its own probability
    chosen = TokenLogprob("3", math.log(0.5), (("1", math.log(0.5)),))
    tokens = [sure('{"score": '), chosen]
    assert expected_scores(tokens, text_of(tokens), [3]) == [pytest.approx(2.0)]


def test_scores_at_the_ends_of_the_scale_count() -> None:
    tokens = [sure('{"score": '), position({"0": 0.5, "4": 0.25, "5": 0.25})]
    assert expected_scores(tokens, text_of(tokens), [0]) == [pytest.approx(4 * 0.25 / 0.75)]


@pytest.mark.parametrize(
    ("tokens", "answer", "verdicts"),
    [
        # the answer is not in the tokens
        ([sure('{"score": 3}')], '{"score": 4}', [4]),
        # an empty answer
        ([sure('{"score": 3}')], "  ", [3]),
        ([sure('{"score": 3}')], "", []),
        # another count of scores than verdicts
        ([sure('{"score": '), position({"3": 1.0}), sure("}")], '{"score": 3}', [3, 3]),
        ([sure('{"score": '), position({"3": 1.0}), sure("}")], '{"score": 3}', []),
        # the chosen token is not the verdict's score (above it or below it)
        ([sure('{"score": '), position({"3": 0.6, "4": 0.4}), sure("}")], '{"score": 3}', [4]),
        ([sure('{"score": '), position({"4": 0.6, "3": 0.4}), sure("}")], '{"score": 4}', [3]),
        # the chosen token is no score (the value is a string)
        ([sure('{"score": "4"}')], '{"score": "4"}', [4]),
        # no probability mass on any score (underflow)
        ([sure('{"score": '), TokenLogprob("3", -1000.0, ()), sure("}")], '{"score": 3}', [3]),
    ],
)
def test_logprobs_that_do_not_match_the_answer_give_none(
    tokens: list[TokenLogprob], answer: str, verdicts: list[float]
) -> None:
    assert expected_scores(tokens, answer, verdicts) is None


def test_a_single_verdict_is_kept_as_it_is() -> None:
    combined = combine([4])
    assert combined.mean == 4 and isinstance(combined.mean, int)
    assert combined.agreement == 1.0
    assert combine([2.75]).mean == 2.75


def test_several_verdicts_give_their_mean_and_the_share_of_the_commonest() -> None:
    assert combine([3, 4]) == combine([4, 3])
    assert combine([3, 4]).mean == 3.5 and combine([3, 4]).agreement == 0.5
    # expected scores round to the nearest verdict before they are counted
    combined = combine([3.6, 4.4, 0.2])
    assert combined.mean == pytest.approx(8.2 / 3)
    assert combined.agreement == pytest.approx(2 / 3)
    assert combine([1, 1, 1, 1]).agreement == 1.0


def test_no_verdicts_cannot_be_combined() -> None:
    with pytest.raises(ValueError, match="no verdicts to combine"):
        combine([])
