"""Chunked documents against truncation on SciFact, and what chunked ingest costs.

    python benchmarks/chunking.py [--part quality|throughput|chars|memory|fences|list-fences|all]

quality: SciFact test, the default pipeline; every document embedded whole (each member cuts
it at its token limit) against every document cut into chunks that every member reads whole
(`probembed.chunking`, 256 tokens, 32 overlap) and scored by its best chunk; nDCG@10 under
`uec` and `dot`, side by side from the same pipeline.
throughput: chunked ingest (`ingest_documents`) of the first 300 SciFact documents into a
fresh collection with an uncached pipeline: chunks per second end to end (chunking, encoding,
LanceDB commits), chunking alone, and bytes per stored chunk.
chars: what the character cap (`chunking.CHARS_PER_TOKEN`) rests on. For every run of words
that holds N tokens (the longest from each word on, as chunking packs them), its characters
over N, counted by `retrieval`'s tokenizers (every built-in pipeline has WordPiece members)
and by a word count alone (the `hash` pipeline), on English and European text: SciFact, the
bundled Python docs, and Vim's tutor in each European language (where Vim is installed).
memory: peak RSS while `ingest_documents` (the hashing pipeline of the tests, 256-token
chunks) ingests a 20 MB file read as a stream, each in a fresh interpreter (Linux: it reads
/proc): French, unspaced Chinese (sentences ending in 。) and unspaced Chinese with no full
stop on one line against the same sentences eight to a paragraph, side by side. Run it from
an older checkout for that code's figures.
fences (not in all: it needs --before): Markdown fenced code blocks that fit a chunk but are
split across two, and chunk counts, with `retrieval`'s tokenizers at 128 and 256 tokens
(default overlaps), chunked by this checkout and by the one `--before` names (a `git
worktree` of an older commit), each in a fresh interpreter: the repository's README.md and
docs/*.md as the --before checkout holds them, the Markdown under the datasets folder, and
the Markdown files the installed packages ship (site-packages). A block is its fence lines
and what is between (`Section.code`, as this checkout finds them); it fits when the
pipeline counts it within the size and it is within the character cap; it is split when a
chunk starts or ends strictly inside it (an indented fence's spaces and an unclosed one's
trailing blank lines aside). Also whether the same files read as plain text give the same
chunks in both.
list-fences (not in all: it needs --before): the fenced blocks this checkout finds in list
items and quotes (`- ```sh`, `> ```py`, a fence four spaces into a nested item: a block whose
opening line is no fence at a line's start), over the same three corpora, against the
`--before` checkout: how many there are, how many of their lines (`# comment`s) each code
reads as headings, how many of those that fit a chunk are split (as in fences), at 128 and
256 tokens; and whether every file without such a block gets the same Markdown chunks.
`--markdown FOLDER` adds the *.md files under a folder as one more corpus (repeatable).
Writes (and merges into) benchmarks/results/chunking.json.
"""

from __future__ import annotations

import argparse
import glob
import itertools
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from probembed.chunking import ChunkSettings
from probembed.evaluation.chunked import chunk_corpus, chunked_vs_truncated
from probembed.evaluation.datasets import load_retrieval
from probembed.paths import datasets_dir
from probembed.pipeline import Pipeline
from probembed.store import Database, Problem, Record, ingest_documents, read_records

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "chunking.json"
SCIFACT = datasets_dir() / "retrieval" / "scifact"
THROUGHPUT_DOCS = 300
#: Chunk sizes (tokens) the chars part measures at: the smallest allowed up to the default.
SIZES = (8, 16, 32, 64, 128, 256)
#: Vim's tutors not in a European language.
NOT_EUROPEAN = {"ja", "ko", "zh", "zh_cn", "zh_tw", "vi"}
#: Bytes of each file the memory part ingests, and their languages (`sample_text`).
MEMORY_BYTES = 20 * 10**6
LANGUAGES = ("fr", "zh", "zh-unstopped")


