"""Real-world text at the edges of Unicode: PDF text made what a reader sees, bytes that are
not UTF-8 told what they look like, file names composed into ids, and lone surrogates
refused by name wherever they come in."""

from __future__ import annotations

import json
import os
import unicodedata
from pathlib import Path

import pytest
from pypdf.generic import (
    ArrayObject,
    DecodedStreamObject,
    DictionaryObject,
    NameObject,
    NumberObject,
)
from typer.testing import CliRunner

from probembed.chunking import ChunkSettings
from probembed.interfaces.cli import app
from probembed.store import Database, StoreError, ingest, ingest_documents
from probembed.store.chunked import ingest_parsed
from probembed.store.formats import read_file
from probembed.store.readers import Problem, Record, read_jsonl, read_records
from probembed.store.rows import Batch, PipelineInfo

SMALL = ChunkSettings(48, 8)
#: Glyphs a PDF font's encoding gives codes 1-5: ligatures and full-width letters, as a
#: typesetter's fonts have them.
GLYPHS = ("/ffi", "/fi", "/fl", "/uniFF21", "/uniFF22")
NFD_NAME = unicodedata.normalize("NFD", "café.txt")
runner = CliRunner()


def write_pdf_lines(path: Path, lines: list[bytes]) -> None:
    """A one-page PDF whose text layer is these lines, in a font whose codes 1-5 are `GLYPHS`
    and 0xAD a soft hyphen (WinAnsi), as pypdf reads a typeset page's."""
    from pypdf import PdfWriter

    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    encoding = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Encoding"),
            NameObject("/BaseEncoding"): NameObject("/WinAnsiEncoding"),
            NameObject("/Differences"): ArrayObject([NumberObject(1), *map(NameObject, GLYPHS)]),
        }
    )
    font = DictionaryObject(
        {
            NameObject("/Type"): NameObject("/Font"),
            NameObject("/Subtype"): NameObject("/Type1"),
            NameObject("/BaseFont"): NameObject("/Helvetica"),
            NameObject("/Encoding"): encoding,
        }
    )
    fonts = DictionaryObject({NameObject("/F1"): font})
    page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
    shown = b" ".join(b"(" + line + b") '" for line in lines)  # ' : next line, then show
    content = DecodedStreamObject()
    content.set_data(b"BT /F1 12 Tf 72 720 Td 14 TL " + shown + b" ET")
    page.replace_contents(content)
    writer.write(path)


def test_pdf_text_is_what_a_reader_sees(tmp_path, pydoc_pipeline):
    """pypdf gives a font's ligatures (`eﬃcient`), full-width letters and soft hyphens as
    they are: stored and embedded so, a search for "efficient office files workflow" scored
    0.16 against the page (0.61 normalised). A word hyphenated across lines is joined where
    the document spells it whole elsewhere; a compound's hyphen (`well-known`) stays."""
    write_pdf_lines(
        tmp_path / "typeset.pdf",
        [
            b"The e\\001cient o\\001ce \\002les its work\\003ow for \\004\\005 teams.",
            b"A hyphenated word, then a hyphen-",
            b"ated one, a well-",
            b"known one and one justi\\255",
            b"fied.",
        ],
    )
    document = read_file(tmp_path / "typeset.pdf", "typeset.pdf")
    assert not isinstance(document, Problem), document
    assert document.text == (
        "The efficient office files its workflow for AB teams.\n"
        "A hyphenated word, then a hyphenated one, a well-\n"
        "known one and one justified."
    )
    collection = Database(tmp_path / "db", create=True).collection("pdf")
    ingest_documents(tmp_path / "typeset.pdf", collection, pydoc_pipeline, SMALL)
    stored = " ".join(row["text"] for row in collection.rows(sorted(collection.ids())).values())
    assert "efficient office files its workflow" in stored and "\u00ad" not in stored


def test_html_loses_its_soft_hyphens_and_keeps_every_other_character(tmp_path):
    """`&shy;` marks where a line may break and shows nothing else (it split words for `use`:
    cosine 0.69 to the text without them); a page's own characters are the author's, kept
    as written (NFKC would turn `x²` into `x2`), and a zero-width space may be the only
    space between two Thai words."""
    page = (
        "<html><body><h1>Donau&shy;dampf</h1><p>Schiff&shy;fahrt: x² e&#xfb03;cient "
        "a&#x200b;b</p></body></html>"
    )
    (tmp_path / "page.html").write_text(page, encoding="utf-8")
    document = read_file(tmp_path / "page.html", "page.html")
    assert not isinstance(document, Problem), document
    assert document.text == "# Donaudampf\n\nSchifffahrt: x² e\ufb03cient a\u200bb"
    assert document.title == "Donaudampf"


