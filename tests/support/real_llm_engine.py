"""The real-model test server's engine: SmolLM2-135M-Instruct on CPU with ``transformers``,
decoding constrained by ``xgrammar`` to a request's ``response_format``, a request alone
or several in one batch (``tests/support/real_llm_batch.py``;
``tests/support/real_llm_server.py`` serves it).

Greedy decoding (amaris's default temperature 0) with Ollama's repeat penalty; the KV cache
of the prefix a prompt shares with the previous request is reused (vLLM's automatic
prefix caching), and the text the grammar forces is drafted and checked in one forward
pass (speculative jump-forward): the replies of token-by-token decoding in fewer passes.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_model
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.cache_utils import Cache, DynamicLayer

from tests.support.no_deps import import_xgrammar
from tests.support.real_llm_batch import Batch, Runner

THINK_TOKENS = 4
"""Reasoning tokens a reasoning mode decodes before it closes its think block (each is a
forward pass of the whole model, costly on a CPU core: the reasoning-style ``/score``
test decodes 20 think blocks). With the 5 tokens of its close, more than ``max_tokens=8``
leaves room for: the tests' cut at 8 stays an unterminated block."""
KV_GROWTH_TOKENS = 512
"""Room a KV cache buffer gets beyond the tokens it holds when it grows (one copy of the
cache per 512 decoded tokens, not a doubling of a prompt near the 8,192-token window)."""
REPEAT_WINDOW = 64
"""Tokens the repeat penalty looks back over (Ollama's ``repeat_last_n``)."""


