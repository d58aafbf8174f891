"""Texts in a script the weighed models were not trained on are warned about, once a script."""

import re
import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st
from script_support import ROOT, script_module

from probembed.encoders import available_encoders, get_encoder
from probembed.encoders.scripts import LATIN, UnreadScriptWarning, label, script_of
from probembed.pipeline import Pipeline
from probembed.pipeline_config import FusionConfig

ARABIC = "مرحبا بالعالم، كيف حالك اليوم؟"
THAI = "น้ำท่วมหนักในกรุงเทพเมื่อวานนี้"


@pytest.mark.parametrize(
    ("text", "script"),
    [
        ("A jaguar is a large cat.", "LATIN"),
        ("Besançon est une ville française où l'on mange bien.", "LATIN"),
        ("ＦＵＬＬＷＩＤＴＨ letters", "LATIN"),
        ("µ-opioid receptors in the β-cell", "LATIN"),  # a few Greek letters in English
        (ARABIC, "ARABIC"),
        ("שלום עולם", "HEBREW"),
        (THAI, "THAI"),
        ("火山が噴火した", "CJK"),
        ("ひらがなとカタカナ", "CJK"),  # kana and kanji are one language's: counted as one
        ("5 µl of a 2 µM solution", "LATIN"),  # MICRO SIGN is no script
        ("𝑓(𝑥) = 𝑎𝑥 + 𝑏 on ℝ", "LATIN"),  # math italic and double-struck: no script either
        ("Let 𝑓(𝑥) = 𝑎𝑥", "LATIN"),
        ("ﬁnance", "LATIN"),  # a ligature of Latin letters
        ("abc αβγδ", "GREEK"),
        ("abcd αβγδ", None),  # no script holds more than half of the letters
        ("Привет, мир", "CYRILLIC"),
        ("123 + 4 = 127 !?", None),
        ("", None),
    ],
)
def test_a_text_s_script_is_that_of_most_of_its_letters(text, script):
    assert script_of(text) == script


@given(st.text(st.characters(max_codepoint=127)))
def test_ascii_text_is_latin_or_has_no_letters(text):
    assert script_of(text) == ("LATIN" if any(c.isalpha() for c in text) else None)


def test_script_labels_read_as_a_person_names_them():
    assert [label(s) for s in ("ARABIC", "CJK", "HANGUL")] == [
        "Arabic",
        "Chinese/Japanese (CJK)",
        "Korean (Hangul)",
    ]


@pytest.fixture(scope="module")
def pipe(pydoc_pipeline_dir):
    return Pipeline.load(pydoc_pipeline_dir, cache=False)


def declare(monkeypatch, pipe, *scripts):
    """Say which scripts each member reads (the hash encoder declares none: reads any)."""
    for member, reads in zip(pipe.members, scripts, strict=True):
        monkeypatch.setattr(member.encoder, "scripts", reads)


def encoded_warnings(pipe, texts):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe.encode(texts)
    return [w for w in caught if issubclass(w.category, UnreadScriptWarning)]


def test_texts_no_weighed_model_reads_are_warned_about_once_a_script_at_the_caller(
    monkeypatch, pipe
):
    declare(monkeypatch, pipe, LATIN, LATIN)
    said = encoded_warnings(pipe, ["plain English", "Ça va très bien", ARABIC, THAI, ARABIC])
    assert [str(w.message).split(":")[0] for w in said] == [
        "texts mostly in Arabic script",
        "texts mostly in Thai script",
    ]
    assert (
        "gives 100% of its weight to models not trained on it (hash(dim=64), hash(dim=48))"
        in str(said[0].message)
    )
    assert said[0].filename == __file__  # the line the user wrote, not probembed's
    assert encoded_warnings(pipe, ["plain English", "Ça va très bien", "123"]) == []


def test_the_warning_points_to_a_section_that_exists(monkeypatch, pipe):
    """It said "README: Languages", a section that moved to docs/cli.md."""
    declare(monkeypatch, pipe, LATIN, LATIN)
    (said,) = encoded_warnings(pipe, [ARABIC])
    page, anchor = re.search(r"see (docs/\w+\.md)#([\w-]+)", str(said.message)).groups()
    doc_links = script_module("scripts", "doc_links")
    assert anchor in {h.anchor for h in doc_links.headings((ROOT / page).read_text())}


def test_a_model_that_reads_the_script_or_does_not_say_counts_by_its_weight(monkeypatch, pipe):
    declare(monkeypatch, pipe, LATIN, None)
    for prior, warned in [((0.5, 0.5), True), ((0.7, 0.3), True), ((0.3, 0.7), False)]:
        monkeypatch.setattr(pipe, "fusion", FusionConfig("uec", prior=prior))
        said = encoded_warnings(pipe, [ARABIC])
        assert bool(said) is warned, prior
    monkeypatch.setattr(pipe, "fusion", FusionConfig("uec", prior=(0.7, 0.7)))
    assert encoded_warnings(pipe, [ARABIC]) != []  # exactly half is warned about
    declare(monkeypatch, pipe, LATIN, frozenset({"LATIN", "ARABIC"}))
    monkeypatch.setattr(pipe, "fusion", FusionConfig("uec", prior=(0.9, 0.1)))
    assert "gives 90% of its weight" in str(encoded_warnings(pipe, [ARABIC])[0].message)
    assert encoded_warnings(pipe, ["שלום עולם"]) != []  # Hebrew: neither reads it


def test_a_model_the_fusion_does_not_weigh_reads_nothing_for_it(monkeypatch, pipe):
    declare(monkeypatch, pipe, LATIN, None)
    monkeypatch.setattr(pipe, "fusion", FusionConfig(f"single:{pipe.models[1]}"))
    assert encoded_warnings(pipe, [ARABIC]) == []
    monkeypatch.setattr(pipe, "fusion", FusionConfig(f"single:{pipe.models[0]}"))
    assert encoded_warnings(pipe, [ARABIC]) != []


@pytest.mark.parametrize(
    ("name", "reads"),
    [("minilm", LATIN), ("paraphrase-l3", LATIN), ("wordllama", LATIN), ("use", None)],
)
def test_the_english_built_ins_say_they_read_latin_and_the_multilingual_one_says_nothing(
    name, reads
):
    if not {i.name: i for i in available_encoders()}[name].installed:
        pytest.skip(f"optional encoder {name!r} is not installed")
    assert get_encoder(name).scripts == reads