@pytest.mark.parametrize(
    "declared",
    [
        '<meta charset="windows-1252">',
        "<meta http-equiv='Content-Type' content='text/html; charset=ISO-8859-1'>",
    ],
)
def test_an_html_page_is_read_in_the_charset_it_declares(tmp_path, declared):
    """A page saved in Windows-1252 that says so was refused as not UTF-8 and told to run
    `iconv -f latin1`, which makes its curly quotes C1 controls; a browser reads it, and an
    ISO-8859-1 label as Windows-1252 (WHATWG), as it is read here now."""
    page = f"<html><head>{declared}<title>Café</title></head><body><p>“Crème brûlée”</p>"
    (tmp_path / "page.html").write_bytes(page.encode("cp1252"))
    document = read_file(tmp_path / "page.html", "page.html")
    assert not isinstance(document, Problem), document
    assert (document.title, document.text) == ("Café", "“Crème brûlée”")


def test_an_html_page_that_is_utf8_is_read_so_whatever_it_declares(tmp_path):
    """A template's stale `charset=iso-8859-1` over a page saved as UTF-8 is common: read as
    declared, its `é` would be `Ã©`; one undeclared and not UTF-8 is told what it looks like."""
    page = '<html><head><meta charset="iso-8859-1"></head><body><p>Tést “q”</p></body></html>'
    (tmp_path / "stale.html").write_text(page, encoding="utf-8")
    document = read_file(tmp_path / "stale.html", "stale.html")
    assert not isinstance(document, Problem) and document.text == "Tést “q”"
    (tmp_path / "bare.html").write_bytes("<p>“Crème”</p>".encode("cp1252"))
    problem = read_file(tmp_path / "bare.html", "bare.html")
    assert isinstance(problem, Problem) and "`iconv -f CP1252 -t UTF-8`" in problem.message


#: Files not UTF-8, what each is, and the advice that converts it without garbling it.
NOT_UTF8 = {
    # UTF-8 but for one byte: `iconv -f latin1` turned each of its accents into two letters
    "mostly.txt": (
        "Crème brûlée à Besançon, déjà vu. \x96 naïve café.".encode().replace(b"\xc2\x96", b"\x96"),
        "not UTF-8: byte 0x96 at offset 41; 1 byte(s) not UTF-8 in text otherwise UTF-8 (9 "
        "characters beyond ASCII), which converting the whole file from another encoding "
        "would garble: mend those bytes, or drop them with `iconv -f UTF-8 -t UTF-8 -c`",
    ),
    # Windows-1252's quotes and dashes: Latin-1 reads 0x93 as the control U+0093
    "windows.txt": (
        "“Smart quotes” – and café".encode("cp1252"),
        "not UTF-8: byte 0x93 at offset 0; it looks like Windows-1252 (bytes 0x80-0x9F are "
        "quotes and dashes there, control characters in Latin-1): convert it, e.g. "
        "`iconv -f CP1252 -t UTF-8`",
    ),
    "latin.txt": (
        "Un café très noir.".encode("latin-1"),
        "not UTF-8: byte 0xe9 at offset 6; it may be Latin-1 (ISO-8859-1): convert it, e.g. "
        "`iconv -f LATIN1 -t UTF-8` (after -f, name its encoding if it is another)",
    ),
    # UTF-16 without its byte order mark was "binary file, not text: a NUL byte at offset 1"
    "notepad16.txt": (
        "Texte sans BOM: déjà.\n".encode("utf-16-le"),
        "UTF-16LE text without a byte order mark (NUL bytes between its letters), not UTF-8; "
        "convert it, e.g. `iconv -f UTF-16LE -t UTF-8`",
    ),
    "big16.txt": (
        "Big-endian text.".encode("utf-16-be"),
        "UTF-16BE text without a byte order mark (NUL bytes between its letters), not UTF-8; "
        "convert it, e.g. `iconv -f UTF-16BE -t UTF-8`",
    ),
    "wide32.txt": (
        "Wide text, déjà.".encode("utf-32-le"),
        "UTF-32LE text without a byte order mark (NUL bytes between its letters), not UTF-8; "
        "convert it, e.g. `iconv -f UTF-32LE -t UTF-8`",
    ),
    # UTF-32's byte order mark starts with UTF-16LE's: it was called UTF-16
    "marked32.txt": (
        "Wide text.".encode("utf-32"),
        "UTF-32 text, not UTF-8; convert it, e.g. `iconv -f UTF-32 -t UTF-8`",
    ),
    "marked16.txt": (
        "Notepad's Unicode.".encode("utf-16"),
        "UTF-16 text, not UTF-8; convert it, e.g. `iconv -f UTF-16 -t UTF-8`",
    ),
    "image.md": (
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        "binary file, not text: a NUL byte at offset 8",
    ),
}


