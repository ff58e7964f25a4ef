"""What the offline agents read and write."""

from __future__ import annotations

from amaris.jsonfile import JSONDict

AgentJSON = JSONDict
"""An agent's data message, or its reply, as JSON. The offline agents stand in for an LLM,
so they take and give the JSON an LLM agent would (the caller validates the reply against
the agent's own schema, :mod:`amaris.agents`): JSON of open shape here."""
