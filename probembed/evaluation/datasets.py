"""Readers for the on-disk benchmark formats (STS, classification, BEIR retrieval, pairs).

Every reader fails loudly with the file (and line) at fault and what was expected there, so
a harness that runs is a harness that read the data right. The one exception follows BEIR and
pytrec_eval: judgements that point at documents missing from the corpus are kept, scored as
never retrieved, and warned about (or refused with `strict=True`).
"""

from __future__ import annotations

import codecs
import math
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from probembed.caller import warn_caller
from probembed.decoding import wide_file_refusal
from probembed.documents import read_texts
from probembed.evaluation.metrics import RELEVANT, SHOWN, left_out_queries

STS_HEADER = ("sentence1", "sentence2", "score")
CLASSIFICATION_HEADER = ("text", "label")
PAIRS_HEADER = ("text_a", "text_b")
QRELS_HEADER = ("query-id", "corpus-id", "score")
#: The kind of split file each header starts (`dataset_kind`'s names).
_HEADER_KINDS = {
    STS_HEADER: "sts",
    CLASSIFICATION_HEADER: "classification",
    PAIRS_HEADER: "pairs",
    QRELS_HEADER: "retrieval",
}
DEFAULT_SPLIT = "test"
TRAIN_SPLIT = "train"
#: File stems that make a TSV one split of its folder's dataset.
SPLIT_NAMES = ("train", "dev", "validation", "test")


@dataclass(frozen=True, eq=False)
class StsDataset:
    """Sentence pairs with a gold similarity score, scored by Spearman correlation.

    Compared by identity: `==` on the score array would be elementwise, not a bool.
    """

    name: str
    split: str
    sentence1: list[str]
    sentence2: list[str]
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.sentence1)


@dataclass(frozen=True)
class RetrievalDataset:
    """A BEIR corpus, the queries judged in one split, and their relevance judgements.

    `keep_self_matches=False` follows BEIR and MTEB: a document whose id is the query's own id
    is never retrieved for it (in counter-argument retrieval every query is also a document).
    `without_relevant`: the queries of the split judged with no relevant document, left out
    of `queries` and `qrels` by `load_retrieval` (no metric is defined for them).
    `self_judged`: the queries judging relevant a corpus document with their own id, which
    they never retrieve unless `keep_self_matches` (`load_retrieval` warns of them).
    `short_of_relevant`: the queries a relevant document of which is missing from the corpus;
    `none_in_corpus`: those of them with no relevant document in it, which score 0.
    """

    name: str
    split: str
    corpus: dict[str, str]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    keep_self_matches: bool = False
    without_relevant: tuple[str, ...] = ()
    self_judged: tuple[str, ...] = ()
    short_of_relevant: tuple[str, ...] = ()
    none_in_corpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClassificationDataset:
    """Labelled texts: the probe is fitted on train and scored on test."""

    name: str
    split: str
    train_texts: list[str]
    train_labels: list[str]
    test_texts: list[str]
    test_labels: list[str]


@dataclass(frozen=True)
class PairsDataset:
    """Two texts per row that mean (nearly) the same, for fitting uncertainty estimators."""

    name: str
    text_a: list[str]
    text_b: list[str]

    def __len__(self) -> int:
        return len(self.text_a)


Dataset = StsDataset | RetrievalDataset | ClassificationDataset | PairsDataset
#: The kinds the harness scores: every one but pairs, each with a split.
Evaluable = StsDataset | RetrievalDataset | ClassificationDataset
_KINDS = {
    StsDataset: "sts",
    RetrievalDataset: "retrieval",
    ClassificationDataset: "classification",
    PairsDataset: "pairs",
}


def dataset_kind(dataset: Dataset) -> str:
    """The folder of the benchmark data that holds this kind (a pipeline's `tuned_on` names it)."""
    return _KINDS[type(dataset)]


