"""The digest memory and the analyses store, in real Qdrant (local folder and memory)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from amaris.memory.embedder import HashingEmbedder
from amaris.memory.models import MAX_TEXT_CHARS, MemoryDocument
from amaris.memory.qdrant import CollectionMismatchError
from amaris.memory.store import MemoryStore, MemoryStoreError, document_id
from tests.support.memory_helpers import minilm


@pytest.fixture
def client() -> Iterator[QdrantClient]:
    qdrant = QdrantClient(location=":memory:")
    yield qdrant
    qdrant.close()


def _doc(doc_type: str, step: int, text: str, **extra: object) -> MemoryDocument:
    return MemoryDocument.model_validate({"type": doc_type, "step": step, "text": text, **extra})


def test_search_leaves_out_the_current_step_other_scopes_and_types(client: QdrantClient) -> None:
    store = MemoryStore(client, "t", HashingEmbedder())
    store.add_documents(
        [
            _doc("finding", 1, "hedging between answers", key="r1", ids=["r1"]),
            _doc("finding", 2, "hedging between answers again", key="r2"),
            _doc("batch_summary", 1, "hedging between answers seen"),
            _doc("finding", 1, "hedging between answers", key="r1", scope="q7"),
            _doc("finding", 3, "polite and short"),
        ]
    )
    hits = store.search(
        "hedging between answers", limit=10, exclude_step=2, scope="global", types={"finding"}
    )
    assert [(h.document.step, h.document.key) for h in hits] == [(1, "r1"), (3, "step")]
    assert hits[0].id == document_id("finding", "global", 1, "r1")
    assert hits[0].document.ids == ["r1"]
    assert hits[0].score == pytest.approx(1.0)
    assert hits[0].score > hits[1].score
    everything = store.search("hedging between answers", limit=10)
    assert len(everything) == 5  # the embedder marker is never a hit
    assert [h.document.step for h in store.search("hedging", limit=2)] == [1, 1]
    assert store.search("hedging", limit=0) == []
    assert store.search("   ", limit=3) == []


class CountingEmbedder(HashingEmbedder):
    """The hashing embedder, counting its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return super().embed(texts)


def test_several_queries_are_embedded_in_one_call_and_answer_as_searched_alone(
    client: QdrantClient,
) -> None:
    embedder = CountingEmbedder()
    store = MemoryStore(client, "t", embedder)
    store.add_documents(
        [
            _doc("finding", 1, "hedging between answers", key="r1"),
            _doc("finding", 2, "polite and short", key="r2"),
            _doc("batch_summary", 3, "the answers were hedged"),
        ]
    )
    queries = ["hedging between answers", "  ", "polite and short", "hedging between answers"]
    embedder.calls.clear()
    found = store.search_many(queries, limit=2, exclude_step=3)
    assert embedder.calls == [["hedging between answers", "polite and short"]]
    alone = [store.search(q, limit=2, exclude_step=3) for q in queries]
    assert [[h.id for h in hits] for hits in found] == [[h.id for h in hits] for hits in alone]
    assert found[1] == [] and found[0] and found[2]
    assert store.search_many(queries, limit=0) == [[], [], [], []]


def test_search_reads_more_candidates_until_enough_pass(client: QdrantClient) -> None:
    store = MemoryStore(client, "t", HashingEmbedder(), max_fetch=64)
    near = [_doc("finding", 1, "grader manipulation", key=str(i), scope="a") for i in range(40)]
    store.add_documents([*near, _doc("finding", 1, "grader manipulation attempt", scope="b")])
    hits = store.search("grader manipulation", limit=1, scope="b")  # 4 -> 16 -> 64 candidates
    assert [(h.document.scope, h.document.text) for h in hits] == [
        ("b", "grader manipulation attempt")
    ]
    capped = MemoryStore(client, "t", HashingEmbedder(), max_fetch=16)
    assert capped.search("grader manipulation", limit=1, scope="b") == []


def test_documents_are_replaced_by_identity(client: QdrantClient) -> None:
    store = MemoryStore(client, "t", HashingEmbedder())
    first = store.add_documents([_doc("rubric_update", 4, "added R3", doc={"v": 1})])
    again = store.add_documents([_doc("rubric_update", 4, "added R3 and R4", doc={"v": 2})])
    assert first == again == [document_id("rubric_update", "global", 4, "step")]
    assert store.counts_by_type_and_step() == {"rubric_update": {4: 1}}
    [hit] = store.search("added", limit=5)
    assert (hit.document.text, hit.document.doc) == ("added R3 and R4", {"v": 2})
    long = _doc("finding", 5, "x" * 5000)
    assert len(long.text) == MAX_TEXT_CHARS


