"""The members' agreement on a collection's texts, measured from its stored rows and kept
beside its pipeline copy (`agreement.json`), with what it was measured on: the creation, the
version, the count and the last row id, so a write tells whether enough changed to measure
again (`agreement_due`). Label-free (`probembed.fusion.adapt`); a search tilts the prior by it.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow.compute as pc

from probembed.fusion import Fused
from probembed.fusion.adapt import NEIGHBOURS, agreement, members_of, sampled
from probembed.gaussian import Gaussian
from probembed.store.errors import StoreStateError
from probembed.store.reads import CollectionReads
from probembed.store.rows import to_matrix

if TYPE_CHECKING:
    from probembed.pipeline import Pipeline

#: The members' agreement on the collection's texts, beside the pipeline copy.
AGREEMENT_FILE = "agreement.json"

#: Agreement is measured again once more than this fraction of the rows was replaced.
REMEASURE_FRACTION = 0.1


class CollectionAgreement(CollectionReads):
    """The members' agreement a collection keeps, so a search tilts its prior without
    encoding the corpus again."""

    @property
    def agreement_file(self) -> Path | str:
        """Where the members' agreement on this collection's texts is kept (a path or a URI)."""
        return self.db.location.name(self.name, AGREEMENT_FILE)

    def record_agreement(self, pipeline: Pipeline) -> np.ndarray | None:
        """Measure how far each member agrees with the others on this corpus, and keep it.

        Label-free (probembed.fusion.adapt): read back from the stored fused rows, so it needs
        no re-encoding; `ingest` calls it after writing. None (and nothing kept) for one member
        or too few rows to compare neighbour lists.
        """
        self.db.require_writable()
        models = self.pipeline.models
        if len(models) < 2 or not pipeline.blocks:  # no member to read back out of the rows
            return None
        version, _, listing = self.listing()
        if len(listing) <= NEIGHBOURS:
            return None
        ids = np.asarray(listing.column("id").to_pylist(), dtype=object)
        order = np.argsort(ids.astype(str), kind="stable")  # storage order must not matter
        rows = listing.column("_rowid").to_numpy()[order[sampled(len(ids))]]
        data = self.take(rows, ["mean", self.variance_column, "weights"], version)
        mean, weights = to_matrix(data.column("mean")), to_matrix(data.column("weights"))
        stored = Gaussian(mean, self.decode_variances(to_matrix(data.column(self.variance_column))))
        value = agreement(members_of(Fused(stored, weights, models), pipeline.blocks))
        adapted = pipeline.adapted(value)
        record = {
            "created": self.created,
            "version": version,
            "count": len(ids),
            "last_rowid": int(pc.max(listing.column("_rowid")).as_py()),
            "models": list(models),
            "agreement": value.tolist(),
            "gamma": pipeline.adapt.gamma,
            "weights": None if adapted is None else adapted[0].tolist(),
        }
        self.db.location.write_bytes(self.name, AGREEMENT_FILE, json.dumps(record).encode())
        if self._searcher is not None:
            self._searcher.agreement_moved()
        return value

    def agreement_due(self) -> bool:
        """Whether enough of the corpus changed since the last measurement to measure again.

        Agreement is a property of the corpus: a write of a few documents to a large
        collection barely moves it, and measuring reads a sample of every stored row. Rows
        written since (appended or upserted: LanceDB numbers them above every row listed then)
        and rows gone (the count tells the rest) are what changed; an upsert writes each row
        anew and removes the old one, so the larger of the two is how much was replaced. A
        size check alone missed an upsert that replaced every text. A compaction renumbers
        rows, so it counts as a change once. Never due where there is nothing to measure (one
        member, too few rows to compare neighbour lists).
        """
        if len(self.pipeline.models) < 2 or self.count() <= NEIGHBOURS:
            return False
        record = self._agreement_record()
        if record is None or "last_rowid" not in record:
            return True
        then = int(record["count"])
        _, now, written = self.listing(int(record["last_rowid"]))
        changed = max(len(written), abs(then + len(written) - now))
        return changed > REMEASURE_FRACTION * max(then, 1)

    def agreement(self) -> np.ndarray | None:
        """The members' agreement last measured on this collection, or None if never."""
        record = self._agreement_record()
        return None if record is None else np.asarray(record["agreement"], dtype=np.float64)

    def _agreement_record(self) -> dict[str, Any] | None:
        """The kept agreement record if it is this collection's (its creation, its models)."""
        try:
            data = self.db.location.read_bytes(self.name, AGREEMENT_FILE)
        except OSError as exc:
            raise StoreStateError(f"{self.agreement_file} is unreadable: {exc}") from exc
        if data is None:
            return None
        try:
            record = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            record = None
        if not isinstance(record, dict) or "agreement" not in record:
            # derived from the rows, so never worth failing every read and write of the
            # collection for: taken as never measured, and the next write measures it again
            warnings.warn(
                f"{self.agreement_file} is not an agreement record; it will be measured again",
                stacklevel=2,
            )
            return None
        # left by an earlier collection of this name (a drop killed before it removed the file,
        # a table deleted by hand): not this one's, so never measured, not an error for good
        if record.get("created", self.created) != self.created:
            return None
        if record.get("models") != list(self.pipeline.models):
            return None
        return record
