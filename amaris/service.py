"""Everything a running amaris holds, built once from the settings."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from qdrant_client import QdrantClient

from amaris.llm.call_log import CallLog
from amaris.llm.gateway import LLMGateway, build_providers
from amaris.llm.providers import ChatProvider
from amaris.prompts import load_prompts
from amaris.qdrant import open_qdrant
from amaris.rubric_store import RubricStore
from amaris.scoring import Scorer
from amaris.settings import Settings

log = logging.getLogger("amaris")

OFFLINE_BANNER = (
    "\n"
    "============================================================================\n"
    " amaris: NO LLM ENDPOINT CONFIGURED - using the OFFLINE rule-based judge.\n"
    " Rewards come from readable rules (answer match, length, hedging...), not\n"
    " from an LLM. Set client.default.base_url / api_key (or OPENAI_API_KEY)\n"
    " to judge with a real model.\n"
    "============================================================================"
)


@dataclass
class Services:
    """The long-lived objects of one amaris process."""

    settings: Settings
    qdrant: QdrantClient
    store: RubricStore
    gateway: LLMGateway
    scorer: Scorer
    providers: dict[str, ChatProvider] = field(default_factory=dict)

    @property
    def offline(self) -> bool:
        """True when the scorer is the offline judge."""
        return self.providers["scorer"].offline

    def close(self) -> None:
        """Release Qdrant (call :meth:`LLMGateway.close` from async code first)."""
        self.qdrant.close()


def build_services(
    settings: Settings,
    *,
    qdrant_location: str | None = None,
    providers: dict[str, ChatProvider] | None = None,
) -> Services:
    """Open storage, initialise the rubric and wire the gateway and scorer (blocking)."""
    providers = providers or build_providers(settings)
    prompts = load_prompts(settings.prompts)
    qdrant = open_qdrant(settings.memory, location=qdrant_location)
    try:
        store = RubricStore(qdrant, settings.memory.collection, settings.memory.rubrics_export_path)
        store.ensure_initialized(settings)
    except Exception:
        qdrant.close()
        raise
    gateway = LLMGateway(settings, providers, CallLog(settings.log_dir))
    scorer = Scorer(settings.scoring, gateway, store, prompts["scorer"])
    if providers["scorer"].offline:
        log.warning(OFFLINE_BANNER)
    return Services(settings, qdrant, store, gateway, scorer, providers)