def converted(gguf: Path) -> Path:
    """The folder (next to ``gguf``) holding its model dequantized to float32 safetensors,
    and its tokenizer, written the first time.

    Loading the GGUF dequantizes its 4-bit weights in Python, slow at every start; the
    same float32 weights from safetensors load quickly.
    """
    target = gguf.with_name(f"{gguf.stem}.f32")
    if (target / "config.json").is_file():
        return target
    folder, name = str(gguf.parent), gguf.name
    with tempfile.TemporaryDirectory(dir=gguf.parent) as tmp:
        partial = Path(tmp) / "model"
        AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(partial)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        # save_pretrained refuses a model loaded from GGUF: its weights (tied ones once)
        # and its config, which is what from_pretrained reads back.
        model.config.save_pretrained(partial)
        save_model(model, str(partial / "model.safetensors"))
        try:
            # Atomic: a concurrent start (another test process) sees the whole folder or
            # none; the one that loses the race keeps the winner's.
            os.rename(partial, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    return target


class RequestError(ValueError):
    """A request the server refuses with 400; ``param`` names the field."""

    def __init__(self, message: str, param: str | None, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


@dataclass
class Generation:
    """One decoded answer and its accounting."""

    content: str
    reasoning: str | None
    closed: bool
    """The think block was closed (the answer began)."""
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    finish_reason: str
    forward_passes: int
    """The model's forward passes for it (its prefill included)."""


Job = tuple[list[dict[str, Any]], dict[str, Any] | None, int, float, bool, float]
"""A request's messages, ``response_format``, ``max_tokens``, temperature, whether it
reasons first, and repetition penalty (:meth:`Engine.generate`'s arguments)."""


@dataclass
class Prepared:
    """A request checked and tokenized, ready to decode."""

    prompt_ids: list[int]
    grammar: Any
    """xgrammar's compiled grammar of its ``response_format``, or ``None``."""
    max_tokens: int
    temperature: float
    think: bool
    repetition_penalty: float


class SoloRunner:
    """The forward passes of one request decoded alone, over its own KV cache."""

    def __init__(self, model: Any, cache: Any) -> None:
        self._model = model
        self.cache = cache

    def run(self, tokens: list[int], keep: int) -> Any:
        out = self._model(
            input_ids=torch.tensor([tokens]),
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        return out.logits[0].float()

    def crop(self, count: int) -> None:
        self.cache.crop(-count)  # negative: tokens dropped from the end


class Engine:
    """The model, its tokenizer and a grammar compiler; decodes a request alone, or a batch
    of them together (one call at a time)."""

    def __init__(self, gguf: Path, max_model_len: int) -> None:
        xgrammar = import_xgrammar()
        self._xgr = xgrammar
        folder = converted(gguf)
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self._tokenizer_lock = threading.Lock()
        self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        self.model.eval()
        self.max_model_len = max_model_len
        vocab_size = self.model.config.vocab_size
        info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=vocab_size)
        self._compiler = xgrammar.GrammarCompiler(info)
        self._stop_ids = set(info.stop_token_ids)
        self._vocab_size = vocab_size
        self._think_close = self.tokenizer.encode("\n</think>\n\n", add_special_tokens=False)
        self._last: tuple[list[int], Any] | None = None
        """The tokens the previous request fed the model, and their KV cache."""
        self.cached_tokens = 0
        """Prompt tokens served from the previous request's KV cache so far."""
        self.forward_passes = 0
        """Forward passes of the model so far (prefills included): the tier's CPU time,
        counted deterministically."""
        self.draft = True
        """Draft the text the grammar forces and check it in one pass (greedy decoding
        only; see :meth:`_Decoder.verify`). Off: one pass per token with several choices."""

    def forget_prefix(self) -> None:
        """Drop the previous request's KV cache: the next prompt is computed whole."""
        self._last = None

    def _grammar(self, response_format: dict[str, Any] | None) -> Any:
        if response_format is None:
            return None
        kind = response_format.get("type")
        if kind == "text":
            return None
        if kind == "json_object":
            # An object, as vLLM's xgrammar backend compiles json_object now (its older
            # builtin JSON grammar also let the reply be an array, a string or a number:
            # the 135M model then answered the scorer with no object at all).
            return self._compiler.compile_json_schema('{"type": "object"}', any_whitespace=False)
        if kind == "json_schema":
            spec = response_format.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise RequestError(
                    "response_format.json_schema.schema must be an object", "response_format"
                )
            try:
                # No free whitespace between tokens (vLLM's --disable-any-whitespace): a
                # small model otherwise pads its JSON with newlines until max_tokens.
                return self._compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
            except RuntimeError as exc:
                raise RequestError(
                    f"response_format: invalid JSON schema: {exc}", "response_format"
                ) from exc
        raise RequestError(f"response_format.type {kind!r} is not supported", "response_format")

    def prepare(
        self,
        messages: list[dict[str, Any]],
        response_format: dict[str, Any] | None,
        max_tokens: int,
        temperature: float,
        think: bool,
        repetition_penalty: float = 1.0,
    ) -> Prepared:
        """A request's prompt tokens and grammar, checked.

        Raises:
            RequestError: a bad ``response_format``, or a prompt that does not fit.
        """
        grammar = self._grammar(response_format)
        prompt = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False
        )
        if think:
            prompt += "<think>\n"
        prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        requested = len(prompt_ids) + max_tokens
        if requested > self.max_model_len:
            raise RequestError(
                f"This model's maximum context length is {self.max_model_len} tokens. "
                f"However, you requested {requested} tokens ({len(prompt_ids)} in the "
                f"messages, {max_tokens} in the completion). Please reduce the length of "
                "the messages or completion.",
                "messages",
                code="context_length_exceeded",
            )
        return Prepared(prompt_ids, grammar, max_tokens, temperature, think, repetition_penalty)

    def generate(
        self,
        messages: list[dict[str, Any]],
        response_format: dict[str, Any] | None,
        max_tokens: int,
        temperature: float,
        think: bool,
        repetition_penalty: float = 1.0,
    ) -> Generation:
        """Decode an answer to ``messages``.

        Raises:
            RequestError: a bad ``response_format``, or a prompt that does not fit.
        """
        prepared = self.prepare(
            messages, response_format, max_tokens, temperature, think, repetition_penalty
        )
        return self.generate_many([prepared])[0]

    def generate_each(self, requests: list[Job]) -> list[Generation | RequestError]:
        """Decode the answers to ``requests`` (:meth:`generate`'s arguments each) together;
        a request refused (:class:`RequestError`) gets its error, the others their answer."""
        prepared: list[Prepared | RequestError] = []
        for request in requests:
            try:
                prepared.append(self.prepare(*request))
            except RequestError as exc:
                prepared.append(exc)
        answers = iter(self.generate_many([p for p in prepared if isinstance(p, Prepared)]))
        return [p if isinstance(p, RequestError) else next(answers) for p in prepared]

    def generate_many(self, requests: list[Prepared]) -> list[Generation]:
        """Decode the answers to ``requests``: one alone on its own; several in one
        batch, each forward pass feeding every request's next tokens
        (:mod:`tests.support.real_llm_batch`), the replies of decoding each alone."""
        if not requests:
            return []
        with torch.inference_mode():
            if len(requests) == 1:
                return [self._decode_alone(requests[0])]
            return self._decode_batch(requests)

    def _decode_alone(self, request: Prepared) -> Generation:
        # Taken: a request that fails half-way leaves no cache that does not match its ids.
        last, self._last = self._last, None
        prompt_ids = request.prompt_ids
        # At least the prompt's last token is computed: its logits start the reply.
        cache, reused = _reuse(last, prompt_ids, len(prompt_ids) - 1)
        if cache is None:
            cache = growing_cache(self.model.config.num_hidden_layers)
        runner = SoloRunner(self.model, cache)
        state = _Decoder(
            runner, prompt_ids, reused, request.temperature, request.repetition_penalty
        )
        result = self._decode(state, request)
        # The tokens left pending are not in the cache (nor in state.fed): the next
        # request reuses the prefix that is.
        self._last = (state.fed, runner.cache)
        return result

    def _decode_batch(self, requests: list[Prepared]) -> list[Generation]:
        # The prompts' common prefix (the system prompt: amaris puts the stable part of
        # every prompt first) is computed once, from the previous request's cache where it
        # shares it; each request's rest is its first feed in the batch.
        ids = [r.prompt_ids for r in requests]
        limit = min(len(i) for i in ids) - 1
        common = next(
            (n for n in range(limit) if any(i[n] != ids[0][n] for i in ids)),
            limit,
        )
        prefix = ids[0][:common]
        last, self._last = self._last, None
        cache, reused = _reuse(last, prefix, len(prefix))
        if cache is None:
            cache = growing_cache(self.model.config.num_hidden_layers)
        passes = 0
        if reused < len(prefix):
            self.model(
                input_ids=torch.tensor([prefix[reused:]]),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            passes = 1
        layers = self.model.config.num_hidden_layers
        batch = Batch(self.model, cache, len(prefix), len(requests), growing_cache(layers))

        def row(index: int, runner: Runner) -> Generation:
            request = requests[index]
            with torch.inference_mode():
                state = _Decoder(
                    runner,
                    request.prompt_ids,
                    len(prefix),
                    request.temperature,
                    request.repetition_penalty,
                )
                return self._decode(state, request)

        results = batch.run(row)
        # The next request reuses the common prefix (its cache was copied into the batch).
        self._last = (prefix, cache) if prefix else None
        self.forward_passes += passes + batch.passes
        return results

    def _decode(self, state: _Decoder, request: Prepared) -> Generation:
        grammar, max_tokens = request.grammar, request.max_tokens
        temperature, think = request.temperature, request.think
        # In a batch, no drafts: every row's pass is padded to the widest row's tokens,
        # and a drafted run (a key, its quotes: ~5 tokens) in one row would make each
        # pass of a batch of 20 compute ~100 tokens for ~20; the replies are the same
        # (the drafts are checked exactly), in more passes of one token a row.
        alone = isinstance(state.runner, SoloRunner)
        self.cached_tokens += state.reused
        reasoning_ids: list[int] = []
        closed = False
        if think:
            # The think block: free text, closed by us after THINK_TOKENS (a 135M model
            # never closes one itself); cut by max_tokens, it stays unterminated.
            for _ in range(min(THINK_TOKENS, max_tokens)):
                token = state.next_token(None)
                if token in self._stop_ids:
                    break
                reasoning_ids.append(token)
                state.feed(token)
            if len(reasoning_ids) + len(self._think_close) <= max_tokens:
                state.feed_many(self._think_close)  # forced tokens: one forward pass
                closed = True
        spent = len(reasoning_ids) + (len(self._think_close) if closed else 0)
        answer_ids: list[int] = []
        matcher = self._xgr.GrammarMatcher(grammar) if grammar is not None else None
        bitmask = (
            self._xgr.allocate_token_bitmask(1, self._vocab_size) if matcher is not None else None
        )
        finish = "length"
        # Tokens chosen but not yet fed to the model: a token the grammar forces (the only
        # one its bitmask allows: a key, a quote, a brace) needs no logits, so a run of
        # them is fed in one forward pass before the next free choice (jump-forward
        # decoding, as SGLang and vLLM's xgrammar backend do).
        pending: list[int] = []
        while closed or not think:
            budget = max_tokens - spent - len(answer_ids)
            if budget <= 0:
                break
            if matcher is not None and self.draft and temperature <= 0 and alone:
                # The text the grammar forces next (a key and its quotes: several
                # tokenizations allowed, so no single forced token), drafted and checked
                # in one forward pass: greedy decoding's own choices, fewer passes.
                jump = matcher.find_jump_forward_string()
                if jump:
                    with self._tokenizer_lock:
                        draft = self.tokenizer.encode(jump, add_special_tokens=False)
                    draft = draft[:budget]
                    chosen = state.verify(pending, draft, matcher, bitmask)
                    pending = [] if chosen == draft else [chosen[-1]]
                    answer_ids.extend(chosen)
                    continue
            mask = None
            forced = None
            if matcher is not None:
                matcher.fill_next_token_bitmask(bitmask)
                mask = bitmask
                forced = _only_token(bitmask)
            if forced is None:
                if pending:
                    state.feed_many(pending)
                    pending = []
                token = state.next_token(mask)
            else:
                token = forced
            if matcher is not None and not matcher.is_terminated():
                matcher.accept_token(token)
            if token in self._stop_ids:
                finish = "stop"
                break
            answer_ids.append(token)
            pending.append(token)
        if alone:
            self.forward_passes += state.passes
        with self._tokenizer_lock:  # a batch's requests decode in threads of their own
            reasoning = self.tokenizer.decode(reasoning_ids, skip_special_tokens=True)
            answer = self.tokenizer.decode(answer_ids, skip_special_tokens=True)
        return Generation(
            content=answer,
            reasoning=reasoning if think else None,
            closed=closed,
            prompt_tokens=len(request.prompt_ids),
            completion_tokens=spent + len(answer_ids) + (finish == "stop"),
            reasoning_tokens=spent,
            finish_reason=finish,
            forward_passes=state.passes,
        )


def _only_token(bitmask: Any) -> int | None:
    """The one token ``bitmask`` (xgrammar's: bit ``i % 32`` of word ``i // 32``) allows,
    or ``None`` when it allows several."""
    words = torch.nonzero(bitmask[0]).flatten()
    if len(words) != 1:
        return None
    index = int(words[0])
    word = int(bitmask[0, index]) & 0xFFFFFFFF
    if word & (word - 1):
        return None
    return index * 32 + word.bit_length() - 1


class GrowingLayer(DynamicLayer):  # type: ignore[misc]
    """:class:`transformers.cache_utils.DynamicLayer` whose keys and values are views of a
    buffer that grows by :data:`KV_GROWTH_TOKENS` when full, instead of ``torch.cat`` of the
    whole cache at every step (a copy of every layer's keys and values per decoded token).

    The same keys and values (the same logits, bit for bit), for less CPU a forward pass.
    ``crop`` (DynamicLayer's: a view cut shorter)
    works as is; the next ``update`` writes after it, over the tokens cropped.
    """

    _keys_buffer: Any = None
    _values_buffer: Any = None

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        held, new = self.get_seq_length(), key_states.shape[-2]
        if self._keys_buffer is None or held + new > self._keys_buffer.shape[-2]:
            room = held + new + KV_GROWTH_TOKENS
            shape = (*key_states.shape[:-2], room, key_states.shape[-1])
            keys, values = key_states.new_empty(shape), value_states.new_empty(shape)
            if held:
                keys[..., :held, :] = self.keys
                values[..., :held, :] = self.values
            self._keys_buffer, self._values_buffer = keys, values
        self._keys_buffer[..., held : held + new, :] = key_states
        self._values_buffer[..., held : held + new, :] = value_states
        self.keys = self._keys_buffer[..., : held + new, :]
        self.values = self._values_buffer[..., : held + new, :]
        return self.keys, self.values


def growing_cache(layers: int) -> Any:
    """An empty KV cache of ``layers`` :class:`GrowingLayer` layers."""
    return Cache(layers=[GrowingLayer() for _ in range(layers)])


def _reuse(last: tuple[list[int], Any] | None, ids: list[int], limit: int) -> tuple[Any, int]:
    """The cache of ``last`` (the tokens the previous request fed the model, and their KV
    cache) cut to the longest prefix ``ids`` shares with it, at most ``limit`` tokens, and
    that prefix's length; ``(None, 0)`` when they share none.

    vLLM's automatic prefix caching: amaris puts the stable part of every prompt first,
    and the prefill of a long prompt is most of a short reply's time on a CPU.
    """
    if last is None:
        return None, 0
    previous, cache = last
    limit = min(len(previous), limit)
    shared = next((i for i in range(limit) if previous[i] != ids[i]), limit)
    if shared == 0:
        return None, 0
    if len(previous) > shared:
        # Negative: tokens to drop from the end (transformers 4.56 and 5 alike).
        cache.crop(shared - len(previous))
    return cache, shared


class _Decoder:
    """Greedy or sampled next-token choice over a KV cache, the forward passes run by
    ``runner`` (the model alone, :class:`SoloRunner`, or a row of a batch,
    :class:`tests.support.real_llm_batch.Batch`).

    The prompt's first ``reused`` tokens are in the runner's cache already (the previous
    request's prefix, or the batch's common prefix): not computed again.
    """

    def __init__(
        self,
        runner: Runner,
        prompt_ids: list[int],
        reused: int,
        temperature: float,
        repetition_penalty: float = 1.0,
    ) -> None:
        self.runner = runner
        self._temperature = temperature
        self._penalty = repetition_penalty
        self._recent: list[int] = []
        self.fed = list(prompt_ids)
        """Every token fed to the model so far (the cache's)."""
        self.reused = reused
        """Prompt tokens whose KV was in the cache."""
        # The vocabulary's logits of the last position only (those of every position would
        # be a large share of a long prompt's prefill).
        self._logits = runner.run(prompt_ids[reused:], 1)[-1]
        self.passes = 1
        """Forward passes of the model for this request."""
        self._generator = torch.Generator().manual_seed(len(prompt_ids))

    def next_token(self, bitmask: Any) -> int:
        return self._choose(self._logits, self._recent, bitmask)

    def _choose(self, logits: Any, recent: list[int], bitmask: Any) -> int:
        """The next token after ``logits`` (the model's last position), the repeat penalty
        over ``recent`` and the grammar's ``bitmask`` applied."""
        import xgrammar

        logits = logits.clone()
        if self._penalty != 1.0 and recent:
            # llama.cpp's and Ollama's repeat penalty over the last REPEAT_WINDOW tokens.
            seen = torch.tensor(sorted(set(recent)))
            picked = logits[seen]
            logits[seen] = torch.where(picked > 0, picked / self._penalty, picked * self._penalty)
        if bitmask is not None:
            xgrammar.apply_token_bitmask_inplace(logits.unsqueeze(0), bitmask)
        if self._temperature <= 0:
            return int(logits.argmax())
        probs = torch.softmax(logits / self._temperature, dim=-1)
        return int(torch.multinomial(probs, 1, generator=self._generator))

    def _greedy(self, logits: Any, recent: list[int], matcher: Any, bitmask: Any) -> int:
        """Greedy decoding's token at ``matcher``'s state: the one it allows, when it allows
        one (no logits needed), else the best of ``logits``."""
        matcher.fill_next_token_bitmask(bitmask)
        forced = _only_token(bitmask)
        return forced if forced is not None else self._choose(logits, recent, bitmask)

    def verify(self, pending: list[int], draft: list[int], matcher: Any, bitmask: Any) -> list[int]:
        """Feed ``pending`` (chosen, not yet fed) and ``draft`` in one forward pass, and
        return the tokens greedy decoding chooses (accepted by ``matcher``): ``draft``'s
        longest prefix that matches, then the model's own token where they part.

        The exact speculative decoding check (greedy: the draft's token is kept only where
        it is the argmax of the logits before it, penalty and grammar mask applied): the
        reply is the one token-by-token decoding gives, in fewer forward passes. Where the
        draft is kept whole, every token is fed; else the model's token is not (the
        caller's next pending one) and the cache is cut back to the tokens kept before it.
        """
        if not pending:
            # The first token's logits are at hand: a draft refused there costs no pass.
            first = self._greedy(self._logits, self._recent, matcher, bitmask)
            if first != draft[0]:
                matcher.accept_token(first)
                return [first]
        tokens = [*pending, *draft]
        # The logits at the token before each drafted one, and after the last.
        keep = len(draft) + (1 if pending else 0)
        logits = self.runner.run(tokens, keep)
        self.passes += 1
        offset = len(tokens) - keep
        chosen: list[int] = []
        for i, proposed in enumerate(draft):
            # The logits before draft[i]: the previous pass's last ones for the first token
            # when nothing was pending (checked above), else those at the token before it.
            at = len(pending) + i - 1
            before = logits[at - offset] if at >= 0 else self._logits
            if at >= 0:
                recent = [*self._recent, *tokens[: len(pending) + i]][-REPEAT_WINDOW:]
                token = self._greedy(before, recent, matcher, bitmask)
            else:
                token = proposed
            matcher.accept_token(token)
            chosen.append(token)
            if token != proposed:
                kept = len(pending) + i
                self.runner.crop(len(tokens) - kept)
                self.fed.extend(tokens[:kept])
                self._recent = [*self._recent, *tokens[:kept]][-REPEAT_WINDOW:]
                self._logits = before
                return chosen
        self.fed.extend(tokens)
        self._recent = [*self._recent, *tokens][-REPEAT_WINDOW:]
        self._logits = logits[-1]
        return chosen

    def feed(self, token: int) -> None:
        self.feed_many([token])

    def feed_many(self, tokens: list[int]) -> None:
        """Feed ``tokens`` (chosen, not decoded: e.g. the think block's close) in one
        forward pass; the next token's logits are those after the last of them."""
        self.fed.extend(tokens)
        self._recent = [*self._recent, *tokens][-REPEAT_WINDOW:]
        self._logits = self.runner.run(tokens, 1)[-1]
        self.passes += 1
