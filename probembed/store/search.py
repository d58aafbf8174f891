"""Probabilistic search over a collection: candidates, exact rescoring, std and confidence.

Every hit carries its exact score under the chosen similarity, the standard deviation of its
dot-product score, the per-model fusion weights of the stored item and, when the pipeline
ships a relevance calibrator, the probability that it is relevant; every query carries the
probability that its first hit truly outranks its second. The result types are
`results.py`'s; the graphs kept on disk between processes, `graph_cache.py`'s.
"""

from __future__ import annotations

import functools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from probembed.calibration import CONFIDENCE_DEPTH, bm25_hit_features
from probembed.calibration.confidence import COVERAGE_HITS, LEXICAL_FEATURES, coverage_features
from probembed.caller import warn_caller
from probembed.encoders.base import lone_surrogate
from probembed.fusion import Fused
from probembed.fusion.adapt import retilt
from probembed.gaussian import Gaussian, decimals
from probembed.scoring import Score, parse_score
from probembed.scoring.ensemble import carries_disagreement, hit_variance, member_cosines
from probembed.store.errors import NotChunkedError, StoreError
from probembed.store.graph_cache import _graph_path, _save_graph
from probembed.store.index import (
    FLAT_SPACES,
    MEAN_SPACE,
    FlatIndex,
    HnswIndex,
    IndexSettings,
    ann_space,
    ann_vectors,
)
from probembed.store.ranking import (
    SCAN_BLOCK,
    Ranked,
    hybrid_depth,
    hybrid_ranked,
    rescore,
    scan,
    with_moments,
)
from probembed.store.results import GroupedHit, QueryResult, _hit, _read_unfiltered, confidence
from probembed.store.rows import PipelineInfo
from probembed.store.snapshot import Snapshot, Tilt, same_tilt
from probembed.store.threads import one_at_a_time

#: With group_by_doc, chunks ranked per document wanted: documents rarely have more chunks
#: than this among a query's best.
GROUP_POOL = 10
#: Hits of a filtered search's unfiltered ranking whose p_relevant its hits read (the
#: calibrators were fitted on top-10 hits; past this a hit reads the last value). On SciFact
#: test with a half-corpus filter, 30 gives the ECE, Brier and AUROC of 100 to four decimals
#: at about half the time; 20 moves them.
CONTEXT_DEPTH = 30

#: A graph is rebuilt rather than extended once more rows lie outside its radius than this.
OVERFLOW_FRACTION = 0.01

#: A filtered graph search widens its beam by √(live rows / rows kept), up to this factor.
FILTER_BEAM_GROWTH = 8.0

#: Seconds a searcher goes on with the agreement it read while the version stands still.
#: Another process's ingest keeps agreement after its last commit, at the same version: this
#: bounds how long such a searcher (a service beside a CLI ingest) searches with the old tilt.
AGREEMENT_RECHECK_S = 1.0

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline
    from probembed.store.collection import Collection


