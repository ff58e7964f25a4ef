"""Untrusted text, read in linear time and bounded size.

The policy's replies (optimised against the reward, degenerate by nature), the judge's replies
and the rubric updater's criteria are text amaris did not write. Everything here reads such
text with google-re2 (:mod:`re2`: a linear-time automaton, no backtracking; it releases the
interpreter lock while it matches) or with single passes of ``str`` methods, and says how much
of the text it reads. Python's :mod:`re` is never run on it: a backtracking pattern on a
repetition loop of the policy can stall the server.

* :mod:`amaris.text.chars`: Python's ``\\w`` and ``\\s`` for RE2, and character-class maps
  applied with ``str.translate``;
* :mod:`amaris.text.prompt_split`: the response in an OpenRLHF query, after its prompt as the
  trainer's tokenizer decoded it (``POST /get_reward``);
* :mod:`amaris.text.injection`: text addressed to the grader or the pipeline ("NOTE TO THE
  RUBRIC UPDATER: ...") in a rollout's fields, found by one RE2 automaton;
* :mod:`amaris.text.markdown`: a string made inert in a Markdown artifact (one line, its
  markup escaped, its URLs defanged);
* :mod:`amaris.text.answers`: the final answer of a reply or a reference (the last
  ``\\boxed{}``, "answer: X", a trailing "= X", the last number...), canonical, from the reply's
  tail only (:data:`~amaris.text.answers.ANSWER_WINDOW` characters).
"""
