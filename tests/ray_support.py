"""What the Ray workers of test_ray_ingest run besides probembed: each hash encoder of a worker
tells a named actor the texts it encodes, so a test can count what the actors encoded.

`counting` makes Ray ingest's actor class run `count_encoded_texts` in each actor before it
loads its pipeline; this module is pickled by value, since the workers do not have the tests
folder on their path. (It was the job's worker setup hook, `runtime_env`: a job with a
runtime_env gets no prestarted workers, so each actor waited for a Python process of its own,
about a second.) The same patch lets a test end a worker (`exit_once_at`) or fail a batch
(`FAILING`), and tells which libraries the encoding worker had loaded (`loaded_by_encoders`).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import ray

#: The name of the actor that holds the texts the workers encoded.
COUNTER = "encoded-texts"
#: Libraries an encoding worker has no use for: whether each was loaded is recorded per call.
UNUSED = ("lancedb", "fastapi")
#: A text a worker's hash encoder refuses: its batch fails on Ray.
FAILING = "a text the Ray workers of the tests refuse to encode"


@ray.remote(num_cpus=0)
class EncodedTexts:
    """The (encoder dim, text) of every text a worker's hash encoder encoded, in order."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []
        self.loaded: set[str] = set()
        self.exit_at: str | None = None

    def add(self, dim: int, texts: list[str], loaded: list[str]) -> bool:
        """Record one encoder call's texts and the UNUSED libraries its worker had loaded;
        whether its worker is to exit (`exit_once_at`)."""
        self.seen.extend((dim, t) for t in texts)
        self.loaded.update(loaded)
        if self.exit_at in texts:
            self.exit_at = None
            return True
        return False

    def exit_once_at(self, text: str) -> None:
        """The next worker to encode `text` exits first, once: Ray retries its batch."""
        self.exit_at = text

    def take(self) -> list[tuple[int, str]]:
        """What was recorded since the last take, which starts afresh."""
        seen, self.seen = self.seen, []
        return seen

    def loaded_by_encoders(self) -> set[str]:
        """The UNUSED libraries loaded in a worker when it encoded, since the last call."""
        loaded, self.loaded = self.loaded, set()
        return loaded


def counting(embedder: type) -> type:
    """`embedder` (the actor class of Ray ingest) whose actors count what they encode: each
    runs `count_encoded_texts` in its worker before it loads the pipeline."""

    class Counting(embedder):
        def __init__(self, *args: object, **kwargs: object) -> None:
            count_encoded_texts()
            super().__init__(*args, **kwargs)

    return Counting


def count_encoded_texts() -> None:
    """Make the worker's hash encoders report each call's texts to COUNTER before encoding,
    and wait for it to have them: a test that reads the counter after a run sees them all."""
    from probembed.encoders.hashing import HashingEncoder

    encode = HashingEncoder._encode_batch

    def counted(self: HashingEncoder, texts: list[str]) -> np.ndarray:
        loaded = [name for name in UNUSED if name in sys.modules]
        if ray.get(ray.get_actor(COUNTER).add.remote(self.dim, texts, loaded)):
            os._exit(1)
        if FAILING in texts:
            raise RuntimeError("this worker refuses to encode ray_support.FAILING")
        return encode(self, texts)

    HashingEncoder._encode_batch = counted
