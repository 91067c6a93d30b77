"""`suppress_ids`: ids neither model may emit, removed from the target's distribution exactly.

Distribution test (as tests/test_speculative_distribution.py): tiny T5 target over a
12-id vocabulary, outputs of length 3, the exact probability of every output computed by
enumeration under the target's standardized distribution with ids 2 and 5 suppressed
(logits NEG_INF before temperature / top-k / top-p). N = 20,000 samples per case, seed 0,
chi-square goodness of fit (bins with expected count < 5 merged), pass when p ≥ 1e-3. A
planted variant that suppresses the ids in the draft only (the target as is) must fail it.
Greedy: speculative output with suppress_ids equals baseline output with suppress_ids,
token for token, for both model families, and contains no suppressed id.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import decoding, generate
from specdec_jax.decoding import sampling
from specdec_jax.models import decoder_only, t5
from specdec_jax.models.config import DecoderOnlyConfig

from test_speculative_distribution import (ENC, LENGTH, N, P_MIN, SETTINGS, V,  # noqa: F401
                                           chi_square_pvalue, exact_distribution, models)

SUPPRESS = (2, 5)


def _suppressed(logits):
  return sampling.suppress(logits, SUPPRESS)


def _samples(model, params, draft_params, temperature, topk, topp, *, suppress_ids=SUPPRESS,
             draft_only=False, method='speculative', gamma=2, seed=0):
  step = t5.make_step_fn(model, params)
  dstep = t5.make_step_fn(model, draft_params)
  if draft_only:  # planted: the draft's logits suppressed, the target's not
    dstep = sampling.suppressing(dstep, suppress_ids)
    suppress_ids = ()

  @jax.jit
  def run(key):
    length = generate.cache_length(LENGTH, gamma)
    tc = t5.encode_and_init_cache(model, params, ENC, length)
    inputs = jnp.zeros((1, LENGTH), jnp.int32)
    if method == 'baseline':
      out, _ = decoding.temperature_sample(
          inputs, tc, decoding.tokens_to_logits_from_step_fn(step), 1, decode_rng=key,
          num_decodes=N, temperature=temperature, topk=topk, topp=topp,
          sampler='inverse_cdf', suppress_ids=suppress_ids)
      return out[0]
    dc = t5.encode_and_init_cache(model, draft_params, ENC, length)
    out, _, _ = decoding.speculative_sample(
        inputs, tc, step, dc, dstep, eos_id=1, gamma=gamma, vocab_size=V, decode_rng=key,
        num_decodes=N, temperature=temperature, topk=topk, topp=topp,
        suppress_ids=suppress_ids)
    return out[0]
  return np.asarray(run(jax.random.PRNGKey(seed)))


@pytest.mark.parametrize('temperature, topk, topp', SETTINGS)
def test_speculative_output_is_the_suppressed_target_distribution(models, temperature, topk,
                                                                  topp):
  model, params, draft_params = models
  dist = exact_distribution(model, params, _suppressed, temperature, topk, topp)
  samples = _samples(model, params, draft_params, temperature, topk, topp)
  assert not np.isin(samples, SUPPRESS).any()
  pvalue = chi_square_pvalue(samples, dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} at {temperature} {topk} {topp}'


def test_baseline_output_is_the_suppressed_target_distribution(models):
  model, params, _ = models
  dist = exact_distribution(model, params, _suppressed, 1.0, 0, 0.0)
  samples = _samples(model, params, None, 1.0, 0, 0.0, method='baseline')
  assert not np.isin(samples, SUPPRESS).any()
  assert chi_square_pvalue(samples, dist) >= P_MIN


def test_planted_draft_only_suppression_fails(models):
  """Suppressing in the draft alone leaves the target's mass on the ids: the output is the
  unsuppressed target's (exact for it), so it fails the suppressed distribution's test."""
  model, params, draft_params = models
  dist = exact_distribution(model, params, _suppressed, 1.0, 0, 0.0)
  samples = _samples(model, params, draft_params, 1.0, 0, 0.0, draft_only=True)
  assert np.isin(samples, SUPPRESS).any()
  assert chi_square_pvalue(samples, dist) < P_MIN


def test_greedy_speculative_equals_greedy_baseline_with_suppress_ids():
  """Both families: greedy speculative == greedy baseline under the same suppress_ids, no
  suppressed id appears, and suppressing the baseline's own first tokens changes them."""
  from conftest import small_config
  cfg = small_config(vocab_size=40)
  tm, dm = t5.Transformer(cfg), t5.Transformer(cfg)
  tp = t5.init_params(cfg, jax.random.PRNGKey(0))
  dp = t5.init_params(cfg, jax.random.PRNGKey(1))
  enc = jnp.array([[5, 6, 7, 8, 1], [9, 10, 1, 0, 0], [11, 1, 0, 0, 0]], jnp.int32)
  plain, _ = generate.t5_generate(tm, tp, enc, 10)
  ids = tuple(sorted({int(t) for t in np.asarray(plain)[:, 0, :3].ravel()} - {0, 1}))
  base, _ = generate.t5_generate(tm, tp, enc, 10, suppress_ids=ids)
  spec, _, _ = generate.t5_speculative_generate(tm, tp, dm, dp, enc, 10, 3, suppress_ids=ids)
  np.testing.assert_array_equal(np.asarray(spec), np.asarray(base))
  assert not np.isin(np.asarray(base), ids).any()
  assert not np.array_equal(np.asarray(base), np.asarray(plain))

  dcfg = DecoderOnlyConfig(vocab_size=40, emb_dim=16, num_heads=2, num_layers=2, head_dim=8,
                           mlp_dim=32, dropout_rate=0.0)
  model = decoder_only.DecoderOnlyTransformer(dcfg)
  p0 = decoder_only.init_params(dcfg, jax.random.PRNGKey(2))
  p1 = decoder_only.init_params(dcfg, jax.random.PRNGKey(3))
  prompts = np.array([[5, 6, 7, 1], [9, 1, 0, 0]], np.int32)
  plain, _ = generate.decoder_only_generate(model, p0, prompts, 8,
                                            inputs_bidirectional_attention=True)
  ids = tuple(sorted({int(t) for t in np.asarray(plain)[:, 0, :3].ravel()} - {0, 1}))
  base, _ = generate.decoder_only_generate(model, p0, prompts, 8, suppress_ids=ids,
                                           inputs_bidirectional_attention=True)
  spec, _, _ = generate.decoder_only_speculative_generate(
      model, p0, model, p1, prompts, 8, 3, suppress_ids=ids, inputs_bidirectional_attention=True)
  np.testing.assert_array_equal(np.asarray(spec), np.asarray(base))
  assert not np.isin(np.asarray(base), ids).any()
  assert not np.array_equal(np.asarray(base), np.asarray(plain))


@pytest.mark.parametrize('bad, match', [
    ((3, -1), r'ints >= 0'), ((3, 'x'), r'ints >= 0'), ((64,), r'outside the vocabulary'),
    (7, 'sequence of token ids')])
def test_bad_suppress_ids_are_refused_before_compiling(bad, match):
  from conftest import small_config
  cfg = small_config()
  model = t5.Transformer(cfg)
  params = t5.init_params(cfg, jax.random.PRNGKey(0))
  with pytest.raises(ValueError, match=match):
    generate.t5_generate(model, params, jnp.ones((1, 3), jnp.int32), 4, suppress_ids=bad)
  with pytest.raises(ValueError, match=match):
    generate.t5_speculative_generate(model, params, model, params, jnp.ones((1, 3), jnp.int32),
                                     4, 2, suppress_ids=bad)
