"""Reading documents to ingest: JSONL files, BEIR corpus folders, folders of .txt/.md files.

Readers yield a `Record` per good document and a `Problem` per bad one, each tagged with where
it came from (file:line), so the caller decides whether to skip or stop and nothing is dropped
without a word. JSON lines go through `probembed.documents`, the reader the evaluation uses too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from probembed.documents import Problem, Record, read_jsonl

__all__ = ["TEXT_SUFFIXES", "Problem", "Record", "read_jsonl", "read_records", "read_text_folder"]

#: File suffixes read from a folder of plain documents.
TEXT_SUFFIXES = (".txt", ".md")


def read_records(path: str | Path) -> Iterator[Record | Problem]:
    """Records from a JSONL file, a BEIR folder (corpus.jsonl) or a folder of .txt/.md files."""
    path = Path(path)
    if path.is_file():
        return read_jsonl(path)
    if (path / "corpus.jsonl").is_file():
        return read_jsonl(path / "corpus.jsonl")
    if path.is_dir():
        return read_text_folder(path)
    raise FileNotFoundError(
        f"no documents at {path}: expected a JSONL file, a BEIR folder with corpus.jsonl, "
        "or a folder of .txt/.md files"
    )


def read_text_folder(root: Path) -> Iterator[Record | Problem]:
    """One record per .txt/.md file below root, id = path relative to root."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
    if not files:
        raise FileNotFoundError(f"{root} holds no {'/'.join(TEXT_SUFFIXES)} files to ingest")
    for file in files:
        rel = file.relative_to(root).as_posix()
        try:
            text = file.read_text(encoding="utf-8").strip()
        except (UnicodeDecodeError, OSError) as exc:
            yield Problem(str(file), f"cannot read as UTF-8 text: {exc}")
            continue
        if not text:
            yield Problem(str(file), "empty file")
            continue
        yield Record(rel, text, {}, str(file))