@pytest.mark.parametrize("name", NOT_UTF8)
def test_a_file_that_is_not_utf8_is_told_what_it_looks_like(tmp_path, name):
    """Every such file was told `iconv -f latin1 -t utf-8`, whatever its bytes held."""
    data, said = NOT_UTF8[name]
    (tmp_path / name).write_bytes(data)
    problem = read_file(tmp_path / name, name)
    assert isinstance(problem, Problem) and problem.message == said


def test_a_utf16_jsonl_file_is_one_problem_that_says_so(tmp_path):
    """PowerShell 5.1's `Out-File` writes UTF-16LE with a mark: its first line was "not UTF-8:
    byte 0xff at offset 0" and each after it malformed JSON."""
    lines = [json.dumps({"id": f"d{i}", "text": f"café {i}"}) for i in range(3)]
    marked = tmp_path / "export.jsonl"
    marked.write_bytes("\r\n".join(lines).encode("utf-16"))
    assert [str(p) for p in read_records(marked)] == [
        f"{marked}: UTF-16 text, not UTF-8; convert it, e.g. `iconv -f UTF-16 -t UTF-8`"
    ]
    unmarked = tmp_path / "export.json"  # an array, without the mark
    unmarked.write_bytes(json.dumps([json.loads(x) for x in lines]).encode("utf-16-le"))
    problems = [str(p) for p in read_jsonl(unmarked)]
    assert len(problems) == 1 and "`iconv -f UTF-16LE -t UTF-8`" in problems[0], problems


@pytest.fixture
def latin1_named(tmp_path):
    """A folder holding a good file and one whose name is Latin-1 bytes (`caf\\xe9.txt`)."""
    root = tmp_path / "names"
    root.mkdir()
    (root / "good.txt").write_text("A good file.")
    (Path(os.fsdecode(bytes(root) + b"/caf\xe9.txt"))).write_text("Un café noir.")
    return root


def test_a_file_whose_name_is_not_utf8_is_told_to_be_renamed(
    tmp_path, latin1_named, pydoc_pipeline
):
    """It was "its id is not valid Unicode (a lone surrogate '\\udce9' at position 3)"."""
    said = (
        "its name is not UTF-8 (byte 0xe9 at position 3 of 'caf\\udce9.txt'), and a document "
        "id must be: rename it in UTF-8"
    )
    collection = Database(tmp_path / "db", create=True).collection("plain")
    report = ingest(latin1_named, collection, pydoc_pipeline, on_error="skip")
    assert collection.ids() == {"good.txt"}
    assert [p.message[: len(said)] for p in report.problems] == [said]
    chunks = Database(tmp_path / "db").collection("chunks")
    report = ingest_documents(latin1_named, chunks, pydoc_pipeline, SMALL, on_error="skip")
    assert [p.message[: len(said)] for p in report.problems] == [said]
    alone = Path(os.fsdecode(bytes(latin1_named) + b"/caf\xe9.txt"))
    assert [p.message[: len(said)] for p in read_records(alone)] == [said]


@pytest.fixture
def decomposed(tmp_path):
    """A folder as macOS writes it: `café.txt` named decomposed (NFD), and another file."""
    root = tmp_path / "mac"
    root.mkdir()
    (root / NFD_NAME).write_text("Un café noir, sans sucre.")
    (root / "other.txt").write_text("Plain notes about tomato plants.")
    return root