def load_evaluable(path: str | Path, split: str | None = None, **options: bool) -> Evaluable:
    """`load_dataset` of a dataset the harness can score: STS, retrieval or classification;
    a pairs file is refused, saying what it is for."""
    dataset = load_dataset(path, split, **options)
    if isinstance(dataset, PairsDataset):
        raise ValueError(
            f"{path}: a pairs file (text_a, text_b) fits uncertainty estimators "
            "(probembed fit --pairs); eval scores STS, BEIR retrieval or classification data"
        )
    return dataset


def load_dataset(
    path: str | Path,
    split: str | None = None,
    *,
    strict: bool = False,
    keep_self_matches: bool = False,
) -> Dataset:
    """Load a dataset directory or one split file, telling the format from files and header.

    `strict` refuses retrieval judgements of documents missing from the corpus instead of
    warning; `keep_self_matches` (retrieval only) lets a query retrieve the document with its id.
    """
    path = Path(path)
    if path.is_dir():
        dataset = _load_directory(path, split or DEFAULT_SPLIT, strict, keep_self_matches)
    elif not path.is_file():
        raise FileNotFoundError(f"{path}: no such dataset file or directory")
    elif split is not None and split != path.stem:
        raise ValueError(
            f"split={split!r} conflicts with the file {path} (split {path.stem!r}); "
            "pass the dataset directory to choose a split"
        )
    else:
        dataset = _load_file(path, strict, keep_self_matches)
    if keep_self_matches and not isinstance(dataset, RetrievalDataset):
        raise ValueError(
            f"{path}: keep_self_matches applies to retrieval datasets only, "
            f"not to a {type(dataset).__name__}"
        )
    return dataset


def load_sts(path: str | Path) -> StsDataset:
    """Read one STS split file (`sentence1`, `sentence2`, `score`)."""
    path = Path(path)
    rows = list(_read_tsv(path, STS_HEADER))
    if len(rows) < 2:  # a Spearman correlation needs two pairs; found after embedding before
        raise ValueError(f"{path}: {len(rows)} pair(s) after the header; a score needs at least 2")
    scores = np.array([_parse_number(path, lineno, row[2], float) for lineno, row in rows])
    if np.all(scores == scores[0]):  # found by the metric, after embedding, before
        raise ValueError(f"{path}: every score is {scores[0]:g}: no ranking to correlate with")
    return StsDataset(
        name=dataset_name(path),
        split=path.stem,
        sentence1=[row[0] for _, row in rows],
        sentence2=[row[1] for _, row in rows],
        scores=scores,
    )


def dataset_name(path: str | Path) -> str:
    """The dataset a split file belongs to: its folder's (resolved: `eval ./test.tsv` names
    the folder too) when the file is one of its splits, named as one (SPLIT_NAMES) or lying
    beside one, as `probembed eval --compare` then tunes on that sibling; else the file's
    own, a dataset of its own (`eval mypairs.tsv` is "mypairs", not its folder)."""
    path = Path(path)
    folder = path.resolve().parent
    if path.stem in SPLIT_NAMES or any(
        (folder / f"{split}.tsv").is_file() for split in SPLIT_NAMES if split != path.stem
    ):
        return folder.name
    return path.stem


def load_pairs(path: str | Path) -> PairsDataset:
    """Read a positive-pairs file (`text_a`, `text_b`)."""
    path = Path(path)
    rows = [row for _, row in _read_tsv(path, PAIRS_HEADER)]
    return PairsDataset(
        name=path.stem, text_a=[row[0] for row in rows], text_b=[row[1] for row in rows]
    )


