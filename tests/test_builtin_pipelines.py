"""Every built-in pipeline: batch-invariant up to its encoders' own float32 noise, and useful.

The encoders compute in float32, and a text's vector depends slightly on how many texts share
its batch (padding, BLAS kernels chosen by the call's shape). Measured on a 2-core AMD EPYC
(AVX2), one text alone against the same text inside a batch of 35: max |Δ| of the raw mean
6.0e-7 minilm, 1.2e-7 paraphrase-l3, 1.4e-7 use, 0 wordllama. Everything probembed adds
(variances, fusion weights) is float64 from those outputs, so it must not amplify that noise:
the bounds below state, per estimator, how far `encode([x])` may be from `encode(batch)[i]`.
"""

from functools import cache

import numpy as np
import pytest

from probembed.encoders import EncoderUnavailableError, get_encoder
from probembed.gaussian import Gaussian
from probembed.pipeline import Pipeline, available_pipelines
from probembed.scoring import score_matrix
from probembed.uncertainty.base import Estimator
from probembed.uncertainty.head import (
    LOG_VAR_MAX,
    LOG_VAR_MIN,
    head_log_variance,
    head_network,
)

#: Max |Δ| of a unit-norm mean: the encoders' float32 batch noise (≤ 6.6e-7 on the raw means,
#: measured ≤ 1.5e-7 once unit-norm) with margin; the fused mean scales each part by √π ≤ 1.
MEAN_BOUND = 1e-6
#: Max |Δσ²_d| relative to the text's largest σ²_d (not to σ²_d itself: a perturbation
#: variance of nearly equal views can be ~0, where any noise is a large relative change).
#: Measured worst case per estimator: laplace 3.0e-7 (Σ a² V moves with a²: twice a's
#: relative noise), head 1.5e-6 (its MLP's gain on the input noise), perturb 1.7e-6 (a sample
#: variance of views ~1e-2 apart) on this machine's kernels; 2.5e-6 with torch forced to
#: AVX2 or no SIMD (a reviewer's run). 1e-5 leaves 4x margin over the worst seen.
VAR_BOUND = 1e-5
#: Max |Δπ|: weights are a softmax of -log u / T, so |Δπ| ≤ |Δu|/u / (4 T); u moved by
#: ≤ 1.2e-6 relative, so even the smallest tuned T (0.25) keeps |Δπ| ≤ 1.2e-6.
WEIGHT_BOUND = 1e-5

PAIRS = [  # (text, its paraphrase, an unrelated sentence)
    ("A man is playing a guitar.", "A man plays the guitar.", "Stocks fell sharply today."),
    ("The cat sat on the mat.", "A cat is sitting on a mat.", "The train leaves at noon."),
    ("How do I read a file in Python?", "Reading a file with Python", "Rain is expected."),
]


def python_doc_paragraphs(n: int) -> list[str]:
    """n real prose paragraphs (6-60 words) from the docs every CPython ships: no data needed."""
    from pydoc_data.topics import topics

    texts = []
    for key in sorted(topics):
        for paragraph in topics[key].split("\n\n"):
            words = paragraph.split()
            if not paragraph.startswith(" ") and 6 <= len(words) <= 60:
                texts.append(" ".join(words))
                break
    return texts[:n]


TEXTS = python_doc_paragraphs(35)
#: The texts also encoded alone: every third, spread over the batch's lengths.
ALONE = list(range(0, len(TEXTS), 3))


@pytest.fixture(scope="module", params=available_pipelines())
def builtin(request) -> Pipeline:
    """Each shipped pipeline, uncached (so every encode really encodes)."""
    try:
        return Pipeline.load(request.param, cache=False)
    except EncoderUnavailableError as exc:
        pytest.skip(f"built-in {request.param!r} needs an optional encoder: {exc}")


#: Each member's Gaussians of the ALONE texts, inside the batch of all and on their own, by
#: the member's fingerprint (which changes whenever its encode's output would): `default`
#: and `retrieval` share their MiniLM and paraphrase-l3 members, encoded twice over before.
_MEMBER_ROWS: dict[str, tuple[Gaussian, Gaussian]] = {}


def member_rows(member: Estimator) -> tuple[Gaussian, Gaussian]:
    """A member's Gaussians of every third text, inside the batch of all and on its own (as an
    uncached pipeline's `encode_members` encodes them: its member's `encode`)."""
    key = member.fingerprint
    if key not in _MEMBER_ROWS:
        together = member.encode(TEXTS)[ALONE]
        _MEMBER_ROWS[key] = (together, Gaussian.concat([member.encode([TEXTS[i]]) for i in ALONE]))
    return _MEMBER_ROWS[key]


@pytest.fixture(scope="module")
def batch_and_alone(builtin) -> tuple[list[Gaussian], list[Gaussian]]:
    """Each member's Gaussians of every third text, inside the batch of all and on its own."""
    rows = [member_rows(member) for member in builtin.members]
    return [together for together, _ in rows], [alone for _, alone in rows]


