"""The pre-check's learned rules: replies a judge canary caught the training judge paying
for, given the floor on ``/score`` from then on (docs/judge-canaries.md).

A rule is matched by its :attr:`LearnedRule.key`: a digest of the reply's normalised text
(and of its prompt's, for a rule scoped to one prompt), so matching is one hash of text the
pre-check normalises anyway and one dictionary lookup, whatever the number of rules. The
store keeps the rules in ``<collection>_precheck_rules`` (payload-only Qdrant points, in the
data folder with embedded Qdrant), so a restart, a replica or a step worker sees the same
set. The set is versioned: every addition or removal makes a new version; a removed rule is
kept (``removed_in``) for the record, and an alarm never brings it back.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field
from qdrant_client import QdrantClient, models

from amaris.memory.qdrant import ensure_collection

_NAMESPACE = uuid.UUID("2b0f6f0e-59c4-4f43-9f6e-3c1d6a5e7a10")
_HEAD = str(uuid.uuid5(_NAMESPACE, "head"))

ProbeKind = Literal["master_key", "opener", "no_answer", "half", "swapped", "audit"]
"""What a judge canary probe is: a master key
(:data:`amaris.trust.rubric_canary.probes.MASTER_KEYS`); a reply's opening sentence alone;
its reasoning without the final answer; the reply cut at half length; the reply with its
final answer swapped for a wrong one; a rollout the audit judge read otherwise."""

PREVIEW_CHARS = 200
"""Characters of a rule's text kept for people (the rule itself is its digest)."""


def rule_key(text: str, prompt: str | None) -> str:
    """The lookup key of a reply's normalised ``text`` (and its normalised ``prompt``, for
    a rule of one prompt; None: any prompt)."""
    digest = hashlib.sha256()
    digest.update(b"any" if prompt is None else b"prompt:" + prompt.encode("utf-8", "replace"))
    digest.update(b"\x00" + text.encode("utf-8", "replace"))
    return digest.hexdigest()


class LearnedRule(BaseModel):
    """One learned pre-check rule: a reply that is exactly this text (normalised) gets the
    floor, for any prompt or for one."""

    id: str = Field(min_length=1)
    """Short, stable: the first 12 hex digits of :attr:`key`."""
    key: str = Field(min_length=64, max_length=64)
    """:func:`rule_key` of the text and (when scoped) the prompt."""
    any_prompt: bool
    """True: the reply alone matches; False: only as a reply to the prompt it came from."""
    kind: ProbeKind
    """The probe that raised the alarm."""
    preview: str
    """The text's first :data:`PREVIEW_CHARS` characters."""
    chars: int = Field(ge=0)
    """The text's length."""
    step: int = Field(ge=0)
    scope: str
    rollout_id: str | None = None
    """The step's rollout the probe was mined from (none for a master key)."""
    reward: float
    """What the training judge's verdicts made of the probe."""
    added_in: int = Field(ge=1)
    """The rule-set version that added it."""
    removed_in: int | None = None
    """The rule-set version that removed it (None: in force)."""
    created: float = Field(default_factory=time.time)


class RuleSet(BaseModel):
    """The rules of one version of the set."""

    version: int = Field(ge=0)
    """0: nothing was ever learned."""
    rules: list[LearnedRule]


class UnknownRuleError(KeyError):
    """No rule in force has that id."""


class PrecheckRuleStore:
    """Learned rules in Qdrant; the hot path reads an in-memory index (:meth:`index`)."""

    def __init__(self, client: QdrantClient, collection: str) -> None:
        self._qdrant = client
        self._collection = f"{collection}_precheck_rules"
        self._lock = threading.Lock()
        ensure_collection(client, self._collection, None)
        self._version = 0
        self._rules: dict[str, LearnedRule] = {}
        self._index: dict[str, LearnedRule] = {}
        self.refresh()

    # -- reads -----------------------------------------------------------------
    @property
    def version(self) -> int:
        """The version of the set in force (0: none was ever learned)."""
        return self._version

    def index(self) -> dict[str, LearnedRule]:
        """The rules in force by :attr:`LearnedRule.key` (a snapshot: replaced, never
        changed, so the hot path reads it without a lock)."""
        return self._index

    def rule_set(self, *, removed: bool = False) -> RuleSet:
        """The rules in force (and the removed ones with ``removed``), oldest first."""
        rules = [r for r in self._rules.values() if removed or r.removed_in is None]
        return RuleSet(version=self._version, rules=sorted(rules, key=lambda r: r.added_in))

    def refresh(self) -> bool:
        """Re-read the set when another process changed it; True when it did."""
        head = self._head()
        if head == self._version and self._rules:
            return False
        rules: dict[str, LearnedRule] = {}
        offset: Any = None
        while True:
            points, offset = self._qdrant.scroll(
                self._collection, limit=256, offset=offset, with_payload=True
            )
            for point in points:
                payload = point.payload or {}
                if payload.get("kind") == "rule":
                    rule = LearnedRule.model_validate(payload["rule"])
                    rules[rule.id] = rule
            if offset is None:
                break
        changed = head != self._version
        with self._lock:
            self._publish(head, rules)
        return changed

    # -- writes ----------------------------------------------------------------
    def add(self, rule: LearnedRule) -> LearnedRule | None:
        """Put ``rule`` in force as a new version (its ``added_in`` set here). None when a
        rule of that key is in force already, or was removed by a person (an alarm does not
        bring it back)."""
        self.refresh()  # a removal by another replica must be seen here
        with self._lock:
            if rule.id in self._rules:
                return None
            version = self._head() + 1
            added = rule.model_copy(update={"added_in": version, "removed_in": None})
            self._write(added, version)
            self._publish(version, {**self._rules, added.id: added})
            return added

    def remove(self, rule_id: str) -> LearnedRule:
        """Take the rule ``rule_id`` out of force as a new version.

        Raises:
            UnknownRuleError: no rule in force has that id.
        """
        self.refresh()  # a rule another process learned can be removed here
        with self._lock:
            rule = self._rules.get(rule_id)
            if rule is None or rule.removed_in is not None:
                raise UnknownRuleError(rule_id)
            version = self._head() + 1
            removed = rule.model_copy(update={"removed_in": version})
            self._write(removed, version)
            self._publish(version, {**self._rules, removed.id: removed})
            return removed

    def _write(self, rule: LearnedRule, version: int) -> None:
        # The rule first, the head second: a crash between them leaves a rule whose
        # version the head does not reach yet; the next change counts past it.
        points = [
            models.PointStruct(
                id=str(uuid.uuid5(_NAMESPACE, f"rule/{rule.id}")),
                vector={},
                payload={"kind": "rule", "rule": rule.model_dump(mode="json")},
            ),
            models.PointStruct(id=_HEAD, vector={}, payload={"kind": "head", "version": version}),
        ]
        for point in points:
            self._qdrant.upsert(self._collection, points=[point])

    def _head(self) -> int:
        found = self._qdrant.retrieve(self._collection, ids=[_HEAD], with_payload=True)
        return int((found[0].payload or {}).get("version", 0)) if found else 0

    def _publish(self, version: int, rules: dict[str, LearnedRule]) -> None:
        self._rules = rules
        self._index = {r.key: r for r in rules.values() if r.removed_in is None}
        self._version = version