def load_classification(directory: str | Path, split: str = DEFAULT_SPLIT) -> ClassificationDataset:
    """Read `train.tsv` to fit the probe and `<split>.tsv` to score it."""
    directory = Path(directory)
    if split == TRAIN_SPLIT:
        raise ValueError(
            f"{directory}: split='train' would score the probe on the data it was fitted on; "
            "choose an evaluation split such as 'test'"
        )
    train = _require_file(directory / f"{TRAIN_SPLIT}.tsv")
    train_texts, train_labels = _read_labelled(train)
    if len(set(train_labels)) < 2:  # sklearn's refusal came after embedding, naming no file
        raise ValueError(f"{train}: {len(set(train_labels))} label(s); a probe needs at least 2")
    test = _require_file(directory / f"{split}.tsv")
    test_texts, test_labels = _read_labelled(test)
    if not test_texts:
        raise ValueError(f"{test}: no rows after the header")
    unseen = sorted(set(test_labels) - set(train_labels))
    if unseen:  # scored as wrong, and nothing said why
        shown = ", ".join(map(repr, unseen[:5])) + (", ..." if len(unseen) > 5 else "")
        warnings.warn(
            f"{test}: {len(unseen)} label(s) in no row of {train.name} ({shown}): the probe "
            "can never predict them, so their rows count as wrong",
            stacklevel=2,
        )
    return ClassificationDataset(
        directory.resolve().name, split, train_texts, train_labels, test_texts, test_labels
    )


def load_retrieval(
    directory: str | Path,
    split: str = DEFAULT_SPLIT,
    *,
    strict: bool = False,
    keep_self_matches: bool = False,
) -> RetrievalDataset:
    """Read a BEIR directory, keeping only the queries judged in `split`.

    Judged documents missing from the corpus stay in the judgements (never retrieved, as in
    BEIR) with a warning naming how many and which; `strict` raises instead. Queries judged
    with no relevant document (every grade 0) are left out, with a warning naming how many
    and which, and kept in `without_relevant`: no metric is defined for them. Queries that
    judge relevant a document with their own id are kept in `self_judged`, with a warning
    unless `keep_self_matches` (a query never retrieves that document: it counts as missed).
    Grades below 0 are read as not relevant, with a warning naming the file and the first
    such line.
    """
    directory = Path(directory)
    qrels_dir = directory / "qrels"
    if not qrels_dir.is_dir():
        raise FileNotFoundError(
            f"{qrels_dir}: missing; a BEIR retrieval dataset needs corpus.jsonl, queries.jsonl "
            "and qrels/<split>.tsv"
        )
    if not (qrels_dir / f"{split}.tsv").is_file():
        raise FileNotFoundError(
            f"{qrels_dir / f'{split}.tsv'}: missing; the splits judged here are: "
            f"{splits_found(qrels_dir)}"
        )
    qrels = _read_qrels(qrels_dir / f"{split}.tsv")
    corpus = read_texts(_require_file(directory / "corpus.jsonl"))
    if not corpus:
        raise ValueError(f"{directory / 'corpus.jsonl'}: no documents to search")
    all_queries = read_texts(_require_file(directory / "queries.jsonl"), "query")
    _check_judged_queries(qrels_dir / f"{split}.tsv", qrels, all_queries)
    short, none = _check_judged_documents(directory, split, qrels, corpus, strict)
    left_out = tuple(left_out_queries(qrels, str(qrels_dir / f"{split}.tsv")))
    qrels = {q: docs for q, docs in qrels.items() if q not in left_out}
    queries = {query_id: all_queries[query_id] for query_id in qrels}
    self_judged = _self_judged(qrels, corpus)
    if self_judged and not keep_self_matches:
        _warn_self_judged(qrels_dir / f"{split}.tsv", self_judged, len(qrels))
    name = directory.resolve().name  # `eval .` names its folder too
    return RetrievalDataset(
        name, split, corpus, queries, qrels, keep_self_matches, left_out, self_judged, short, none
    )


def _self_judged(qrels: dict[str, dict[str, int]], corpus: dict[str, str]) -> tuple[str, ...]:
    """The queries judging relevant a corpus document with their own id: one a self-match
    rule drops (BEIR's, for counter-argument sets where every query is a document too)."""
    return tuple(q for q, docs in qrels.items() if docs.get(q, 0) >= RELEVANT and q in corpus)


def _warn_self_judged(path: Path, queries: tuple[str, ...], judged: int) -> None:
    """Say that a relevant document with its query's id is dropped from that query's results:
    the figure fell (nDCG@10 89.45 to 88.20 with one such query of 80) without a word."""
    shown = ", ".join(map(repr, queries[:SHOWN])) + (", ..." if len(queries) > SHOWN else "")
    warn_caller(
        f"{path}: {len(queries)} of {judged} judged queries judge relevant a document with the "
        f"query's own id ({shown}): a query never retrieves the document with its id (BEIR "
        "drops such self-matches), so it counts as missed; keep_self_matches lets a query "
        "retrieve it"
    )


