"""`Pipeline.similarity` and `probembed similarity`: texts' scores with the std a search hit
reports for the same pair.

Real pipelines throughout: the saved two-model hashing pipeline of the service tests (needs no
data, deterministic), encoded in this process.

Tolerances. Float64 sums of one formula taken in another order (a BLAS matrix product against
numpy's einsum over gathered rows, or a kernel chosen by thread count) differ by at most
γ(d)·Σ|terms| with γ(d) = d·2⁻⁵³/(1 − d·2⁻⁵³) (Higham §3.1): the means are unit-norm and the
variances below 1, so every sum here is below a few units and d ≤ 112 gives a bound under
1e-13; ATOL = 1e-12 is that bound with margin, and no test compares bits that depend on a
kernel. Where one side reads the weights as a collection stores them (float32, relative
rounding 2⁻²⁴ ≈ 6e-8, taken through a square root and ratios), the std moves by a few 1e-8
relative: STORED_RTOL = 1e-6, far below what the disagreement part adds (over 10% of the std
for some pair of the search test, which checks it).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from probembed.gaussian import Gaussian
from probembed.interfaces.cli import app
from probembed.scoring import Score, dot_variance, score_matrix, similarity
from probembed.scoring import pairwise as pairwise_module
from probembed.store import Database, ingest

#: Float64 summation-order bound (module docstring).
ATOL = 1e-12
#: Float32-stored weights against float64 ones (module docstring).
STORED_RTOL = 1e-6

QUERY = "how do I open a file for reading"
DOCS = [
    "Files are opened with open() and read with read().",
    "The for statement iterates over the items of any sequence.",
    "Exceptions are raised with the raise statement.",
    "A class definition creates a new class object.",
]
#: Texts hypothesis draws: any Unicode a pipeline encodes (no lone surrogates), blanks too.
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
TEXTS = st.lists(TEXT, min_size=1, max_size=5)


def test_a_pairs_score_and_std_are_a_search_hits(pydoc_pipeline, tmp_path):
    collection = Database(tmp_path / "db", create=True).collection("docs")
    ingest([{"id": f"d{i}", "text": t} for i, t in enumerate(DOCS)], collection, pydoc_pipeline)
    hits = collection.search(QUERY, k=len(DOCS), exact=True)["hits"]
    order = [int(h["id"][1:]) for h in hits]
    got = pydoc_pipeline.similarity(QUERY, DOCS)
    assert got.score.shape == got.std.shape == (1, len(DOCS))
    assert got.score.dtype == got.std.dtype == np.float64
    np.testing.assert_allclose(got.score[0, order], [h["score"] for h in hits], rtol=0, atol=ATOL)
    np.testing.assert_allclose(got.std[0, order], [h["std"] for h in hits], rtol=STORED_RTOL)
    # the same function on the rows as stored (float32 weights) gives the hit's std itself
    stored = collection.vectors()
    query = pydoc_pipeline.encode([QUERY])
    rows = [list(stored.ids).index(f"d{i}") for i in range(len(DOCS))]
    as_stored = similarity(
        query.gaussian,
        Gaussian(stored.mean[rows], stored.var[rows]),
        pydoc_pipeline.score.name,
        pydoc_pipeline.score.beta,
        query.weights,
        stored.weights[rows],
        pydoc_pipeline.blocks,
    )
    np.testing.assert_allclose(as_stored.std[0, order], [h["std"] for h in hits], atol=ATOL)
    # and the members' disagreement is in it: for some pair the dot product's own std is
    # well below it, so a std that left it out would fail the comparisons above
    own = np.sqrt(dot_variance(query.gaussian, pydoc_pipeline.encode(DOCS).gaussian))
    assert np.all(got.std >= own) and np.any(got.std > own * 1.1)


def test_the_pipelines_own_score_and_beta_are_what_it_scores(pydoc_pipeline):
    fused = pydoc_pipeline.encode([QUERY, *DOCS])
    expected = score_matrix(
        fused.gaussian[:1], fused.gaussian[1:], pydoc_pipeline.score.name, pydoc_pipeline.score.beta
    )
    np.testing.assert_allclose(pydoc_pipeline.similarity([QUERY], DOCS).score, expected, atol=ATOL)


@settings(max_examples=30, deadline=None)
@given(a=TEXTS, b=TEXTS)
def test_a_symmetric_score_and_every_std_are_symmetric(pydoc_pipeline, a, b):
    assert Score(pydoc_pipeline.score.name) is Score.UEC  # uec reads both sides alike
    forward, backward = pydoc_pipeline.similarity(a, b), pydoc_pipeline.similarity(b, a)
    np.testing.assert_allclose(forward.score, backward.score.T, rtol=0, atol=ATOL)
    np.testing.assert_allclose(forward.std, backward.std.T, rtol=0, atol=ATOL)


@settings(max_examples=30, deadline=None)
@given(pairs=st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=5))
def test_the_pairwise_form_is_the_matrix_diagonal(pydoc_pipeline, pairs):
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    matrix, pairwise = pydoc_pipeline.similarity(a, b), pydoc_pipeline.similarity_pairwise(a, b)
    assert pairwise.score.shape == pairwise.std.shape == (len(pairs),)
    np.testing.assert_allclose(np.diag(matrix.score), pairwise.score, rtol=0, atol=ATOL)
    np.testing.assert_allclose(np.diag(matrix.std), pairwise.std, rtol=0, atol=ATOL)


@pytest.mark.parametrize("score", [s.value for s in Score])
def test_every_score_but_kl_is_symmetric_and_kl_reads_a_as_the_query(pydoc_pipeline, score):
    fused = pydoc_pipeline.encode([QUERY, *DOCS])
    a, b = fused.rows(slice(0, 2)), fused.rows(slice(2, None))
    args = (score, 2.0, a.weights, b.weights, pydoc_pipeline.blocks)
    forward = similarity(a.gaussian, b.gaussian, *args)
    backward = similarity(
        b.gaussian, a.gaussian, score, 2.0, b.weights, a.weights, pydoc_pipeline.blocks
    )
    np.testing.assert_allclose(forward.std, backward.std.T, rtol=0, atol=ATOL)
    kl = Score(score) is Score.KL
    assert np.allclose(forward.score, backward.score.T, rtol=0, atol=ATOL) is not kl
    expected = score_matrix(a.gaussian, b.gaussian, score, 2.0)  # a as the query
    np.testing.assert_allclose(forward.score, expected, rtol=0, atol=ATOL)


def test_a_matrix_cut_into_tiles_is_the_matrix_whole(pydoc_pipeline, monkeypatch):
    fused = pydoc_pipeline.encode([QUERY, *DOCS, "one more", "and another"])
    args = ("uec", 1.0, fused.weights, fused.weights, pydoc_pipeline.blocks)
    whole = similarity(fused.gaussian, fused.gaussian, *args)
    # a budget of 3 rows x 64 dims per tile: a 7 x 7 matrix in tiles of 1 row x 3 columns,
    # the last of each row reaching past the end
    monkeypatch.setattr(pairwise_module, "_BLOCK_BYTES", 3 * 64 * 8 * 2)
    assert len(list(pairwise_module.tiles(7, 7, 64))) == 21
    tiled = similarity(fused.gaussian, fused.gaussian, *args)
    np.testing.assert_allclose(tiled.std, whole.std, rtol=0, atol=ATOL)
    np.testing.assert_allclose(tiled.score, whole.score, rtol=0, atol=ATOL)


def test_without_member_blocks_the_std_is_the_dot_products_own(pydoc_pipeline):
    fused = pydoc_pipeline.encode([QUERY, *DOCS])
    a, b = fused.gaussian[:1], fused.gaussian[1:]
    plain = similarity(a, b, "dot", 0.0, fused.weights[:1], fused.weights[1:], dims=())
    np.testing.assert_allclose(plain.std, np.sqrt(dot_variance(a, b)), rtol=0, atol=ATOL)
    with pytest.raises(ValueError, match=r"dims \[64, 48\] needs the fusion weights"):
        similarity(a, b, dims=(64, 48))
    with pytest.raises(ValueError, match=r"sum to 100, not the fused 112"):
        similarity(a, b, "dot", 0.0, fused.weights[:1], fused.weights[1:], dims=(64, 36))


@pytest.mark.parametrize(
    ("a", "b", "error", "says"),
    [
        ([], "x", ValueError, r"^a is empty: pass at least one string"),
        ("x", [], ValueError, r"^b is empty: pass at least one string"),
        (["x", 3], "x", TypeError, r"^a\[1\] must be a str, got int"),
        ("x", ["y", None], TypeError, r"^b\[1\] must be a str, got NoneType"),
        (b"bytes", "x", TypeError, r"^a must be a list of strings, got bytes"),
        ("x", 5, TypeError, r"^b must be a list of strings, got int"),
        ("a \ud800", "x", ValueError, r"^a\[0\] is not valid Unicode"),
    ],
)
def test_bad_inputs_are_refused_naming_them(pydoc_pipeline, a, b, error, says):
    for form in (pydoc_pipeline.similarity, pydoc_pipeline.similarity_pairwise):
        with pytest.raises(error, match=says):
            form(a, b)


def test_pairs_need_as_many_texts_on_each_side(pydoc_pipeline):
    with pytest.raises(ValueError, match="a has 2 texts and b 1"):
        pydoc_pipeline.similarity_pairwise(["x", "y"], "z")
    one = pydoc_pipeline.similarity_pairwise("x y", "y z")  # a str is one text on either side
    assert one.score.shape == one.std.shape == (1,)
    matrix = pydoc_pipeline.similarity(["x y"], ["y z"])
    np.testing.assert_allclose(one.score, matrix.score[0], rtol=0, atol=ATOL)
    np.testing.assert_allclose(one.std, matrix.std[0], rtol=0, atol=ATOL)


def test_the_cli_prints_json_that_parses_to_the_front_doors_numbers(
    pydoc_pipeline, pydoc_pipeline_dir
):
    runner = CliRunner()
    command = ["similarity", QUERY, *DOCS, "--pipeline", str(pydoc_pipeline_dir)]
    result = runner.invoke(app, [*command, "--json"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    expected = pydoc_pipeline.similarity(QUERY, DOCS)
    assert (answer["pipeline"], answer["score_name"], answer["beta"]) == ("hash", "uec", 1.0)
    assert answer["text"] == QUERY and [r["text"] for r in answer["results"]] == DOCS
    got = answer["results"]
    np.testing.assert_allclose([r["score"] for r in got], expected.score[0], rtol=0, atol=ATOL)
    np.testing.assert_allclose([r["std"] for r in got], expected.std[0], rtol=0, atol=ATOL)
    table = runner.invoke(app, command)
    assert table.exit_code == 0, table.output
    shown = f"{expected.score[0, 0]:.4f} ± {expected.std[0, 0]:.4f}"
    assert shown in table.stdout and "pipeline hash: uec, beta 1" in table.stdout


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["one"], "Missing argument 'TEXT_B'"),
        (["one", "two", "  "], "argument 3 (' ') is blank"),  # white space runs joined below
        (["", "two"], "argument 1 ('') is blank"),
    ],
)
def test_the_cli_refuses_too_few_or_blank_texts_naming_them(pydoc_pipeline_dir, given, says):
    result = CliRunner().invoke(app, ["similarity", *given, "--pipeline", str(pydoc_pipeline_dir)])
    assert result.exit_code == 2
    assert says in " ".join(result.output.split())


def test_the_cli_says_which_texts_are_longer_than_the_members_read(search_pipeline):
    """Two long texts that differ only past the members' token limit scored as near-equals
    without a word, where ingest and embed say what they cut; the CLI names the arguments."""
    long = " ".join(f"word{i}" for i in range(600))
    pipe = search_pipeline.name
    result = CliRunner().invoke(
        app, ["similarity", "jaguars", "big cats", long, "--pipeline", pipe]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert f"cut short: argument 3 is longer than {pipe!r} reads" in said
    assert f"({search_pipeline.max_tokens} tokens): only their start is compared" in said
    quiet = CliRunner().invoke(app, ["similarity", "jaguars", "big cats", "--pipeline", pipe])
    assert quiet.exit_code == 0 and "cut short" not in quiet.output


def test_the_cli_names_the_first_ten_long_arguments_and_counts_the_rest(search_pipeline):
    """xargs can hand `similarity` hundreds of arguments: the note listed every cut one."""
    long = [f"{i} " + " ".join(f"word{j}" for j in range(600)) for i in range(12)]
    pipe = search_pipeline.name
    result = CliRunner().invoke(app, ["similarity", "jaguars", *long, "--pipeline", pipe])
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "cut short: arguments 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 and 2 more are longer" in said