def test_summaries_are_read_by_id_and_meta_summaries_win(client: QdrantClient) -> None:
    store = MemoryStore(client, "t", HashingEmbedder())
    # As the step flow writes them: one chunk -> its batch summary is the step's summary;
    # several chunks -> the meta summary is.
    docs = [_doc("batch_summary", s, f"batch {s}", key="chunk-0") for s in (0, 1, 2, 4, 5, 6)]
    docs += [_doc("batch_summary", s, f"chunk 1 of {s}", key="chunk-1") for s in (2, 5)]
    docs += [_doc("meta_summary", s, f"meta {s}", key="meta") for s in (2, 5)]
    docs += [_doc("batch_summary", 3, "other scope", scope="q1")]  # default key "step"
    docs += [_doc("finding", 3, "not a summary", key="chunk-0")]
    store.add_documents(docs)
    [summary] = store.recent_summaries("global", 6, 1)
    assert (summary.step, summary.text) == (5, "meta 5")
    [other] = store.recent_summaries("q1", 4, 1)
    assert (other.step, other.text) == (3, "other scope")

    def texts(before: int, count: int) -> list[str]:
        return [d.text for d in store.recent_summaries("global", before, count)]

    assert texts(6, 3) == ["meta 2", "batch 4", "meta 5"]  # step 3 has none
    assert texts(7, 2) == ["meta 5", "batch 6"]
    assert texts(3, 10) == ["batch 0", "batch 1", "meta 2"]
    assert texts(0, 3) == []
    assert texts(5, 0) == []
    assert texts(40, 1) == ["batch 6"]  # probes back over steps without summaries
    assert [d.text for d in store.recent_summaries("q1", 9, 5)] == ["other scope"]


def test_recent_and_counts_for_inspection(client: QdrantClient) -> None:
    store = MemoryStore(client, "t", HashingEmbedder())
    for step in range(3):
        store.add_documents(
            [
                _doc("finding", step, f"f{step}", key="a", created_at=100.0 + step),
                _doc("finding", step, f"g{step}", key="b", created_at=50.0 + step),
            ]
        )
    assert [d.text for d in store.recent(3)] == ["f2", "f1", "f0"]
    assert store.counts_by_type_and_step() == {"finding": {0: 2, 1: 2, 2: 2}}
    partial = store.counts_by_type_and_step(limit_points=3)
    assert sum(partial["finding"].values()) <= 3


def test_analyses_by_rollout_id(client: QdrantClient) -> None:
    store = MemoryStore(client, "t", HashingEmbedder())
    store.put_analyses("global", 3, [("r1", {"tag": "hedging"}), ("r2", {"tag": None})])
    store.put_analyses("q9", 3, [("r1", {"tag": "other scope"})])
    assert store.get_analyses("global", 3, ["r2", "r1", "r3"]) == {
        "r1": {"tag": "hedging"},
        "r2": {"tag": None},
    }
    assert store.get_analyses("global", 4, ["r1"]) == {}
    store.drop_analyses("global", 3, ["r1", "r3"])
    assert store.get_analyses("global", 3, ["r1", "r2"]) == {"r2": {"tag": None}}
    assert store.get_analyses("q9", 3, ["r1"]) == {"r1": {"tag": "other scope"}}


def test_memory_persists_and_refuses_another_embedder(tmp_path: Path) -> None:
    client = QdrantClient(path=str(tmp_path))
    store = MemoryStore(client, "t", HashingEmbedder())
    store.add_documents([_doc("meta_summary", 0, "the policy pads answers")])
    store.put_analyses("global", 0, [("r1", {"ok": True})])
    client.close()

    client = QdrantClient(path=str(tmp_path))
    reopened = MemoryStore(client, "t", HashingEmbedder())
    [summary] = reopened.recent_summaries("global", 1, 1)
    assert (summary.step, summary.text) == (0, "the policy pads answers")
    assert reopened.get_analyses("global", 0, ["r1"]) == {"r1": {"ok": True}}
    with pytest.raises(MemoryStoreError, match="'hashing-384'"):
        MemoryStore(client, "t", minilm())  # same dimension, another vector space
    with pytest.raises(CollectionMismatchError, match="vector size 384, expected 16"):
        MemoryStore(client, "t", HashingEmbedder(dim=16))
    client.close()


def test_semantic_search_with_minilm(client: QdrantClient) -> None:
    store = MemoryStore(client, "t", minilm())
    store.add_documents(
        [
            _doc("finding", 1, "policy hedges between multiple candidate answers", key="a"),
            _doc("finding", 1, "the response is polite and short", key="b"),
            _doc("finding", 2, "it is sunny in Paris today", key="c"),
        ]
    )
    hits = store.search("the model gives several answers to game the grader", limit=3)
    assert [h.document.key for h in hits] == ["a", "b", "c"]


def test_documents_stored_by_id_only_are_read_and_listed_but_never_embedded(
    client: QdrantClient,
) -> None:
    embedded: list[str] = []

    class Counting(HashingEmbedder):
        def embed(self, texts: Sequence[str]) -> list[list[float]]:
            embedded.extend(texts)
            return super().embed(texts)

    store = MemoryStore(client, "t", Counting())
    summaries = [_doc("batch_summary", s, f"step {s} of the prompt", scope="in-1") for s in (1, 2)]
    store.add_documents(summaries, searchable=False)
    store.put_analyses("in-1", 2, [("r1", {"rollout_id": "r1"})])
    assert embedded == []
    # static memory reads them by id; inspection lists them; search never finds them
    assert [d.text for d in store.recent_summaries("in-1", 3, 5)] == [d.text for d in summaries]
    assert store.counts_by_type_and_step() == {"batch_summary": {1: 1, 2: 1}}
    assert {d.text for d in store.recent(10)} == {d.text for d in summaries}
    assert store.search("step 1 of the prompt", limit=5) == []
    # retention of the analyses leaves them
    store.drop_analyses("in-1", 2, ["r1"])
    assert len(store.recent_summaries("in-1", 3, 5)) == 2