def kind_at(path: str | Path, split: str) -> str | None:
    """The kind (`dataset_kind`'s names) `load_dataset(path, split)` would read, from the
    folder's files and the split file's header alone; None where that file is not there. A
    command that refuses a kind asks first: a loader's own checks of it misled (tune was told
    to pick a classification split that it then refused as classification)."""
    path = Path(path)
    if path.is_dir() and (path / "corpus.jsonl").is_file():
        return "retrieval"
    file = path / f"{split}.tsv" if path.is_dir() else path
    if not file.is_file():
        return None
    return _HEADER_KINDS.get(_read_header(file))


def _load_directory(directory: Path, split: str, strict: bool, keep_self_matches: bool) -> Dataset:
    """Tell a BEIR directory from a directory of TSV splits and load `split`."""
    if (directory / "corpus.jsonl").is_file():
        return load_retrieval(directory, split, strict=strict, keep_self_matches=keep_self_matches)
    split_file = directory / f"{split}.tsv"
    if not split_file.is_file():
        raise FileNotFoundError(
            f"{split_file}: missing; expected corpus.jsonl (retrieval) or {split}.tsv "
            f"(STS, classification, pairs) in {directory}; TSV splits found: "
            f"{splits_found(directory)}"
        )
    return _load_file(split_file, strict, keep_self_matches)


def _load_file(path: Path, strict: bool, keep_self_matches: bool) -> Dataset:
    """Dispatch one split file on its header line."""
    _refuse_jsonl(path)
    header = _read_header(path)
    if header == STS_HEADER:
        return load_sts(path)
    if header == PAIRS_HEADER:
        return load_pairs(path)
    if header == CLASSIFICATION_HEADER:
        return load_classification(path.parent, path.stem)
    if header == QRELS_HEADER:
        return load_retrieval(
            path.parent.parent, path.stem, strict=strict, keep_self_matches=keep_self_matches
        )
    known = " | ".join(_show(h) for h in _HEADER_KINDS)
    raise ValueError(f"{path}:1: unknown header {_show(header)}; expected one of {known}")


def _refuse_jsonl(path: Path) -> None:
    """Refuse a JSONL file as a split, naming what to give: `eval scifact/corpus.jsonl` was
    called an unknown header, quoting the whole first record (1,500 characters) as one."""
    if path.suffix.lower() != ".jsonl":
        return
    if (path.parent / "corpus.jsonl").is_file():
        raise ValueError(
            f"{path}: a file of the BEIR dataset {path.parent}, not a split; give the folder "
            f"({path.parent}), and --split to pick one of its qrels/<split>.tsv"
        )
    raise ValueError(
        f"{path}: a JSONL file, not a split; a split is a <split>.tsv file, and a BEIR dataset "
        "a folder of corpus.jsonl, queries.jsonl and qrels/<split>.tsv (docs/cli.md, Data formats)"
    )


def split_stems(folder: Path) -> list[str]:
    """The splits a folder holds: the stems of its `.tsv` files, the one form readers read."""
    return sorted(p.stem for p in folder.glob("*.tsv"))


def splits_found(folder: Path) -> str:
    """The splits a folder holds, for a message, then the files beside them named as a split
    that no reader reads (`dev.csv`): a split saved so was passed over with no word of why
    (a README beside them is none)."""
    found = ", ".join(split_stems(folder)) or "none"
    if not folder.is_dir():
        return found
    unread = sorted(
        p.name
        for p in folder.iterdir()
        if p.is_file() and p.suffix != ".tsv" and p.stem.lower() in SPLIT_NAMES
    )
    if not unread:
        return found
    shown = ", ".join(unread[:5]) + (", ..." if len(unread) > 5 else "")
    return f"{found}; not read: {shown} (a split is a tab-separated <split>.tsv file)"