class Searcher:
    """Searches one collection with one pipeline, keeping its rows' snapshot and graphs.

    Safe to share between threads: queries are encoded side by side, and each search then
    reads and refreshes the snapshot alone.
    """

    def __init__(
        self, collection: Collection, pipeline: Any, settings: IndexSettings | None = None
    ) -> None:
        collection.check_pipeline(PipelineInfo.of(pipeline))
        self.collection = collection
        self.pipeline = pipeline
        self.settings = settings or IndexSettings()
        self._snapshot: Snapshot | None = None
        self._graphs: dict[str, HnswIndex | FlatIndex] = {}
        #: Per-member factors adapting the prior to this collection (None: the prior as is).
        self._tilt: Tilt | None = None
        #: The collection kept a new agreement without a new version (it is measured after
        #: the last commit of an ingest): read it at the next search.
        self._agreement_moved = False
        #: When (time.monotonic) the agreement was last read.
        self._agreement_read = -float("inf")
        #: Held by each search and refresh: two threads refreshing one snapshot at once
        #: appended rows twice and left its arrays of different lengths for good.
        self._lock = threading.RLock()

    @one_at_a_time
    def close(self) -> None:
        """Release the snapshot's files and the graphs now, not when garbage is collected."""
        if self._snapshot is not None:
            self._snapshot.close()
        self._snapshot, self._graphs = None, {}

    def agreement_moved(self) -> None:
        """Take in a newly kept agreement at the next search, though the version is the same."""
        self._agreement_moved = True

    def search(
        self,
        queries: Sequence[str],
        k: int = 10,
        score: Score | str | None = None,
        exact: bool = False,
        where: str | None = None,
        hybrid: bool = False,
        beta: float | None = None,
        min_p_relevant: float | None = None,
        group_by_doc: bool = False,
    ) -> list[QueryResult]:
        """One result per query: {"query", "confidence", "hits": [{"id", "score", "std", ...}]}.

        `score` defaults to the pipeline's; `exact` scans every row instead of the graph;
        `where` is a SQL filter on id, text and metadata columns; `hybrid` fuses the ranking
        with BM25 by reciprocal rank (each hit's score is then its fused RRF score);
        `min_p_relevant` drops the hits whose p_relevant is below it (needs a calibrator);
        `group_by_doc` (chunked collections) keeps each document's best chunk, the count of
        its other chunks among the candidates in the hit's `other_chunks`.
        """
        texts = _validate_queries(queries)
        _validate_k(k)
        self._validate_min_p(min_p_relevant)
        fused = self.pipeline.encode(texts)
        return self.search_fused(
            fused, k, score, exact, where, hybrid, texts, beta, min_p_relevant, group_by_doc
        )

    def vectors(self, query: str, ids: Sequence[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The query's fused mean and these rows' (by id; ids not stored left out), float64,
        as search scores them: with the collection's adaptation, so a re-ranker such as MMR
        compares what the ranking compared. The query is encoded outside the lock, as a
        search's is."""
        return self._vectors(self.pipeline.encode(_validate_queries([query])), ids)

    @one_at_a_time
    def _vectors(
        self, fused: Fused, ids: Sequence[str]
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """`vectors` for an encoded query, under the lock: the tilt and rows of one version."""
        self._refresh()
        if self._tilt is not None:
            fused = retilt(fused, self._tilt.dims, self._tilt.factors)
        snap = self._snapshot
        assert snap is not None
        found = [(i, snap.positions[i]) for i in ids if i in snap.positions]  # live rows only
        rows = snap.means[np.array([p for _, p in found], dtype=np.int64)]
        means = {i: row.astype(np.float64) for (i, _), row in zip(found, rows, strict=True)}
        return fused.gaussian.mean[0].astype(np.float64), means

    @one_at_a_time
    def search_fused(
        self,
        fused: Fused,
        k: int = 10,
        score: Score | str | None = None,
        exact: bool = False,
        where: str | None = None,
        hybrid: bool = False,
        texts: Sequence[str] | None = None,
        beta: float | None = None,
        min_p_relevant: float | None = None,
        group_by_doc: bool = False,
    ) -> list[QueryResult]:
        """Results for already-encoded queries; `texts` are shown and needed for hybrid BM25.

        One hit more than `k` is ranked, so that the confidence compares the first with the
        second even when only one is returned, and the k-th hit's p_relevant sees its gap to
        the next; a learned query confidence reads CONFIDENCE_DEPTH hits, whatever `k`.
        p_relevant and a learned confidence come from a calibrator fitted on the pipeline's
        own dense ranking (a hybrid search's on hybrid rankings, with BM25's features of the
        query and of each hit, where the calibrator has those models): with another `score`,
        or `group_by_doc` (features of chunks, not documents), they are approximations.
        """
        _validate_k(k)
        _validate_options(where, exact, hybrid, group_by_doc)
        self._validate_min_p(min_p_relevant)
        where = where if where is None or where.strip() else None  # "" and "  ": no filter
        kind = parse_score(score if score is not None else self.pipeline.score.name)
        beta = self.pipeline.score.beta if beta is None else beta
        if hybrid and (texts is None or len(texts) != len(fused.gaussian)):
            raise ValueError("hybrid search needs one query text per query vector, for BM25")
        if len(fused.gaussian) == 0:
            raise ValueError("search_fused needs at least one query vector, got none")
        means, variances = fused.gaussian.mean, fused.gaussian.var
        bad = np.flatnonzero(~(np.isfinite(means).all(axis=1) & np.isfinite(variances).all(axis=1)))
        if len(bad):
            raise ValueError(
                f"query vector {int(bad[0])} holds NaN or infinity; "
                "encode queries with the collection's pipeline"
            )
        self._refresh()
        models = self.collection.pipeline.models
        if tuple(fused.models) != models:
            raise ValueError(
                f"query vectors fuse models {fused.models}; collection {self.collection.name!r} "
                f"holds vectors of {models}"
            )
        if self._tilt is not None:
            fused = retilt(fused, self._tilt.dims, self._tilt.factors)
        queries = fused.gaussian
        labels = list(texts) if texts is not None else [None] * len(queries)
        allowed = self._allowed(where)  # a bad filter is refused on an empty collection too
        if group_by_doc and self._snap.doc_ids is None:  # so is grouping whole documents
            raise NotChunkedError(self.collection.name, empty=not self._snap.live)
        if not self._snap.live:
            return [QueryResult(query=t, confidence=None, hits=[]) for t in labels]
        calibrator = self.pipeline.calibrator
        learned = calibrator is not None and calibrator.confidence is not None
        depth = max(k + 1, CONFIDENCE_DEPTH) if learned else k + 1
        search = functools.partial(
            self._ranking, queries, texts, kind, exact, beta, hybrid, group_by_doc
        )
        ranked, lexical, bm25, others = search(depth, allowed, where)
        results = self._results(ranked, labels, k, fused, lexical, bm25)
        if others is not None:
            for result, counts in zip(results, others, strict=True):
                for hit, count in zip(result["hits"], counts, strict=False):
                    cast(GroupedHit, hit)["other_chunks"] = count
        if allowed is not None and calibrator is not None:
            context, context_lexical, context_bm25, _ = search(CONTEXT_DEPTH + 1, None, None)
            _, context_p, _ = self._annotated(
                context, fused, CONTEXT_DEPTH, context_lexical, None, context_bm25
            )
            key = self._document_of if group_by_doc else int  # a grouped hit is its document
            orders = [
                [key(p) for p in seen.positions[: len(values)].tolist()]
                for seen, values in zip(context, context_p, strict=True)
            ]
            past = self._past_context(
                ranked, results, context, orders, fused, key, context_lexical, context_bm25
            )
            positions = self._snap.positions
            for i, (result, values) in enumerate(zip(results, context_p, strict=True)):
                hits = result["hits"]
                keys = [key(positions[h["id"]]) for h in hits]
                _read_unfiltered(hits, keys, orders[i], values, past.get(i, {}))
        if min_p_relevant is not None:
            for result in results:
                result["hits"] = [  # each with a p_relevant: min_p_relevant needs a calibrator
                    h for h in result["hits"] if cast(float, h["p_relevant"]) >= min_p_relevant
                ]
        return results

    def _ranking(
        self,
        queries: Gaussian,
        texts: Sequence[str] | None,
        kind: Score,
        exact: bool,
        beta: float,
        hybrid: bool,
        group_by_doc: bool,
        depth: int,
        allowed: np.ndarray | None,
        where: str | None,
    ) -> tuple[
        list[Ranked],
        np.ndarray | None,
        list[tuple[np.ndarray, np.ndarray]] | None,
        list[list[int]] | None,
    ]:
        """Per query its ranking to `depth` (hybrid, or per document, as asked), with what a
        hybrid search's calibrators read and, grouped, each document's other chunks."""
        pool = self._group_pool(depth) if group_by_doc else depth
        while True:
            lexical = bm25 = None
            if hybrid:
                assert texts is not None
                ranked, lexical, bm25 = self._hybrid(
                    queries, texts, pool, kind, exact, allowed, where, beta
                )
            else:
                ranked = self._rank(queries, pool, kind, exact, allowed, beta)
            if not group_by_doc:
                return ranked, lexical, bm25, None
            grouped, others = self._grouped(ranked, depth)
            # One long document can fill the pool with its chunks: rank deeper until every
            # query has `depth` documents or the pool holds every row.
            if pool >= self._snap.live or all(len(r.positions) >= depth for r in grouped):
                return grouped, lexical, bm25, others
            pool = min(self._snap.live, GROUP_POOL * pool)

    def _past_context(
        self,
        ranked: list[Ranked],
        results: list[QueryResult],
        context: list[Ranked],
        orders: list[list[Hashable]],
        fused: Fused,
        key: Callable[[int], Hashable],
        lexical: np.ndarray | None,
        bm25: Sequence[tuple[np.ndarray, np.ndarray]] | None,
    ) -> dict[int, dict[int, float]]:
        """Per query, by hit index: the p_relevant of each filtered hit the unfiltered ranking
        did not reach, as if it came right after that ranking's last hit (its rank a lower
        bound; its gap to the top and the query's margin the unfiltered ones; its gap to the
        next the filtered list's). Given the last hit's value, every hit of a filter to
        another tenant's rows read the same p, the relevant and the irrelevant alike."""
        lists, owners, places = [], [], []
        for i, (filtered, result) in enumerate(zip(ranked, results, strict=True)):
            reached, depth = set(orders[i]), len(orders[i])
            last = len(filtered.positions) - 1
            for j in range(len(result["hits"])):
                if key(int(filtered.positions[j])) in reached:
                    continue
                pick, seen = [j, min(j + 1, last)], context[i]
                parts = zip(seen, filtered, strict=True)
                lists.append(Ranked(*(np.concatenate([a[:depth], b[pick]]) for a, b in parts)))
                owners.append(i)
                places.append((i, j, depth))
        if not lists:
            return {}
        words = None if lexical is None else lexical[owners]
        found = None if bm25 is None else [bm25[i] for i in owners]
        _, p, _ = self._annotated(lists, fused.rows(owners), CONTEXT_DEPTH + 1, words, None, found)
        past: dict[int, dict[int, float]] = {}
        for (i, j, depth), values in zip(places, p, strict=True):
            past.setdefault(i, {})[j] = cast(float, values[depth])  # calibrated: a number
        return past

    def _document_of(self, position: int) -> Hashable:
        """The document a row belongs to, as grouping counts it (a row with no doc_id is
        one of its own)."""
        doc_ids = self._snap.doc_ids
        doc = None if doc_ids is None else doc_ids[position]
        return ("row", position) if doc is None else doc

    def _group_pool(self, depth: int) -> int:
        """Chunks to rank first so that `depth` documents remain after grouping, most of the
        time (a search ranks deeper when they do not)."""
        return min(self._snap.live, max(GROUP_POOL * depth, 100))

    def _grouped(self, ranked: list[Ranked], depth: int) -> tuple[list[Ranked], list[list[int]]]:
        """Per query, the best chunk of each document (at most `depth`), and how many other
        chunks of that document were among the ranked candidates. A row with no doc_id (written
        without chunking) is a document of its own."""
        assert self._snap.doc_ids is not None
        out, others = [], []
        for hits in ranked:
            docs = [self._document_of(p) for p in hits.positions.tolist()]
            first: dict[object, int] = {}
            for i, doc in enumerate(docs):
                first.setdefault(doc, i)
            keep = np.array(sorted(first.values())[:depth], dtype=np.int64)
            count = Counter(docs)
            out.append(Ranked(*(field[keep] for field in hits)))
            others.append([count[docs[i]] - 1 for i in keep.tolist()])
        return out, others

    @one_at_a_time
    def warm(self, score: Score | str | None = None) -> bool:
        """Load the vectors and build (or load) the graph a search with `score` would use.

        Returns whether a graph is used at all (small collections are scanned instead).
        """
        kind = parse_score(score if score is not None else self.pipeline.score.name)
        self._refresh()
        if self._snap.live < self.settings.scan_below or self._snap.live == 0:  # as search
            return False
        self._graph(ann_space(kind))
        return True

    @property
    def _snap(self) -> Snapshot:
        """The current snapshot (after `_refresh`)."""
        assert self._snapshot is not None
        return self._snapshot

    @one_at_a_time
    def footprint(self) -> dict[str, int]:
        """Bytes search holds: candidate indexes and per-row arrays in memory, rows mapped."""
        self._refresh()
        snap = self._snap
        return {
            "index": sum(g.bytes for g in self._graphs.values()),
            "rows": snap.resident_bytes(),
            "mapped": snap.mapped_bytes(),
        }

    def _refresh(self) -> None:
        """Bring the rows to the collection's version: extend the graphs, or drop them.

        Added rows extend each graph in place; deleted ones are masked at search time. A
        snapshot loaded afresh (too many dead rows), a new collection adaptation, or too
        many rows outside a graph's radius make the graphs be built again.
        """
        previous = self._snapshot
        current = (
            previous is not None
            and previous.version == self.collection.version
            and previous.created == self.collection.created
        )
        read_due = time.monotonic() - self._agreement_read >= AGREEMENT_RECHECK_S
        if current and not self._agreement_moved and not read_due:
            return
        self._agreement_moved = False
        self._agreement_read = time.monotonic()
        adapted = self.pipeline.adapted(self.collection.agreement())
        tilt = None if adapted is None else Tilt(tuple(self._dims), adapted[1])
        unchanged = same_tilt(tilt, self._tilt)
        self._tilt = tilt
        if current and unchanged:
            return
        try:
            self._move(previous, tilt, unchanged)
        except BaseException:
            self.close()  # rows read half way would pass for current: the next search loads anew
            raise

    def _move(self, previous: Snapshot | None, tilt: Tilt | None, unchanged: bool) -> None:
        """Load the snapshot afresh (none yet, or a new tilt), or move it to the new version."""
        if previous is None or not unchanged:
            if previous is not None:
                previous.close()
            self._snapshot = Snapshot.load(self.collection, tilt)
            self._graphs = {}
            return
        self._snapshot = previous.refreshed(self.collection)
        if self._snapshot is not previous:
            self._graphs = {}
            return
        added = self._snapshot.added
        for space, graph in list(self._graphs.items()):
            for start in range(0, len(added), SCAN_BLOCK):
                block = added[start : start + SCAN_BLOCK]
                graph.add(ann_vectors(self._gaussian(block), space, "doc"))
            if isinstance(graph, HnswIndex) and graph.overflow > OVERFLOW_FRACTION * len(graph):
                del self._graphs[space]

    def _gaussian(self, positions: np.ndarray) -> Gaussian:
        """Rows by position as the Gaussians search scores (the `Rows` of the ranking)."""
        return self._snap.gaussian(positions)

    def _mean_rows(self, positions: np.ndarray) -> np.ndarray:
        """Rows' float32 means, as search scores them (the snapshot holds them adapted)."""
        return self._snap.means[positions]

    def _allowed(self, where: str | None) -> np.ndarray | None:
        """Live row positions a filter keeps, or None for no filter."""
        if where is None:
            return None
        positions = self._snap.positions
        ids = self.collection.matching_ids(where)
        rows = sorted(positions[i] for i in ids if i in positions)
        return np.array(rows, dtype=np.int64)

    def _rank(
        self,
        queries: Gaussian,
        k: int,
        kind: Score,
        exact: bool,
        allowed: np.ndarray | None,
        beta: float,
    ) -> list[Ranked]:
        """Per query, the k best rows: an exact scan when small or asked, else graph + rescore."""
        snap = self._snap
        count = snap.live if allowed is None else len(allowed)  # no pass over every row
        if exact or count < self.settings.scan_below or count == 0:
            rows = np.flatnonzero(snap.alive) if allowed is None else allowed
            return scan(queries, self._gaussian, rows, k, kind, beta, self._snap.means)
        space = ann_space(kind)
        pool = min(self.settings.candidates(k, kind), count)
        vectors = ann_vectors(queries, space, "query")
        mask, ef = None, self.settings.ef_search
        if allowed is not None:
            mask = np.isin(np.arange(len(snap)), allowed)
            # the beam meets fewer rows the filter keeps: widen it (recall@10 on 8,000 rows
            # with a 2% filter: 0.89 at 256, 0.99 at 1,024 and above)
            ef = round(ef * min(math.sqrt(snap.live / count), FILTER_BEAM_GROWTH))
        elif snap.live < len(snap):
            mask = snap.alive
        found = self._graph(space).search(vectors, pool, ef, mask)
        return rescore(queries, self._gaussian, found, k, kind, beta, self._snap.means)

    def _graph(self, space: str) -> HnswIndex | FlatIndex:
        """The candidate index of a space: in memory, else on disk for this version, else built."""
        if space in self._graphs:
            return self._graphs[space]
        snap = self._snap
        path = _graph_path(self.collection, space, snap, self.settings, self._tilt)
        fresh = bool(snap.alive.all())  # no dead positions: another process can have these
        graph: HnswIndex | FlatIndex | None = None
        if fresh and space not in FLAT_SPACES and path.is_file():
            graph = HnswIndex.load(path)
            graph = graph if graph is not None and len(graph) == len(snap) else None
        if graph is None:
            graph = self._build(space)
            if fresh and isinstance(graph, HnswIndex):
                _save_graph(graph, path)
        self._graphs[space] = graph
        return graph

    def _build(self, space: str) -> HnswIndex | FlatIndex:
        """A new candidate index over every position, streamed a block at a time."""
        n = len(self._snap)
        blocks = [np.arange(s, min(s + SCAN_BLOCK, n)) for s in range(0, n, SCAN_BLOCK)]
        if space in FLAT_SPACES:
            flat = FlatIndex(len(ann_vectors(self._gaussian(blocks[0][:1]), space, "doc")[0]))
            for block in blocks:
                flat.add(ann_vectors(self._gaussian(block), space, "doc"))
            return flat
        total, count, radius_sq = None, 0, 0.0
        for block in blocks:  # first pass: the centre
            rows = ann_vectors(self._gaussian(block), space, "doc").astype(np.float64)
            total = rows.sum(axis=0) if total is None else total + rows.sum(axis=0)
            count += len(rows)
        centre = cast(np.ndarray, total) / count  # at least one block
        for block in blocks:  # second pass: the radius
            rows = ann_vectors(self._gaussian(block), space, "doc").astype(np.float64) - centre
            radius_sq = max(radius_sq, float(np.einsum("nd,nd->n", rows, rows).max()))
        if space == MEAN_SPACE:  # fused means have norm <= 1: no later row can overflow
            radius_sq = max(radius_sq, (1.0 + float(np.linalg.norm(centre))) ** 2)
        graph = HnswIndex.create(centre, radius_sq, self.settings)
        for block in blocks:
            graph.add(ann_vectors(self._gaussian(block), space, "doc"), self.settings.build_threads)
        vectors = (ann_vectors(self._gaussian(block), space, "doc") for block in blocks)
        return graph.compressed(self.settings.codec, vectors)

    def _hybrid(
        self,
        queries: Gaussian,
        texts: Sequence[str],
        k: int,
        kind: Score,
        exact: bool,
        allowed: np.ndarray | None,
        where: str | None,
        beta: float,
    ) -> tuple[list[Ranked], np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
        """Reciprocal-rank fusion of the probabilistic ranking and BM25, k best kept; with each
        query's `lexical_features` (what BM25 says of it, for the query confidence) and BM25's
        own hits (positions and scores, for the hybrid calibrator's hit features)."""
        depth = hybrid_depth(k)
        dense = self._rank(queries, depth, kind, exact, allowed, beta)
        known = self._snap.positions
        fused, lexical, lists = [], [], []
        for row, (ranked, text) in enumerate(zip(dense, texts, strict=True)):
            bm25 = [(known.get(i), s) for i, s in self.collection.text_search(text, depth, where)]
            h = hybrid_ranked(ranked.positions, bm25, k)
            lexical.append(h.lexical)
            lists.append((h.bm25_positions, h.bm25_scores))
            fused += with_moments(queries[row], self._gaussian, h.positions[None], h.scores[None])
        words = np.stack(lexical) if lexical else np.zeros((0, len(LEXICAL_FEATURES)))
        return fused, words, lists

    @property
    def _dims(self) -> list[int]:
        """Each member's dimension: the block layout of the concat-fused rows."""
        return list(self.pipeline.blocks)

    def _validate_min_p(self, min_p_relevant: float | None) -> None:
        """A threshold is a probability, and needs a pipeline that computes p_relevant."""
        if min_p_relevant is None:
            return
        _validate_threshold(min_p_relevant)
        if self.pipeline.calibrator is None:
            raise StoreError(
                f"min_p_relevant needs p_relevant, but pipeline {self.pipeline.name!r} has no "
                "relevance calibrator (calibration.json); search without min_p_relevant"
            )

    @property
    def _reads_coverage(self) -> bool:
        """Whether the pipeline's query confidence reads the hits' texts (either extra model)."""
        calibrator = self.pipeline.calibrator
        confidence = None if calibrator is None else calibrator.confidence
        return confidence is not None and (
            confidence.text_model is not None or confidence.hybrid_model is not None
        )

    def _annotated(
        self,
        ranked: list[Ranked],
        fused: Fused,
        k: int,
        lexical: np.ndarray | None = None,
        coverage: np.ndarray | None = None,
        bm25: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> tuple[list[Ranked], list[list[float | None]], list[float | None]]:
        """Per query: its hits with the members' spread added to their variances (law of total
        variance; concat only), the first k hits' p_relevant (None without a calibrator) and
        its confidence (the calibrator's learned one if it has one, else the outrank one; a
        hybrid search's reads its `lexical` features too, a dense one the `coverage` of its
        hits' texts, where the calibrator has that model). A hybrid search (`bm25`: BM25's
        hits per query) reads p_relevant from the calibrator's hybrid one where it has one,
        with each hit's BM25 rank and score.

        Queries ranked to the same depth (all of them, but for filters and tiny collections)
        are computed together, so a batch of queries costs a few array operations.
        """
        calibrator = self.pipeline.calibrator
        per_hit = None if calibrator is None else calibrator.for_search(hybrid=bm25 is not None)
        spread = carries_disagreement(self._dims)
        learned = calibrator is not None and calibrator.confidence is not None
        wants_cosines = spread or learned or (per_hit is not None and per_hit.uses_disagreement)
        out = list(ranked)
        p_relevant: list[list[float | None]] = [[] for _ in ranked]
        confidences: list[float | None] = [None] * len(ranked)
        for depth, rows in _by_depth(ranked).items():
            if depth == 0:
                continue
            positions = np.stack([ranked[i].positions for i in rows])
            dots = np.stack([ranked[i].dots for i in rows])
            variances = np.stack([ranked[i].variances for i in rows])
            cosines = None
            if wants_cosines:
                unique, local = np.unique(positions, return_inverse=True)
                means, weights = self._mean_rows(unique), self._snap.fusion_weights(unique)
                local = local.reshape(positions.shape)
                q_mean, q_weights = fused.gaussian.mean[rows], fused.weights[rows]
                cosines = member_cosines(q_mean, q_weights, means, weights, self._dims, local)
                variances = hit_variance(
                    variances, q_mean, q_weights, means, weights, self._dims, local, cosines
                )
            query_confidence = cast(np.ndarray, confidence(dots, variances))  # (nq, n): an array
            if per_hit is None:
                hit_p = np.full((len(rows), min(k, depth)), None, dtype=object)
            else:
                found = None
                if per_hit.uses_bm25 and bm25 is not None:
                    found = np.stack(
                        [bm25_hit_features(ranked[i].positions, *bm25[i]) for i in rows]
                    )
                hit_p = per_hit.predict_ranked(dots, variances, k, cosines, found)
                if learned and depth >= 2:
                    assert calibrator is not None and calibrator.confidence is not None
                    assert cosines is not None
                    words = None if lexical is None else lexical[rows]
                    shares = None if coverage is None else coverage[rows]
                    query_confidence = calibrator.confidence.predict(dots, cosines, words, shares)
            for j, i in enumerate(rows):
                out[i] = ranked[i]._replace(variances=variances[j])
                p_relevant[i] = hit_p[j].tolist()
                value = float(query_confidence[j])
                confidences[i] = None if math.isnan(value) else value  # one hit: no rival
        return out, p_relevant, confidences

    def _results(
        self,
        ranked: list[Ranked],
        texts: Sequence[str | None],
        k: int,
        fused: Fused,
        lexical: np.ndarray | None = None,
        bm25: Sequence[tuple[np.ndarray, np.ndarray]] | None = None,
    ) -> list[QueryResult]:
        """Per ranking its k best hits (std, weights, p_relevant, text) and its confidence;
        `lexical` and `bm25` as `_annotated` reads them, for a hybrid search."""
        snap, models = self._snap, fused.models
        ids = snap.ids
        hit_rows = np.unique(np.concatenate([r.positions[:k] for r in ranked]))
        rows = dict(zip(ids[hit_rows].tolist(), snap.hit_rows(hit_rows), strict=True))
        coverage = None
        if None not in texts and self._reads_coverage:
            coverage = np.stack(
                [
                    coverage_features(
                        cast(str, t),
                        [h["text"] or "" for h in snap.hit_rows(r.positions[:COVERAGE_HITS])],
                    )
                    for t, r in zip(texts, ranked, strict=True)
                ]
            )
        ranked, p_relevant, confidences = self._annotated(ranked, fused, k, lexical, coverage, bm25)
        out = []
        for text, hit_ranked, hit_p, query_confidence in zip(
            texts, ranked, p_relevant, confidences, strict=True
        ):
            kept = hit_ranked.positions[:k]
            columns = (
                [ids[p] for p in kept.tolist()],
                hit_ranked.scores[:k].tolist(),
                np.sqrt(hit_ranked.variances[:k]).tolist(),
                decimals(self._snap.fusion_weights(kept)),
                hit_p,
            )
            hits = [
                _hit(doc_id, value, std, models, w, p, rows.get(doc_id, {}))
                for doc_id, value, std, w, p in zip(*columns, strict=True)
            ]
            out.append(QueryResult(query=text, confidence=query_confidence, hits=hits))
        return out


def _by_depth(ranked: Sequence[Ranked]) -> dict[int, list[int]]:
    """Query indices grouped by how many hits each was ranked to."""
    groups: dict[int, list[int]] = {}
    for i, hits in enumerate(ranked):
        groups.setdefault(len(hits.positions), []).append(i)
    return groups


def _validate_queries(queries: Sequence[str]) -> list[str]:
    """A non-empty list of non-blank strings that UTF-8 can hold (a lone surrogate was
    refused by the encoders as `texts[0]`, a name the caller never gave)."""
    if isinstance(queries, (bytes, bytearray)):  # a Sequence: it was read as integers
        raise StoreError(f"queries are bytes ({queries!r:.40}): decode them to str first")
    if isinstance(queries, str) or not isinstance(queries, Sequence) or not queries:
        raise StoreError(f"queries must be a non-empty list of strings, got {queries!r:.60}")
    for i, q in enumerate(queries):
        if not isinstance(q, str):
            raise StoreError(f"queries[{i}] is not a string: {q!r:.60}")
        if not q.strip():
            raise StoreError(f"queries[{i}] ({q!r:.40}) is blank: there is nothing to search for")
        surrogate = lone_surrogate(q)
        if surrogate is not None:
            raise StoreError(f"queries[{i}] is not valid Unicode: it holds {surrogate}")
    return list(queries)


class QueryCutWarning(UserWarning):
    """A query longer than the collection's models read: searched, but its vector is of its
    start alone (a hybrid search's BM25 reads all of it).

    Its message is one per pipeline (and search kind), whatever the queries, so Python's
    default filter shows it once per line of code (a RAG loop's every query was a message of
    its own); which queries, in `positions` (in the list searched), their `characters` and
    the `limit` (the fewest tokens any member reads) are attributes.
    """

    def __init__(
        self, message: str, positions: list[int], characters: list[int], limit: int
    ) -> None:
        super().__init__(message)
        self.positions = positions
        self.characters = characters
        self.limit = limit

    def cut_at_tokens(self, queries: int) -> list[int | None]:
        """Per query of the `queries` searched, the tokens read of it where it was cut, else
        None: the service's `cut_at_tokens`, for a front door that has the warning alone."""
        cut = set(self.positions)
        return [self.limit if i in cut else None for i in range(queries)]


def cut_at(pipeline: Pipeline, queries: Sequence[str]) -> list[int | None]:
    """Per query longer than some member reads (`Pipeline.cut`, by which ingest and eval
    count the documents they cut), the fewest tokens any member reads (the pipeline's
    `max_tokens`), else None: the service's `cut_at_tokens`, and what `warn_cut` tells."""
    return [pipeline.max_tokens if cut else None for cut in pipeline.cut(queries).tolist()]


def warn_cut(pipeline: Pipeline, queries: Sequence[str], hybrid: bool) -> None:
    """Warn at the user's line of queries longer than the models read: they are searched, not
    refused, so their dense hits answered only their start without a word (a hybrid search's
    BM25 half reads the whole query)."""
    cut = [i for i, at in enumerate(cut_at(pipeline, queries)) if at is not None]
    if not cut:
        return
    limit = cast(int, pipeline.max_tokens)  # set: a query was cut at it
    answer = (
        "dense hits answer that start while BM25 reads all of it"
        if hybrid
        else ("hits answer that start")
    )
    told = QueryCutWarning(
        f"a query is longer than pipeline {pipeline.name!r} reads: its models read only its "
        f"start (the first {limit} tokens, the fewest any member reads), so its {answer}; put "
        "what to find in fewer words",
        positions=cut,
        characters=[len(queries[i]) for i in cut],
        limit=limit,
    )
    warn_caller(told)


def check_arguments(
    queries: Sequence[str],
    k: int,
    score: Score | str | None,
    min_p_relevant: float | None,
    options: tuple[str | None, bool, bool, bool] = (None, False, False, False),
) -> None:
    """Refuse what a search can refuse before its pipeline is loaded (seconds for a
    built-in): the queries, k, the score's name, the threshold's range, and the `options`
    (where, exact, hybrid, group_by_doc) by their types."""
    _validate_queries(queries)
    _validate_k(k)
    _validate_options(*options)
    if score is not None:
        try:
            parse_score(score)
        except ValueError as exc:
            raise StoreError(str(exc)) from None
    if min_p_relevant is not None:
        _validate_threshold(min_p_relevant)


def _validate_options(where: str | None, exact: bool, hybrid: bool, group_by_doc: bool) -> None:
    """A filter is SQL text and each switch a bool: `where=5` failed as "'int' object has no
    attribute 'strip'", and `hybrid="no"` ran a hybrid search."""
    if where is not None and not isinstance(where, str):
        raise StoreError(f"where must be a filter (an SQL condition, a str) or None, got {where!r}")
    switches = {"exact": exact, "hybrid": hybrid, "group_by_doc": group_by_doc}
    for name, value in switches.items():
        if not isinstance(value, (bool, np.bool_)):
            raise StoreError(f"{name} must be True or False, got {value!r}")


def _validate_threshold(min_p_relevant: float) -> None:
    """A threshold is a probability (a numpy number too, as k may be one)."""
    number = (int, float, np.integer, np.floating)
    if isinstance(min_p_relevant, bool) or not isinstance(min_p_relevant, number):
        raise StoreError(f"min_p_relevant must be a number in [0, 1], got {min_p_relevant!r}")
    if not 0.0 <= min_p_relevant <= 1.0:
        raise StoreError(f"min_p_relevant must be in [0, 1], got {min_p_relevant!r}")


def _validate_k(k: int) -> None:
    """k must be a positive integer."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k <= 0:
        raise StoreError(f"k must be a positive integer (number of hits), got {k!r}")