def quality() -> list[dict]:
    """nDCG@10 truncated vs chunked, under uec and dot."""
    pipeline = Pipeline.load("default")
    dataset = load_retrieval(SCIFACT, "test")
    return chunked_vs_truncated(pipeline, dataset, ChunkSettings(), ["uec", "dot"])


def first_records(n: int) -> list[Record]:
    """The first n SciFact documents; a line that is no document stops the benchmark rather
    than shrink its corpus."""
    records = []
    for item in itertools.islice(read_records(SCIFACT), n):
        if isinstance(item, Problem):
            raise SystemExit(str(item))
        records.append(item)
    return records


def throughput() -> dict:
    """Chunks/s of chunked ingest end to end and of chunking alone; bytes per chunk."""
    pipeline = Pipeline.load("default", cache=False)
    records = first_records(THROUGHPUT_DOCS)
    corpus = {r.id: r.text for r in records}
    started = time.perf_counter()
    chunked = chunk_corpus(corpus, pipeline, ChunkSettings())
    chunking = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        collection = Database(Path(tmp) / "db", create=True).collection("scifact")
        jsonl = Path(tmp) / "docs.jsonl"
        jsonl.write_text("".join(json.dumps({"id": r.id, "text": r.text}) + "\n" for r in records))
        started = time.perf_counter()
        report = ingest_documents(jsonl, collection, pipeline, ChunkSettings(), progress=True)
        seconds = time.perf_counter() - started
        stats = collection.stats()
    assert stats.bytes_per_item is not None  # None only for an empty collection
    return {
        "docs": len(records),
        "chunks": report.chunks_written,
        "chunks_per_s": round(report.chunks_written / seconds, 1),
        "chunking_only_chunks_per_s": round(len(chunked.texts) / chunking, 1),
        "bytes_per_chunk": round(stats.bytes_per_item, 1),
        "dim": stats.dim,
    }


def european_texts() -> dict[str, list[str]]:
    """The texts the chars part reads, by source: SciFact's abstracts (title and text), the
    Python docs' topics, and Vim's tutor in each European language it has."""
    import pydoc_data.topics

    records = first_records(10**9)  # every SciFact document
    tutors = [Path(p) for p in sorted(glob.glob("/usr/share/vim/vim*/tutor/tutor*.utf-8"))]
    tutors = [p for p in tutors if p.name.split(".")[-2] not in NOT_EUROPEAN]  # tutor.de.utf-8
    return {
        "scifact": [r.text for r in records],
        "pydoc": list(pydoc_data.topics.topics.values()),
        "vim-tutors": [path.read_text(encoding="utf-8") for path in tutors],
    }


def word_costs(texts: list[str], counters: Sequence[Callable]) -> list[tuple]:
    """Per text, its words' (start, end) offsets and per counter each word's tokens without
    the special tokens (chunking's `_costs`: counts add up over white space joins)."""
    found = [[m.span() for m in re.finditer(r"\S+", t)] for t in texts]
    vocabulary = sorted({t[s:e] for t, spans in zip(texts, found, strict=True) for s, e in spans})
    place = {w: i for i, w in enumerate(vocabulary)}
    tables = []
    for count in counters:
        overhead = int(count([""])[0])
        costs = [
            max(int(n) - overhead, 1)
            for k in range(0, len(vocabulary), 4096)
            for n in count(vocabulary[k : k + 4096])
        ]
        tables.append((np.array(costs, dtype=np.int64), overhead))
    out = []
    for text, spans in zip(texts, found, strict=True):
        ids = np.array([place[text[s:e]] for s, e in spans], dtype=np.int64)
        out.append(
            (np.array(spans, dtype=np.int64).reshape(-1, 2), [(c[ids], o) for c, o in tables])
        )
    return out


def chars_per_token(words: list[tuple], size: int) -> np.ndarray:
    """For each word, the characters of the longest run of words from it that every counter
    fits in `size` tokens (with its special tokens), over `size`."""
    ratios = []
    for spans, per_counter in words:
        if not len(spans):
            continue
        last = np.full(len(spans), len(spans))
        for costs, overhead in per_counter:
            total = np.concatenate([[0], np.cumsum(costs)])
            fits = np.searchsorted(total, total[:-1] + size - overhead, side="right") - 1
            last = np.minimum(last, fits)
        first = np.arange(len(spans))
        ok = last > first
        ratios.append((spans[last[ok] - 1, 1] - spans[first[ok], 0]) / size)
    return np.concatenate(ratios)