def test_a_file_named_decomposed_is_stored_under_its_composed_id(
    tmp_path, decomposed, pydoc_pipeline
):
    """`delete --doc café.txt` typed composed said "not there", and `--where "doc_id =
    'café.txt'"` found nothing: the id kept the name as macOS wrote it."""
    plain = Database(tmp_path / "db", create=True).collection("plain")
    ingest(decomposed, plain, pydoc_pipeline)
    assert plain.ids() == {"café.txt", "other.txt"}
    chunks = Database(tmp_path / "db").collection("chunks")
    ingest_documents(decomposed, chunks, pydoc_pipeline, SMALL)
    hits = chunks.search("café", k=5, where="doc_id = 'café.txt'")["hits"]
    assert [h["metadata"]["doc_id"] for h in hits] == ["café.txt"]
    assert hits[0]["metadata"]["file_path"] == str(decomposed / NFD_NAME)  # the file, as it is
    alone = Database(tmp_path / "db").collection("alone")
    ingest_documents(decomposed / NFD_NAME, alone, pydoc_pipeline, SMALL)
    assert alone.document_index().keys() == {"café.txt"}


def test_two_names_spelled_alike_are_one_document_and_a_problem(
    tmp_path, decomposed, pydoc_pipeline
):
    """Linux keeps `café.txt` composed and decomposed apart: both would be one id. The file
    named as its id keeps it; the other is a problem naming both, not a write of one id
    twice."""
    (decomposed / "café.txt").write_text("Un autre café.")
    collection = Database(tmp_path / "db", create=True).collection("twice")
    report = ingest_documents(decomposed, collection, pydoc_pipeline, SMALL, on_error="skip")
    assert collection.document_index().keys() == {"café.txt", "other.txt"}
    stored = collection.search("café", k=1, where="doc_id = 'café.txt'")["hits"][0]
    assert stored["text"] == "Un autre café."
    assert len(report.problems) == 1
    assert report.problems[0].message.startswith(
        f"its name and {str(decomposed / 'café.txt')!r}'s differ only in how their accents "
        "are written (Unicode NFD and NFC), and both would be stored as 'café.txt': rename one"
    )


def stored_decomposed(tmp_path, folder, pipeline):
    """A chunked collection as a release before composed ids left a decomposed name: each
    file read under the id its name gave then."""
    collection = Database(tmp_path / "db", create=True).collection("old")
    files = sorted(folder.iterdir())
    ingest_parsed([read_file(f, f.name) for f in files], collection, pipeline, SMALL)
    assert NFD_NAME in collection.document_index()
    return collection


def test_a_sync_stores_a_decomposed_id_again_composed_and_says_so(
    tmp_path, decomposed, pydoc_pipeline
):
    """The upgrade: a sync replaces each document stored under a decomposed id, names them,
    and is not refused as a sync that keeps none when they are all the folder holds."""
    collection = stored_decomposed(tmp_path, decomposed, pydoc_pipeline)
    report = ingest_documents(decomposed, collection, pydoc_pipeline, SMALL, sync=True)
    assert collection.document_index().keys() == {"café.txt", "other.txt"}
    assert (report.added, report.removed, report.recomposed) == (1, 1, [NFD_NAME])
    said = f"removed 1 (1 of them stored again under their composed (NFC) ids: {NFD_NAME})"
    assert said in report.summary()
    (decomposed / "other.txt").unlink()  # the folder holds only the decomposed name
    only = Database(tmp_path / "only", create=True).collection("old")
    ingest_parsed([read_file(decomposed / NFD_NAME, NFD_NAME)], only, pydoc_pipeline, SMALL)
    ingest_documents(decomposed, only, pydoc_pipeline, SMALL, sync=True)
    assert only.document_index().keys() == {"café.txt"}


def test_a_plain_sync_stores_a_decomposed_id_again_composed(tmp_path, decomposed, pydoc_pipeline):
    """The same for whole records: the one stored document, under its decomposed id, was
    a sync that would remove all and keep none."""
    (decomposed / "other.txt").unlink()
    collection = Database(tmp_path / "db", create=True).collection("plain")
    ingest([Record(NFD_NAME, "Un café noir, sans sucre.")], collection, pydoc_pipeline)
    report = ingest(decomposed, collection, pydoc_pipeline, sync=True)
    assert collection.ids() == {"café.txt"} and report.recomposed == [NFD_NAME]
    assert "1 of them stored again under their composed (NFC) ids" in report.summary()