@cache
def encoder_is_batch_invariant(name: str) -> bool:
    """Whether the encoder itself gives bit-identical vectors of the ALONE texts, the rows the
    tests compare, alone and in the batch of all (the other texts were encoded alone too)."""
    encoder = get_encoder(name)
    alone = np.concatenate([encoder.encode([TEXTS[i]]) for i in ALONE])
    return bool(np.array_equal(alone, encoder.encode(TEXTS)[ALONE]))


def scaled_var_change(a: Gaussian, b: Gaussian) -> float:
    """Max |Δσ²_d| over each text's largest σ²_d."""
    scale = np.maximum(b.var.max(axis=1, keepdims=True), np.finfo(np.float32).tiny)
    return float((np.abs(a.var.astype(np.float64) - b.var) / scale).max())


def test_every_member_is_batch_invariant_up_to_its_encoder(builtin, batch_and_alone):
    together, alone = batch_and_alone
    for member, batch, single in zip(builtin.members, together, alone, strict=True):
        label = f"{builtin.name}/{member.encoder.name} ({member.kind})"
        if encoder_is_batch_invariant(member.encoder.name):
            # The encoder adds no noise, so all that is left is probembed's float64 maths
            # rounded once to float32: at most one unit in the last place.
            np.testing.assert_array_max_ulp(single.mean, batch.mean, maxulp=1)
            np.testing.assert_array_max_ulp(single.var, batch.var, maxulp=1)
            continue
        assert np.abs(single.mean - batch.mean).max() <= MEAN_BOUND, label
        assert scaled_var_change(single, batch) <= VAR_BOUND, label


def test_a_batch_invariant_encoder_gives_batch_invariant_gaussians(hash_pipeline):
    # The hash encoder is bit-identical in any batch, so only probembed's maths can move a
    # row: float64 throughout and one cast to float32 leaves at most 1 ulp (a float64 result
    # within ~1e-16 of a float32 rounding boundary). The float32 sgemm this replaced moved
    # the Laplace variances by up to 7 ulps here. A fused σ² is π σ²_k, a product of two such
    # roundings, so 2 ulps; π itself is float64 from float32 σ², where one ulp of one σ²_d
    # of d ≥ 96 moves u, hence π, by < 1.2e-7 relative.
    together = hash_pipeline.encode(TEXTS)
    for i, text in enumerate(TEXTS):
        alone = hash_pipeline.encode([text])
        np.testing.assert_array_max_ulp(alone.gaussian.mean[0], together.gaussian.mean[i], maxulp=1)
        np.testing.assert_array_max_ulp(alone.gaussian.var[0], together.gaussian.var[i], maxulp=2)
        np.testing.assert_allclose(alone.weights[0], together.weights[i], rtol=1.2e-7)


def test_fused_gaussians_and_weights_are_batch_invariant(builtin, batch_and_alone):
    together, alone = batch_and_alone
    batch, single = builtin.fuse(together), builtin.fuse(alone)
    assert np.abs(single.gaussian.mean - batch.gaussian.mean).max() <= MEAN_BOUND
    assert scaled_var_change(single.gaussian, batch.gaussian) <= VAR_BOUND
    assert np.abs(single.weights - batch.weights).max() <= WEIGHT_BOUND


def test_pipeline_ranks_a_paraphrase_above_an_unrelated_sentence(builtin):
    fused = builtin.encode([text for triple in PAIRS for text in triple])
    g = fused.gaussian
    score, beta = builtin.score.name, builtin.score.beta
    for i in range(len(PAIRS)):
        text, paraphrase, unrelated = 3 * i, 3 * i + 1, 3 * i + 2
        cosines = g.mean[[paraphrase, unrelated]] @ g.mean[text]
        assert cosines[0] > cosines[1], (builtin.name, PAIRS[i], cosines)
        scores = score_matrix(g[text], g[[paraphrase, unrelated]], score, beta)[0]
        assert scores[0] > scores[1], (builtin.name, score, PAIRS[i], scores)


def test_shipped_heads_numpy_inference_equals_their_torch_network(builtin):
    torch = pytest.importorskip("torch", reason="the head is trained (and checked) with torch")
    heads = [m for m in builtin.members if m.kind == "head"]
    if not heads:
        pytest.skip(f"{builtin.name} has no head estimator")
    for head in heads:
        mean = head.encode(TEXTS).mean  # the unit-norm embedding the head reads
        state = head.state
        net = head_network(state["0.weight"].shape[1], state["0.weight"].shape[0]).double()
        net.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in state.items()})
        with torch.no_grad():
            expected = net(torch.from_numpy(mean.astype(np.float64))).clamp(
                LOG_VAR_MIN, LOG_VAR_MAX
            )
        # Same float64 maths in a different summation order: ~1e-16 relative per product,
        # sums of 384 and 128 products with |log σ²| ≤ 20, so 1e-12 absolute is ample.
        np.testing.assert_allclose(head_log_variance(state, mean), expected.numpy(), atol=1e-12)