def chars() -> dict:
    """Characters per token of the size of runs of words, by source, counter and size."""
    from probembed.chunking import CHARS_PER_TOKEN  # here: the memory part runs on older code

    retrieval = Pipeline.load("retrieval", cache=False)
    counters = {
        "retrieval": [m.encoder.count_tokens for m in retrieval.members],
        "words": [lambda texts: [len(t.split()) for t in texts]],
    }
    rows = []
    for source, texts in european_texts().items():
        for name, counting in counters.items():
            words = word_costs(texts, counting)
            for size in SIZES:
                ratio = chars_per_token(words, size)
                rows.append(
                    {
                        "source": source,
                        "documents": len(texts),
                        "counter": name,
                        "tokens": size,
                        "max": round(float(ratio.max()), 2),
                        "p99.99": round(float(np.quantile(ratio, 0.9999)), 2),
                        "median": round(float(np.median(ratio)), 2),
                    }
                )
                print(rows[-1], flush=True)
    return {"rows": rows, "chars_per_token": CHARS_PER_TOKEN}


#: Run in a fresh interpreter: the pipeline loaded, its peak RSS reset (`clear_refs`; the
#: child's ru_maxrss starts at its parent's, kept across exec), then one file ingested as a
#: stream; the peak while it ingests.
MEASURE = """
import json, pathlib, sys, time
from probembed.pipeline import Pipeline
from probembed.store import Database, ingest_documents
def peak():
    status = pathlib.Path("/proc/self/status").read_text().split("VmHWM:")[1]
    return int(status.split()[0]) * 1024
pipeline = Pipeline.load(sys.argv[1], cache=False)
collection = Database(sys.argv[2], create=True).collection("large")
loaded = peak()
pathlib.Path("/proc/self/clear_refs").write_text("5")
started = time.perf_counter()
report = ingest_documents(sys.argv[3], collection, pipeline)
print(json.dumps({"loaded": loaded, "peak": peak(), "seconds": time.perf_counter() - started,
                  "chunks": report.chunks_written, "problems": [str(p) for p in report.problems]}))
"""


def sample_text(language: str, paragraphs: bool) -> str:
    """MEMORY_BYTES or so of seeded sentences, on one line or eight to a paragraph: French,
    Chinese, or Chinese with no full stops (`zh-unstopped`: one word to a word count)."""
    rng = random.Random(0)
    if language == "fr":
        nouns = ["le café", "la gare", "l'été", "un élève", "la rivière", "le marché", "une forêt"]
        verbs = ["ouvre", "ferme", "traverse", "décrit", "répare", "attend", "préfère"]
        end, join = ".", " "
    else:
        nouns = ["东京", "北京的火车站", "一条河流", "这位学生", "市场", "森林里的小屋", "天气"]
        verbs = ["打开了", "关闭了", "穿过", "描述了", "修理了", "等待着", "喜欢"]
        end, join = ("。" if language == "zh" else ""), ""
    parts, size, i = [], 0, 0
    while size < MEMORY_BYTES:
        sentence = f"{rng.choice(nouns).capitalize()} {rng.choice(verbs)} {rng.choice(nouns)}"
        sentence = sentence if language == "fr" else sentence.replace(" ", "")
        i += 1
        part = sentence + end + ("\n\n" if paragraphs and i % 8 == 0 else join)
        parts.append(part)
        size += len(part.encode("utf-8"))
    return "".join(parts).rstrip() + "\n"