def test_delete_doc_finds_a_document_by_either_spelling(
    tmp_path, decomposed, pydoc_pipeline, pydoc_pipeline_dir
):
    """A name typed composed finds a document stored decomposed (before ids were composed)
    and one pasted decomposed finds a composed id; an id stored as given is found first."""
    stored_decomposed(tmp_path, decomposed, pydoc_pipeline)
    db = str(tmp_path / "db")
    typed = runner.invoke(app, ["delete", "--doc", "café.txt", "-c", "old", "--db", db])
    assert typed.exit_code == 0 and "deleted 1 chunk(s) of 1 document(s)" in typed.output
    collection = Database(db).collection("new")
    ingest_documents(decomposed, collection, pydoc_pipeline, SMALL)
    assert collection.delete_documents([NFD_NAME, "nothere.txt"]) == (1, ["nothere.txt"])
    assert collection.document_index().keys() == {"other.txt"}


def test_delete_by_id_finds_an_item_by_either_spelling(tmp_path, decomposed, pydoc_pipeline):
    """`probembed delete ID` found only the spelling given, where `--doc` finds either: a
    name pasted decomposed did not find the composed id a file name is stored under, nor a
    typed one the chunk of a document stored decomposed. Each is now found as given, else by
    its other spelling; an id stored in the spelling given is the one deleted."""
    db = str(tmp_path / "db")
    stored_decomposed(tmp_path, decomposed, pydoc_pipeline)  # collection "old": NFD ids
    plain = Database(db).collection("plain")
    ingest(decomposed, plain, pydoc_pipeline)  # composed ids: café.txt, other.txt
    pasted = runner.invoke(app, ["delete", NFD_NAME, "gone", "-c", "plain", "--db", db])
    assert pasted.exit_code == 1, pasted.output
    assert "deleted 1 item(s); 1 id(s) were not there: 'gone'" in pasted.output
    assert plain.ids() == {"other.txt"}
    typed = runner.invoke(app, ["delete", "café.txt#0", "-c", "old", "--db", db])
    assert typed.exit_code == 0 and "deleted 1 item(s)" in typed.output, typed.output
    assert not any(i.startswith(NFD_NAME) for i in Database(db).open("old").ids())
    both = Database(db).collection("both")
    ingest([Record("café.txt", "composed"), Record(NFD_NAME, "decomposed")], both, pydoc_pipeline)
    exact = runner.invoke(app, ["delete", NFD_NAME, "-c", "both", "--db", db])
    assert exact.exit_code == 0 and "deleted 1 item(s)" in exact.output, exact.output
    assert both.ids() == {"café.txt"}


def test_python_delete_and_rows_find_an_id_by_either_spelling(tmp_path, decomposed, pydoc_pipeline):
    """Python's `Collection.delete` and `rows` took only the spelling given, where the CLI's
    delete finds either: names listed from a macOS folder (decomposed) deleted none of the
    composed ids ingest stored for them. Each id is now found as given, else by its other
    spelling (the row says which), and one stored as given is the one deleted."""
    plain = Database(tmp_path / "db", create=True).collection("plain")
    ingest(decomposed, plain, pydoc_pipeline)  # composed ids: café.txt, other.txt
    listed = sorted(path.name for path in decomposed.iterdir())
    assert NFD_NAME in listed and "café.txt" not in listed  # as the folder spells it
    got = plain.rows([NFD_NAME, "gone"], ["text"])
    assert list(got) == [NFD_NAME] and got[NFD_NAME]["id"] == "café.txt"
    assert got[NFD_NAME]["text"] == "Un café noir, sans sucre."
    assert plain.absent([NFD_NAME, "gone", "gone", "other.txt"]) == ["gone"]
    assert plain.delete([*listed, "gone"]) == 2 and plain.ids() == set()
    both = Database(tmp_path / "db").collection("both")
    ingest([Record("café.txt", "composed"), Record(NFD_NAME, "decomposed")], both, pydoc_pipeline)
    assert both.rows([NFD_NAME])[NFD_NAME]["text"] == "decomposed"
    assert both.delete([NFD_NAME]) == 1 and both.ids() == {"café.txt"}


#: A prefix as macOS gives it when pasted or completed from a folder's name: decomposed.
NFD_PREFIX = unicodedata.normalize("NFD", "résumé/")


