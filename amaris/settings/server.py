"""``server:``: the HTTP endpoint, and the ``Host`` names it answers."""

from __future__ import annotations

import ipaddress
import socket

import re2
from pydantic import Field, SecretStr, field_validator, model_validator

from amaris.settings.base import Section

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""``Host`` names the API always answers (with any port): this machine's own."""
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
"""``server.host`` values that bind every interface: no name of their own."""
_LABEL = r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?"
_HOST_NAME = re2.compile(rf"{_LABEL}(\.{_LABEL})*")
"""A DNS name (``_`` allowed: container names have it), matched in lower case."""


def host_key(host: str) -> str:
    """``host`` as a request's ``Host`` header names it, without a port: lower case, no
    trailing dot, an IPv6 address in brackets in its short form (``[::1]``).

    Raises:
        ValueError: ``host`` is neither a DNS name nor an IP address (a URL, a port...).
    """
    name = host.strip().lower().removesuffix(".")
    try:
        address = ipaddress.ip_address(name.removeprefix("[").removesuffix("]"))
    except ValueError:
        if not _HOST_NAME.fullmatch(name) or len(name) > 253:
            raise ValueError(
                f"{host!r} is not a host name or an IP address (give the name alone: no "
                "scheme, port, path or wildcard)"
            ) from None
        return name
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


class ServerSettings(Section):
    """``server:``: the HTTP endpoint."""

    host: str = "127.0.0.1"
    """Bind address; ``0.0.0.0`` exposes the service to the network."""
    port: int = Field(default=8002, ge=1, le=65535)
    api_key: SecretStr | None = None
    """When set (or ``AMARIS_API_KEY``), every path but /healthz needs ``Bearer <key>``
    (the OpenAPI schema and docs included). A secret: never shown."""
    max_body_bytes: int = Field(default=4_000_000, gt=0)
    """Larger request bodies get 413 (by their Content-Length, else as they stream in)."""
    body_timeout_seconds: float = Field(default=30.0, gt=0, le=3600)
    """A request body must have arrived whole this long after its headers, else 408."""
    probe_judges_seconds: float | None = Field(default=30.0, gt=0, le=86400)
    """How often the service checks that each agent's LLM endpoint answers (a model-list
    request, from start-up on; ``/healthz`` ``judges``); null: never."""
    head_timeout_seconds: float = Field(default=10.0, gt=0, le=3600)
    """A request's head (request line and headers) must have arrived whole this long after
    the connection opened, or after its first byte on a kept-alive connection, else 408
    and the connection closes."""
    max_connections: int = Field(default=1024, gt=0)
    """Connection cap. A connection holds a place while a request of it runs and while it
    idles after a request that carried ``api_key`` (any request, without a key); a request
    arriving while this many hold one (its own included) or this many requests run gets
    503. Other connections (no head yet, or a last request without the key) hold none: one
    more open connection than this closes the one of them that has waited longest."""
    max_batch_items: int = Field(default=1024, gt=0)
    """Most items one /batch_score request may carry."""
    max_wait_seconds: float = Field(default=300.0, gt=0, le=86400)
    """Longest one ``GET /rubric_status/wait`` is held open (a longer or absent
    ``timeout`` is capped; the answer is then ``pending`` and the client asks again)."""
    replica_id: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$"
    )
    """This replica's name when ``pipeline.executor`` is ``deployment`` (its rollout-log
    sequence and the step runs it executes); null = ``<hostname>:<port>``. Keep it stable
    across restarts of one replica and distinct between replicas."""

    allowed_hosts: list[str] = Field(default_factory=list, max_length=256)
    """Names (or addresses) clients reach the API by, besides ``localhost``, ``127.0.0.1``,
    ``[::1]`` and ``host`` itself (when it is not a wildcard); a request whose ``Host`` is
    none of these gets 421. Required when ``host`` is a wildcard (``0.0.0.0``, ``::``):
    what stops a web page from reaching the API through DNS rebinding."""

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, names: list[str]) -> list[str]:
        return [host_key(name) for name in names]

    @model_validator(mode="after")
    def _wildcard_names_its_hosts(self) -> ServerSettings:
        if self.host not in WILDCARD_BINDS:
            host_key(self.host)  # a bind address that is no name stops start-up here
        elif not self.allowed_hosts:
            raise ValueError(
                f"server.host {self.host!r} binds every interface: list in "
                "server.allowed_hosts the names and addresses clients reach it by (e.g. "
                "[amaris.internal, 10.0.0.5]); requests under any other Host get 421"
            )
        return self

    @property
    def served_hosts(self) -> frozenset[str]:
        """The ``Host`` names (as :func:`host_key` gives them) the API answers."""
        bound = () if self.host in WILDCARD_BINDS else (host_key(self.host),)
        return frozenset((*LOOPBACK_HOSTS, *bound, *self.allowed_hosts))

    @property
    def replica(self) -> str:
        """``replica_id``, or ``<hostname>:<port>``."""

        return self.replica_id or f"{socket.gethostname()}:{self.port}"

    @property
    def local_url(self) -> str:
        """Where a process on this machine reaches the API (a wildcard bind on loopback)."""
        host = "127.0.0.1" if self.host in {"0.0.0.0", "::"} else self.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{self.port}"