def memory() -> list[dict]:
    """Peak RSS of streamed chunked ingest, a line against paragraphs, per language."""
    from probembed.evaluation.recipes import hashing_pipeline

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        saved = hashing_pipeline((64, 48)).save(Path(tmp) / "hash")
        for language, paragraphs in itertools.product(LANGUAGES, (False, True)):
            path = Path(tmp) / f"{language}-{'paragraphs' if paragraphs else 'line'}.txt"
            path.write_text(sample_text(language, paragraphs), encoding="utf-8")
            done = subprocess.run(
                [sys.executable, "-c", MEASURE, str(saved), str(Path(tmp) / path.stem), str(path)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )
            measured = json.loads(done.stdout.splitlines()[-1])
            rows.append(
                {
                    "language": language,
                    "layout": "paragraphs" if paragraphs else "one line",
                    "bytes": path.stat().st_size,
                    "loaded_gb": round(measured["loaded"] / 1e9, 3),
                    "peak_gb": round(measured["peak"] / 1e9, 3),
                    "seconds": round(measured["seconds"], 1),
                    "chunks": measured["chunks"],
                    "problems": measured["problems"],
                }
            )
            print(rows[-1], flush=True)
    for row in rows:
        pair = next(r for r in rows if r["language"] == row["language"] and r is not row)
        if row["layout"] == "one line":
            row["peak_over_paragraphs"] = round(row["peak_gb"] / pair["peak_gb"], 2)
    return rows


#: Run in a fresh interpreter under a checkout's code: every text's chunk spans at each
#: size, read as Markdown and as plain text, with `retrieval`'s tokenizers, and the offsets
#: of the lines its `HeadingTracker` reads as headings (a setext heading's underline).
SPANS = """
import json, sys
import probembed
from probembed.chunking import (
    ChunkSettings, HeadingTracker, chunk_text, front_matter, markdown_sections, plain_sections
)
from probembed.pipeline import Pipeline
texts, sizes = json.loads(sys.stdin.read())
pipeline = Pipeline.load("retrieval", cache=False)
out = {"code": probembed.__file__, "spans": {}, "headings": {}}
for path, text in texts.items():
    tracker, front = HeadingTracker(), front_matter(text)
    offset, out["headings"][path] = front.end if front else 0, []
    for line in text[offset:].splitlines(keepends=True):
        if tracker.feed(line, at=offset) is not None:
            out["headings"][path].append(offset)
        offset += len(line)
    for size in sizes:
        config = ChunkSettings.sized(size).capped(pipeline.max_tokens)
        for name, sections in (("markdown", markdown_sections), ("plain", plain_sections)):
            chunks = chunk_text(text, sections(text), pipeline.count_tokens, config)
            out["spans"][f"{path}|{size}|{name}"] = [(c.start, c.end) for c in chunks]
print(json.dumps(out))
"""
#: Chunk sizes (tokens) the fences part measures at.
FENCE_SIZES = (128, 256)


def markdown_corpora(checkout: Path, folders: Sequence[Path] = ()) -> dict[str, list[str]]:
    """The Markdown files the fences parts read, by corpus: the repository's as `checkout`
    holds them, so a run's own edits to the docs do not move its figures; then each of the
    `folders` given (`--markdown`), a corpus of its own."""
    site = sorted(glob.glob(f"{sys.prefix}/lib/python*/site-packages/**/*.md", recursive=True))
    docs = sorted(glob.glob(str(checkout / "docs" / "*.md")))
    given = {str(f): sorted(glob.glob(str(f / "**" / "*.md"), recursive=True)) for f in folders}
    return {
        "repository": [str(checkout / "README.md"), *docs],
        "datasets": sorted(glob.glob(str(datasets_dir() / "**" / "*.md"), recursive=True)),
        "site-packages": site,
    } | given


def chunk_spans(checkout: Path, texts: dict[str, str]) -> dict:
    """Every text's chunk spans and heading lines as a checkout's code finds them (`SPANS`)."""
    done = subprocess.run(
        [sys.executable, "-c", SPANS],
        input=json.dumps([texts, FENCE_SIZES]),
        capture_output=True,
        text=True,
        check=True,
        cwd=checkout,  # `-c` puts the working folder first on sys.path
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )
    found = json.loads(done.stdout.splitlines()[-1])
    if not found["code"].startswith(str(checkout)):  # an installed copy read instead
        raise SystemExit(f"{checkout}: ran {found['code']}")
    return found


def split_blocks(text: str, blocks: Sequence[tuple[int, int]], spans: list[list[int]]) -> int:
    """How many of the blocks have a chunk edge strictly inside them."""
    edges = sorted({at for span in spans for at in span})
    split = 0
    for start, end in blocks:
        block = text[start:end]  # less an indented fence's spaces, an unclosed one's blanks
        start, end = start + len(block) - len(block.lstrip()), start + len(block.rstrip())
        split += any(start < at < end for at in edges)
    return split


@dataclass(frozen=True)
class FileRun:
    """One file at one size as the fences parts compare it: what each code found in it
    (`chunk_spans`: `before`, `after`), the settings and the pipeline's counter."""

    path: str
    text: str
    size: int
    config: ChunkSettings
    count: Callable
    before: dict
    after: dict

    def spans(self, found: dict, reading: str) -> list[list[int]]:
        """A code's chunk spans of the file read as `markdown` or `plain`."""
        return found["spans"][f"{self.path}|{self.size}|{reading}"]


#: What the fences part counts per corpus and size (`file_tally`).
FENCE_COUNTS = (
    "blocks",
    "fitting",
    "split_before",
    "split_after",
    "chunks_before",
    "chunks_after",
)


def file_tally(run: FileRun) -> tuple[dict[str, int], bool]:
    """One file's fenced blocks, those that fit, those split by the chunks before and after,
    and those chunks' counts; and whether it gives the same chunks read as plain text."""
    from probembed.chunking import markdown_sections  # here: the part compares two codes

    blocks = [block for section in markdown_sections(run.text) for block in section.code]
    fit = fitting(run.text, blocks, run.config, run.count)
    before, after = run.spans(run.before, "markdown"), run.spans(run.after, "markdown")
    split = (split_blocks(run.text, fit, before), split_blocks(run.text, fit, after))
    found = (len(blocks), len(fit), *split, len(before), len(after))
    plain = run.spans(run.before, "plain") == run.spans(run.after, "plain")
    return dict(zip(FENCE_COUNTS, found, strict=True)), plain


def fitting(
    text: str, blocks: list[tuple[int, int]], config: ChunkSettings, count: Callable
) -> list[tuple[int, int]]:
    """The blocks the pipeline counts within the size that are within the character cap."""
    counts = count([text[s:e] for s, e in blocks]) if blocks else []
    return [
        block
        for block, n in zip(blocks, counts, strict=True)
        if n <= config.max_tokens and block[1] - block[0] <= config.max_chars
    ]


def fences(before: Path) -> dict:
    """Fitting fenced blocks split across chunks, and chunk counts, before and after."""
    return compared(before, (), FENCE_COUNTS, "plain_unchanged", file_tally)


#: What the list-fences part counts per corpus and size (`nested_tally`).
NESTED_COUNTS = (
    "files_with_them",
    "blocks",
    "headings_before",
    "headings_after",
    "fitting",
    "split_before",
    "split_after",
)


def nested_blocks(text: str) -> list[tuple[int, int]]:
    """The fenced blocks this checkout finds whose opening line is no fence at a line's start:
    in a list item or a quote."""
    from probembed.chunking import markdown_sections
    from probembed.chunking.structure import _FENCE

    blocks = [block for section in markdown_sections(text) for block in section.code]
    return [b for b in blocks if not _FENCE.match(text[b[0] :].lstrip("\ufeff").split("\n")[0])]


def nested_tally(run: FileRun) -> tuple[dict[str, int], bool]:
    """One file's list and quote blocks: how many, the lines each code read as headings inside
    them, how many fit, and how many of those the chunks before and after split; and, for a
    file without them, whether its chunks are the same."""
    blocks = nested_blocks(run.text)
    fit = fitting(run.text, blocks, run.config, run.count)
    found = (run.before, run.after)
    inside = [sum(s < at < e for at in f["headings"][run.path] for s, e in blocks) for f in found]
    spans = [run.spans(f, "markdown") for f in found]
    split = [split_blocks(run.text, fit, chunks) for chunks in spans]
    tally = (int(bool(blocks)), len(blocks), *inside, len(fit), *split)
    return dict(zip(NESTED_COUNTS, tally, strict=True)), bool(blocks) or spans[0] == spans[1]


def list_fences(before: Path, folders: Sequence[Path]) -> dict:
    """List and quote fenced blocks: heading lines inside them and fitting ones split, before
    and after; and whether files without them are cut as before."""
    return compared(before, folders, NESTED_COUNTS, "others_unchanged", nested_tally)


def compared(
    before: Path,
    folders: Sequence[Path],
    names: tuple[str, ...],
    same: str,
    tally: Callable[[FileRun], tuple[dict[str, int], bool]],
) -> dict:
    """A fences part: every Markdown corpus (`markdown_corpora`) chunked by this checkout and
    by `before` at each of FENCE_SIZES, the counts `names` of `tally` summed over its files,
    and whether its check (`same`) held for every one."""
    pipeline = Pipeline.load("retrieval", cache=False)
    corpora = markdown_corpora(before, folders)
    texts = {p: Path(p).read_text(encoding="utf-8") for files in corpora.values() for p in files}
    then, now = chunk_spans(before, texts), chunk_spans(ROOT, texts)
    rows = []
    for corpus, files in corpora.items():
        for size in FENCE_SIZES:
            config = ChunkSettings.sized(size).capped(pipeline.max_tokens)
            total: dict[str, int] = dict.fromkeys(names, 0)
            held = True
            for path in files:
                run = FileRun(path, texts[path], size, config, pipeline.count_tokens, then, now)
                found, ok = tally(run)
                total = {name: total[name] + found[name] for name in names}
                held &= ok
            rows.append(
                {"corpus": corpus, "files": len(files), "tokens": config.max_tokens}
                | total
                | {same: held}
            )
            print(rows[-1], flush=True)
    return {"code": code(), "before": commit(before), "rows": rows}


def commit(checkout: Path) -> str:
    """The short commit a checkout is at."""
    git = ["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"]
    return subprocess.run(git, capture_output=True, text=True, check=True).stdout.strip()


def code() -> str:
    """The commit of the library measured, `+changes` when its files differ from it."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    changed = subprocess.run([*git, "diff", "--quiet", "HEAD", "--", "probembed"]).returncode
    return head.stdout.strip() + ("+changes" if changed else "")


def main() -> None:
    """Run the asked parts and merge them into the results file."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--part",
        choices=("quality", "throughput", "chars", "memory", "fences", "list-fences", "all"),
        default="all",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=OUT,
        help="The results file (an older checkout's run: this one's).",
    )
    parser.add_argument(
        "--label", default="after", help="The memory part's rows go under stream_memory[LABEL]."
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="The fences and list-fences parts: a checkout of the older code to compare "
        "(a git worktree).",
    )
    parser.add_argument(
        "--markdown",
        type=Path,
        action="append",
        default=[],
        help="The list-fences part: a folder whose Markdown files (*.md, recursively) are one "
        "more corpus (repeatable).",
    )
    args = parser.parse_args()
    if args.part in ("fences", "list-fences") and args.before is None:
        parser.error(f"--part {args.part} needs --before, a checkout of the code to compare with")
    result = json.loads(args.out.read_text()) if args.out.is_file() else {}
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version()}
    if args.part in ("quality", "all"):
        result["rows"] = quality()
    if args.part in ("throughput", "all"):
        result["throughput"] = throughput()
    if args.part in ("chars", "all"):
        result["chars"] = chars()
    if args.part in ("memory", "all"):
        result.setdefault("stream_memory", {})[args.label] = {"code": code(), "rows": memory()}
    if args.part == "fences":
        result["fences"] = fences(args.before.resolve())
    if args.part == "list-fences":
        result["list_fences"] = list_fences(args.before.resolve(), args.markdown)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
