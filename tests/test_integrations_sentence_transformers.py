"""`pipeline.as_sentence_transformer()`: sentence-transformers' encode contract on probembed.

Shapes and containers are checked against what sentence-transformers documents, the vectors
against `Pipeline.encode`, and the result is fed to sentence-transformers' own `util` functions.
"""

import numpy as np
import pytest
import torch
from sentence_transformers import util

from probembed.pipeline import Pipeline
from probembed.store.pydoc_corpus import read_pydoc_topics

QUESTION = "What does the assert statement do when debugging is on?"


@pytest.fixture(scope="module")
def pipeline(pydoc_pipeline_dir) -> Pipeline:
    """The saved two-model hashing pipeline (needs no data)."""
    return Pipeline.load(pydoc_pipeline_dir, cache=False)


@pytest.fixture(scope="module")
def model(pipeline):
    """The pipeline behind the sentence-transformers interface."""
    return pipeline.as_sentence_transformer()


@pytest.fixture(scope="module")
def passages() -> list[str]:
    """Real passages of four topics of the bundled Python docs."""
    return [r.text for r in read_pydoc_topics(["try", "with", "assert", "del"])]


def test_a_string_gives_a_vector_and_a_list_a_matrix_of_the_fused_means(model, pipeline, passages):
    means = pipeline.encode(passages).gaussian.mean
    matrix = model.encode(passages)
    assert isinstance(matrix, np.ndarray) and matrix.dtype == np.float32
    assert matrix.shape == (len(passages), model.get_sentence_embedding_dimension())
    np.testing.assert_array_max_ulp(matrix, means, maxulp=1)  # batch sizes differ: an ulp
    vector = model.encode(passages[3])
    assert vector.shape == (means.shape[1],)
    np.testing.assert_array_max_ulp(vector, means[3], maxulp=1)
    assert model.encode([]).shape == (0, means.shape[1])


def test_the_dimension_is_the_pipelines(model, pipeline):
    assert model.get_sentence_embedding_dimension() == 64 + 48
    assert pipeline.encode(["x"]).gaussian.dim == 64 + 48


def test_normalize_gives_unit_vectors_that_differ_from_the_means_by_rounding_only(model, passages):
    raw = model.encode(passages)
    unit = model.encode(passages, normalize_embeddings=True)
    norms = np.linalg.norm(unit.astype(np.float64), axis=1)
    # float32 rows of 112 entries: the norm of a normalised row is 1 to a few float32 ulps
    assert np.allclose(norms, 1.0, atol=1e-6)
    # concat fusion: the means are already unit-norm, so normalising moves them by rounding
    assert np.allclose(raw, unit, atol=1e-6)


def test_tensor_and_list_outputs_follow_sentence_transformers(model, pipeline, passages):
    means = pipeline.encode(passages[:3]).gaussian.mean
    tensor = model.encode(passages[:3], convert_to_tensor=True)
    assert isinstance(tensor, torch.Tensor) and tuple(tensor.shape) == means.shape
    assert np.array_equal(tensor.numpy(), means)
    rows = model.encode(passages[:3], convert_to_numpy=False)
    assert isinstance(rows, list) and len(rows) == 3
    assert all(isinstance(r, torch.Tensor) and r.ndim == 1 for r in rows)
    one = model.encode(passages[0], convert_to_tensor=True)
    assert isinstance(one, torch.Tensor) and one.ndim == 1


def test_similarity_is_the_cosine_sentence_transformers_computes(model, passages):
    a, b = model.encode(passages[:2]), model.encode(passages[2:5])
    ours = model.similarity(a, b)
    assert isinstance(ours, torch.Tensor) and tuple(ours.shape) == (2, 3)
    reference = util.cos_sim(torch.from_numpy(a), torch.from_numpy(b))
    assert ours.dtype == reference.dtype == torch.float32  # so the two mix in one expression
    # float64 rounded to float32 here against float32 arithmetic there: a few float32 ulps
    assert torch.allclose(ours, reference, atol=1e-6)
    assert torch.allclose(ours - reference, torch.zeros(2, 3), atol=1e-6)
    assert model.similarity_fn_name == "cosine"


def test_code_written_for_sentence_transformers_runs_unchanged(model, passages):
    corpus = model.encode(passages, convert_to_tensor=True, batch_size=8)
    query = model.encode(QUESTION, convert_to_tensor=True)
    best = util.semantic_search(query, corpus, top_k=1)[0][0]
    assert "assert" in passages[best["corpus_id"]].split("\n")[0]


def test_mteb_style_arguments_are_accepted_and_prompts_prepended(model, pipeline):
    plain = model.encode(["a question"], task_name="SciFact", prompt_type="query")
    assert np.array_equal(plain, pipeline.encode(["a question"]).gaussian.mean)
    prompted = model.encode(["a question"], prompt="query: ")
    assert np.array_equal(prompted, pipeline.encode(["query: a question"]).gaussian.mean)


def test_mteb_2s_dataloader_of_text_batches_is_read_as_its_texts(model, pipeline, passages):
    """MTEB 2 hands encode a torch DataLoader of {"text": [...]} batches with its task
    metadata; the texts were taken for the batches ("texts[0] must be a str, got dict")."""
    from torch.utils.data import DataLoader

    rows = [{"text": t} for t in passages[:5]]
    loader = DataLoader(rows, batch_size=2)  # default collation: {"text": [two texts]}
    means = model.encode(loader, task_metadata=None, hf_split="test", hf_subset="default")
    assert np.array_equal(means, pipeline.encode(passages[:5]).gaussian.mean)
    with pytest.raises(TypeError, match="batch of type dict without 'text'"):
        model.encode(iter([{"text": ["a"]}, {"sentence": ["b"]}]))
    # texts given otherwise than as a list are still texts, as sentence-transformers reads them
    expected = pipeline.encode(passages[:3]).gaussian.mean
    for given in (np.array(passages[:3]), (t for t in passages[:3]), iter(passages[:3])):
        assert np.array_equal(model.encode(given), expected)