def _require_file(path: Path) -> Path:
    """Fail with the missing path rather than a bare open() error deep in a reader."""
    if path.is_dir():
        raise ValueError(f"{path}: a folder, where a TSV file is expected")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing")
    return path


def _show(fields: tuple[str, ...]) -> str:
    """Render header fields as they appear in the file, tabs made visible."""
    return repr("\t".join(fields))


def _split_line(line: str) -> list[str]:
    """Split on tabs only: texts hold quotes, so no CSV quoting rules apply."""
    return line.rstrip("\n").removesuffix("\r").split("\t")


def _tsv_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file, a byte order mark before the first line skipped;
    a bad byte names its line and offset (the codec's own message named neither the file
    nor the line, and an offset in the middle of its buffer); UTF-16 or UTF-32 is refused
    first, with the conversion (without a byte order mark, UTF-16 of ASCII text decodes as
    UTF-8 with NULs and read as a garbled header)."""
    wide = wide_file_refusal(path)
    if wide is not None:
        raise ValueError(f"{path}: {wide}")
    with path.open("rb") as handle:
        for lineno, raw in enumerate(handle, start=1):
            if lineno == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            try:
                yield lineno, raw.decode()
            except UnicodeDecodeError as exc:
                where = f"byte 0x{raw[exc.start]:02x} at offset {exc.start} of the line"
                raise ValueError(f"{path}:{lineno}: not UTF-8: {where}") from None


def _header(path: Path, lines: Iterator[tuple[int, str]], expected: str) -> tuple[str, ...]:
    """The first line's tab-separated fields; an empty file is refused as one (its header
    was read as '' and called unknown)."""
    first = next(lines, None)
    if first is None:
        raise ValueError(f"{path}: the file is empty; expected the header line {expected}")
    return tuple(_split_line(first[1]))


def _read_header(path: Path) -> tuple[str, ...]:
    """Return the first line's tab-separated fields (of a file of any known header)."""
    known = " | ".join(_show(h) for h in _HEADER_KINDS)
    return _header(path, _tsv_lines(path), f"one of {known}")


def _read_tsv(path: Path, header: tuple[str, ...]) -> Iterator[tuple[int, list[str]]]:
    """Yield (line number, fields) of a headed TSV, checking the header and field counts."""
    _require_file(path)
    lines = _tsv_lines(path)
    found = _header(path, lines, _show(header))
    if found != header:
        raise ValueError(f"{path}:1: header {_show(found)}, expected {_show(header)}")
    for lineno, line in lines:
        if not line.strip():
            continue
        fields = _split_line(line)
        if len(fields) != len(header):
            raise ValueError(
                f"{path}:{lineno}: expected {len(header)} tab-separated fields "
                f"({', '.join(header)}), got {len(fields)}"
            )
        blank = [name for name, value in zip(header, fields, strict=True) if not value.strip()]
        if blank:  # an empty text was embedded and scored, an empty label was a class
            verb = "is" if len(blank) == 1 else "are"
            raise ValueError(f"{path}:{lineno}: {' and '.join(blank)} {verb} blank")
        yield lineno, fields


def _parse_number(path: Path, lineno: int, value: str, kind: type) -> float | int:
    """Convert one field, naming file and line when it is not a finite number."""
    try:
        number = kind(value)
    except ValueError:
        raise ValueError(f"{path}:{lineno}: {value!r} is not a valid {kind.__name__}") from None
    if not math.isfinite(number):  # float() reads "nan" and "inf": a Spearman of NaN later
        raise ValueError(f"{path}:{lineno}: {value!r} is not a finite number")
    return number