def test_a_decomposed_prefix_is_composed_as_file_names_are(tmp_path, decomposed, pydoc_pipeline):
    """`ingest --prefix` was put before the composed file name as given, so a decomposed
    prefix made ids of two spellings (`résumé/` NFD, `café.txt` NFC) that a composed
    `--where` or a composed prefix's sync did not find. The store composes it, for the CLI,
    Python's `ingest`/`ingest_documents` and the service alike."""
    db = str(tmp_path / "db")
    said = runner.invoke(app, ["ingest", str(decomposed), "--prefix", NFD_PREFIX, "--db", db])
    assert said.exit_code == 0, said.output
    composed = {"résumé/café.txt", "résumé/other.txt"}
    assert Database(db).open("default").ids() == composed
    plain = Database(db).collection("plain")
    ingest([Record("x", "A text.")], plain, pydoc_pipeline, prefix=NFD_PREFIX)
    assert plain.ids() == {"résumé/x"}
    chunks = Database(db).collection("chunks")
    ingest_documents(decomposed, chunks, pydoc_pipeline, SMALL, prefix=NFD_PREFIX)
    assert chunks.document_index().keys() == composed
    assert all(unicodedata.is_normalized("NFC", i) for i in chunks.ids())


def test_a_sync_under_a_prefix_stores_again_what_a_decomposed_prefix_stored(
    tmp_path, decomposed, pydoc_pipeline
):
    """The upgrade: ids an earlier release stored under the prefix as typed (decomposed) are
    the sync's own, stored again composed and named so, not left beside the composed copy."""
    (decomposed / NFD_NAME).unlink()  # the other file alone: one spelling of its name
    old = NFD_PREFIX + "other.txt"
    plain = Database(tmp_path / "db", create=True).collection("plain")
    ingest([Record(old, "Plain notes about tomato plants.")], plain, pydoc_pipeline)
    report = ingest(decomposed, plain, pydoc_pipeline, sync=True, prefix=NFD_PREFIX)
    assert plain.ids() == {"résumé/other.txt"} and report.recomposed == [old]
    chunks = Database(tmp_path / "db").collection("chunks")
    file = decomposed / "other.txt"
    ingest_parsed([read_file(file, old)], chunks, pydoc_pipeline, SMALL)
    again = ingest_documents(
        decomposed, chunks, pydoc_pipeline, SMALL, sync=True, prefix=NFD_PREFIX
    )
    assert chunks.document_index().keys() == {"résumé/other.txt"}
    assert again.recomposed == [old]


def test_a_batch_with_a_lone_surrogate_is_refused_naming_its_row_and_field(
    tmp_path, pydoc_pipeline
):
    """`Collection.add(Batch)` raised the codec's bare UnicodeEncodeError, as LanceDB met the
    id in a filter or Arrow the text; nothing is written either way."""
    collection = Database(tmp_path / "db", create=True).collection("rows")
    info = PipelineInfo.of(pydoc_pipeline)
    fused = pydoc_pipeline.encode(["one", "two"])
    for ids, texts, metadata, field in (
        (["a", "b\udce9"], ["one", "two"], [{}, {}], "id"),
        (["a", "b"], ["one", "two \ud800"], [{}, {}], "text"),
        (["a", "b"], ["one", "two"], [{}, {"tag": ["x", "\udfff"]}], "metadata"),
    ):
        with pytest.raises(StoreError, match=rf"^batch row 1 \(id .*\): its {field} is not valid"):
            collection.add(Batch(ids, texts, metadata, fused, info))
    assert not collection.exists


def test_a_query_with_a_lone_surrogate_is_named_as_a_query(tmp_path, pydoc_pipeline_dir):
    """It was refused as `texts[0]`, a name neither Python's `search` nor the CLI was given;
    the CLI says so before it loads the pipeline."""
    collection = Database(tmp_path / "db", create=True).collection("q")
    ingest([Record("a", "A note about cats.")], collection, str(pydoc_pipeline_dir))
    for queries, index in (("cats \ud800", 0), (["cats", "dogs \udc80"], 1)):
        with pytest.raises(StoreError, match=rf"^queries\[{index}\] is not valid Unicode"):
            collection.search(queries, k=1)
    argument = os.fsdecode(b"caf\xe9")  # a Latin-1 terminal's argument
    said = runner.invoke(app, ["search", argument, "-c", "q", "--db", str(tmp_path / "db")])
    assert said.exit_code == 2 and "queries[0] is not valid Unicode" in said.output, said.output