def test_sentence_transformers_defaults_given_explicitly_change_nothing(model, pipeline):
    """Code that forwards ST 6's defaults (prompt_name=None, output_value, truncate_dim=None,
    device) failed with TypeError, and a positional call took ST's fourth argument for
    normalize_embeddings."""
    want = pipeline.encode(["a b", "c d"]).gaussian.mean
    forwarded = model.encode(
        inputs=["a b", "c d"], prompt_name=None, output_value="sentence_embedding",
        truncate_dim=None, device="cpu", show_progress_bar=None,
    )  # fmt: skip
    assert np.array_equal(forwarded, want)
    assert np.array_equal(model.encode(["a b", "c d"], None, None, 8, False), want)
    assert np.array_equal(model.encode(sentences=["a b", "c d"]), want)  # ST before 6
    assert np.array_equal(model.encode_query(["a b", "c d"]), want)
    assert np.array_equal(model.encode_document(["a b", "c d"]), want)
    assert model.get_embedding_dimension() == want.shape[1] and model.prompts == {}
    pairs = model.similarity_pairwise(want, want[::-1]).numpy()
    # both are float64 cosines rounded to float32: at most one float32 step (6e-8 near 1) apart
    assert np.allclose(pairs, np.diag(model.similarity(want, want[::-1]).numpy()), atol=1e-7)


def test_bad_arguments_are_named(model):
    with pytest.raises(TypeError, match="unsupported option"):
        model.encode(["x"], colour="red")
    for option, value in (("output_value", "token_embeddings"), ("truncate_dim", 64)):
        with pytest.raises(ValueError, match=option):
            model.encode(["x"], **{option: value})
    with pytest.raises(ValueError, match="batch_size"):
        model.encode(["x"], batch_size=0)
    with pytest.raises(ValueError, match="precision"):
        model.encode(["x"], precision="int8")


@pytest.mark.parametrize(
    ("name", "matrix", "pairwise"),
    [
        ("cosine", util.cos_sim, util.pairwise_cos_sim),
        ("dot", util.dot_score, util.pairwise_dot_score),
        ("euclidean", util.euclidean_sim, util.pairwise_euclidean_sim),
        ("manhattan", util.manhattan_sim, util.pairwise_manhattan_sim),
    ],
)
def test_the_similarity_function_named_is_the_one_sentence_transformers_computes(
    pipeline, passages, name, matrix, pairwise
):
    """Setting `similarity_fn_name` was ignored: `similarity` stayed the cosine."""
    from sentence_transformers import SimilarityFunction

    model = pipeline.as_sentence_transformer()
    model.similarity_fn_name = SimilarityFunction(name)  # ST's enum, or its name
    assert model.similarity_fn_name == name
    a, b = model.encode(passages[:3]), model.encode(passages[3:6])
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    # float64 rounded to float32 here against float32 arithmetic there; distances over a
    # few hundred dimensions of values below 1 sum to at most a few units: 1e-5 relative
    assert torch.allclose(model.similarity(a, b), matrix(ta, tb), rtol=1e-5, atol=1e-6)
    paired = model.similarity_pairwise(a, b)
    assert torch.allclose(paired, pairwise(ta, tb), rtol=1e-5, atol=1e-6)
    # any float tensor, bfloat16 included (numpy has none: it raised TypeError)
    ha, hb = ta.to(torch.bfloat16), tb.to(torch.bfloat16)
    expected = matrix(ha.float(), hb.float())
    assert torch.allclose(model.similarity(ha, hb), expected, rtol=1e-5, atol=1e-6)


def test_an_unknown_similarity_and_a_dict_input_are_refused(pipeline):
    model = pipeline.as_sentence_transformer()
    with pytest.raises(ValueError, match="'maxsim' is not one of cosine, dot"):
        model.similarity_fn_name = "maxsim"
    assert model.similarity_fn_name == "cosine"
    with pytest.raises(TypeError, match="got a dict"):  # it embedded the key "text"
        model.encode({"text": "hello"})


def test_a_prompt_name_is_looked_up_in_prompts_as_sentence_transformers_does(model, pipeline):
    """The message said probembed gives "fused means as float32, whole (prompt_name=None)",
    not that the name is missing from `prompts`."""
    with pytest.raises(ValueError, match=r"Prompt name 'query' not found .* keys \[\]"):
        model.encode("cat", prompt_name="query")
    # a prompt given beside a name wins, as in sentence-transformers
    want = pipeline.encode(["query: cat"]).gaussian.mean[0]
    assert np.array_equal(model.encode("cat", prompt="query: ", prompt_name="query"), want)


def test_a_device_it_cannot_use_is_refused_and_device_and_length_are_told(model, pipeline):
    """device="cuda" was accepted silently while every member encoded on the CPU."""
    for device in ("cuda", "cuda:0", torch.device("meta")):
        with pytest.raises(ValueError, match="encode on the CPU"):
            model.encode(["x"], device=device)
    with pytest.raises(ValueError, match="not a torch device"):
        model.encode(["x"], device="gpu-please")
    want = pipeline.encode(["x"]).gaussian.mean
    for device in ("cpu", "cpu:0", torch.device("cpu")):
        assert np.array_equal(model.encode(["x"], device=device), want)
    assert model.device == "cpu" and model.max_seq_length == pipeline.max_tokens
    with pytest.raises(AttributeError):
        model.device = "cuda"
    with pytest.raises(AttributeError):
        model.max_seq_length = 8