def _read_labelled(path: Path) -> tuple[list[str], list[str]]:
    """Read a classification split into texts and (string) labels."""
    rows = [row for _, row in _read_tsv(path, CLASSIFICATION_HEADER)]
    return [row[0] for row in rows], [row[1] for row in rows]


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """Read a BEIR qrels TSV into {query id: {doc id: relevance}}; grades below 0 are kept,
    with a warning (`_negative_grades`)."""
    qrels: dict[str, dict[str, int]] = {}
    first: dict[tuple[str, str], int] = {}
    negative: list[tuple[int, str, str, int]] = []
    for lineno, (query_id, doc_id, score) in _read_tsv(path, QRELS_HEADER):
        grade, judged = int(_parse_number(path, lineno, score, int)), qrels.get(query_id, {})
        if judged.get(doc_id, grade) != grade:  # the later line silently won
            raise ValueError(
                f"{path}:{lineno}: query {query_id!r} judges document {doc_id!r} {grade}, but "
                f"line {first[query_id, doc_id]} judged it {judged[doc_id]}; keep one judgement"
            )
        first.setdefault((query_id, doc_id), lineno)
        qrels.setdefault(query_id, {})[doc_id] = grade
        if grade < 0:
            negative.append((lineno, query_id, doc_id, grade))
    if not qrels:
        raise ValueError(f"{path}: no judgements; expected {_show(QRELS_HEADER)} rows")
    if negative:
        _negative_grades(path, negative)
    return qrels


def _negative_grades(path: Path, lines: list[tuple[int, str, str, int]]) -> None:
    """Say that grades below 0 (TREC's -1 "not relevant", -2 "junk"; trec_eval's "in the
    pool, not judged") are read as not relevant: every metric eval reports counts a grade
    >= RELEVANT, as ranx and trec_eval do, so they score as a 0 does. Accepted, not refused,
    since judged sets carry them; said, since a -1 meant as "unknown" would be read alike."""
    lineno, query_id, doc_id, grade = lines[0]
    count = f"{len(lines)} judgements" if len(lines) > 1 else "1 judgement"
    warn_caller(
        f"{path}:{lineno}: {count} graded below 0 (first: query {query_id!r}, document "
        f"{doc_id!r}, grade {grade}), read as not relevant, as grade 0 is: nDCG, recall and "
        f"MRR count grades >= {RELEVANT} as relevant, as ranx and trec_eval do"
    )


def _check_judged_queries(
    path: Path, qrels: dict[str, dict[str, int]], queries: dict[str, str]
) -> None:
    """Refuse judgements of queries the queries file lacks (nothing to search with), naming
    the qrels line of the first: the file is read again, on this error only."""
    missing = [q for q in qrels if q not in queries]
    if missing:
        line = next(n for n, row in _read_tsv(path, QRELS_HEADER) if row[0] == missing[0])
        raise ValueError(
            f"{path}:{line}: query {missing[0]!r} is not in queries.jsonl; "
            f"{len(missing)} judged queries missing from queries.jsonl, e.g. {missing[:3]}"
        )


def _check_judged_documents(
    directory: Path,
    split: str,
    qrels: dict[str, dict[str, int]],
    corpus: dict[str, str],
    strict: bool,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Warn about (or, when strict, refuse) judged documents the corpus lacks, saying how many
    queries lose a relevant one and how many are left with none to find (8 missing documents
    were 8 of 80 queries scoring 0); those two sets of queries."""
    missing = sorted({d for docs in qrels.values() for d in docs if d not in corpus})
    if not missing:
        return (), ()
    relevant = {q: [d for d, g in docs.items() if g >= RELEVANT] for q, docs in qrels.items()}
    short = tuple(q for q, docs in relevant.items() if any(d not in corpus for d in docs))
    none = tuple(q for q in short if not any(d in corpus for d in relevant[q]))
    message = (
        f"{directory}: {len(missing)} judged document{'s' if len(missing) > 1 else ''} "
        f"missing from corpus.jsonl (qrels/{split}.tsv), e.g. {missing[:3]}; {len(short)} of "
        f"{len(qrels)} judged queries lose a relevant document to them, {len(none)} of those "
        "left with none in the corpus (they score 0)"
    )
    if strict:
        raise ValueError(f"{message}; without strict they count as never retrieved")
    warnings.warn(f"{message}; they count as never retrieved", UserWarning, stacklevel=3)
    return short, none
