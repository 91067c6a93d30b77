"""Sampled speculative output is distributed exactly as the target's (paper Theorem 3.5).

Test: tiny T5 target over a 12-id vocabulary, outputs of length 3. The exact
probability of every output (sequences cut after EOS) is computed by enumerating all
12^3 continuations with teacher-forced full forward passes, under the same
standardization (temperature, top-k / top-p). N = 20,000 speculative samples, drawn
in one batched call with seed 0, are compared with a chi-square goodness-of-fit test
(bins with expected count < 5 merged); the test passes when p-value ≥ 1e-3.
A planted wrong variant — resampling from p instead of the residual max(0, p − q) —
must fail the same test (p-value < 1e-3). Every adaptive draft-length policy is held
to the same test (seed 0, same threshold), with γ_max = 3 so that rounds draft 1–3
tokens; a planted adaptive verify call that misses the bonus position must fail it.
The baseline `temperature_sample` with `sampler='inverse_cdf'` is held to it too.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as scipy_stats

from specdec_jax import decoding, generate
from specdec_jax.decoding import accept
from specdec_jax.decoding import policies
from specdec_jax.decoding import sampling
from specdec_jax.decoding import verify
from specdec_jax.models import t5

from conftest import small_config

V, LENGTH, N, P_MIN = 12, 3, 20_000, 1e-3
ENC = jnp.array([[3, 4, 5, 1]], jnp.int32)


@pytest.fixture(scope='module')
def models():
  cfg = small_config(vocab_size=V, emb_dim=16, num_encoder_layers=1, num_decoder_layers=2,
                     num_heads=2, mlp_dim=32)
  model = t5.Transformer(cfg)
  params = t5.init_params(cfg, jax.random.PRNGKey(10))
  # Sharpen the target so its distributions are far from uniform.
  params['decoder']['logits_dense']['kernel'] = params['decoder']['logits_dense']['kernel'] * 3
  draft_params = t5.init_params(cfg, jax.random.PRNGKey(11))
  return model, params, draft_params


def target_mask(logits):
  """Target used with the disjoint draft: ids 7..11 impossible."""
  return logits.at[..., 7:].set(sampling.NEG_INF)


def disjoint_draft_mask(logits):
  """Draft whose support {7..11} is disjoint from `target_mask`'s target."""
  return logits.at[..., :7].set(sampling.NEG_INF)


def masked(step, mask):
  def step_fn(tokens, lengths, cache):
    logits, cache = step(tokens, lengths, cache)
    return mask(logits), cache
  return step_fn


def exact_distribution(model, params, mask, temperature, topk, topp, *, vocab=V, length=LENGTH):
  """{output tuple: probability} by enumeration of all vocab^length continuations."""
  V, LENGTH = vocab, length  # pylint: disable=invalid-name
  seqs = np.array(list(itertools.product(range(V), repeat=LENGTH)), np.int32)
  dec_in = np.concatenate([np.zeros((len(seqs), 1), np.int32), seqs[:, :-1]], axis=1)
  logits = model.apply({'params': params}, jnp.repeat(ENC, len(seqs), 0), jnp.asarray(dec_in),
                       jnp.ones_like(dec_in), enable_dropout=False)
  probs = np.asarray(sampling.probs_from_logits(
      sampling.standardize(mask(logits), temperature, topk, topp)), np.float64)
  step_p = np.take_along_axis(probs, seqs[..., None], axis=-1)[..., 0]  # [S, LENGTH]
  dist, seen = {}, set()
  for seq, p in zip(seqs, step_p):
    stop = int(np.argmax(seq == 1)) + 1 if (seq == 1).any() else LENGTH
    prefix = tuple(int(x) for x in seq[:stop])
    if prefix in seen:  # a prefix ending in EOS is reached by V^(LENGTH-stop) sequences
      continue
    seen.add(prefix)
    out = prefix + (0,) * (LENGTH - stop)
    dist[out] = dist.get(out, 0.0) + float(np.prod(p[:stop]))
  return dist


def chi_square_pvalue(samples, dist):
  keys = sorted(dist)
  expected = np.array([dist[k] for k in keys]) * len(samples)
  index = {k: i for i, k in enumerate(keys)}
  observed = np.zeros(len(keys))
  for row in samples:
    observed[index[tuple(int(x) for x in row)]] += 1  # KeyError = impossible output
  small = expected < 5
  obs = np.append(observed[~small], observed[small].sum())
  exp = np.append(expected[~small], expected[small].sum())
  if exp[-1] == 0:
    obs, exp = obs[:-1], exp[:-1]
  return scipy_stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def speculative_samples(model, params, draft_params, t_mask, d_mask, temperature, topk, topp,
                        gamma=2, seed=0, policy=None, *, vocab=V, length=LENGTH,
                        verification='token', batch=1):
  """N samples per row (`batch` copies of ENC; `temperature` may be one per row)."""
  V, LENGTH = vocab, length  # pylint: disable=invalid-name
  enc = jnp.repeat(ENC, batch, 0)
  step = t5.make_step_fn(model, params)
  dstep = t5.make_step_fn(model, draft_params)

  @jax.jit
  def run(key):
    length = generate.cache_length(LENGTH, gamma)  # a (γ+1)-token verify call must fit
    tc = t5.encode_and_init_cache(model, params, enc, length)
    dc = t5.encode_and_init_cache(model, draft_params, enc, length)
    out, _, stats = decoding.speculative_sample(
        jnp.zeros((batch, LENGTH), jnp.int32), tc, masked(step, t_mask), dc,
        masked(dstep, d_mask), eos_id=1, gamma=gamma, vocab_size=V, decode_rng=key,
        num_decodes=N, temperature=temperature, topk=topk, topp=topp, draft_policy=policy,
        verification=verification)
    return (out[0] if batch == 1 else out), stats
  out, stats = run(jax.random.PRNGKey(seed))
  return np.asarray(out), stats


IDENTITY = lambda x: x  # noqa: E731
SETTINGS = [(1.0, 0, 0.0), (0.7, 4, 0.0), (1.0, 0, 0.8)]


@pytest.mark.parametrize('temperature, topk, topp', SETTINGS)
@pytest.mark.parametrize('draft_kind', ['random', 'tempered_target', 'disjoint'])
def test_distribution_matches_target(models, temperature, topk, topp, draft_kind):
  model, params, draft_params = models
  t_mask = target_mask if draft_kind == 'disjoint' else IDENTITY
  d_mask = {'random': IDENTITY, 'disjoint': disjoint_draft_mask,
            'tempered_target': lambda x: x * 0.5}[draft_kind]
  d_params = params if draft_kind == 'tempered_target' else draft_params
  dist = exact_distribution(model, params, t_mask, temperature, topk, topp)
  assert abs(sum(dist.values()) - 1) < 1e-6
  samples, stats = speculative_samples(model, params, d_params, t_mask, d_mask, temperature,
                                       topk, topp)
  pvalue = chi_square_pvalue(samples, dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} for {draft_kind} {temperature} {topk} {topp}'
  if draft_kind == 'disjoint':
    assert int(np.sum(stats.accepted)) == 0  # nothing the draft proposes is possible


def test_planted_wrong_residual_fails(models, monkeypatch):
  model, params, draft_params = models
  dist = exact_distribution(model, params, IDENTITY, 1.0, 0, 0.0)
  monkeypatch.setattr(accept, 'residual_distribution', lambda p, q: p)
  samples, _ = speculative_samples(model, params, draft_params, IDENTITY, IDENTITY, 1.0, 0, 0.0)
  assert chi_square_pvalue(samples, dist) < P_MIN


POLICIES = {
    'heuristic': policies.DraftPolicy('heuristic', gamma_init=1),
    'confidence': policies.DraftPolicy('confidence', threshold=0.3),
    'optimal': policies.DraftPolicy('optimal', c=0.2, v=(1.0, 1.1, 1.3)),
}


@pytest.mark.parametrize('policy', sorted(POLICIES))
@pytest.mark.parametrize('temperature, topk, topp', SETTINGS[:2])
def test_distribution_matches_target_adaptive(models, policy, temperature, topk, topp):
  model, params, draft_params = models
  dist = exact_distribution(model, params, IDENTITY, temperature, topk, topp)
  samples, stats = speculative_samples(model, params, draft_params, IDENTITY, IDENTITY,
                                       temperature, topk, topp, gamma=3,
                                       policy=POLICIES[policy])
  pvalue = chi_square_pvalue(samples, dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} for {policy} {temperature} {topk} {topp}'
  mean = np.asarray(stats.drafted).sum() / np.asarray(stats.target_calls).sum()
  # LENGTH = 3: rounds near the length limit draft fewer than 1 token on average.
  assert 0.0 < mean <= 3.0


def test_planted_narrow_verify_fails(models, monkeypatch):
  """The adaptive verify call must cover the bonus position: a planted off-by-one that
  verifies only the drafted positions (bonus logits left at zero) must fail."""
  model, params, draft_params = models
  dist = exact_distribution(model, params, IDENTITY, 1.0, 0, 0.0)
  real = verify.verify_block_adaptive
  monkeypatch.setattr(verify, 'verify_block_adaptive',
                      lambda step, cache, cur, n, tokens, width: real(
                          step, cache, cur, n, tokens, jnp.maximum(width - 1, 1)))
  samples, _ = speculative_samples(model, params, draft_params, IDENTITY, IDENTITY, 1.0, 0, 0.0,
                                   gamma=3, policy=POLICIES['heuristic'])
  assert chi_square_pvalue(samples, dist) < P_MIN


@pytest.mark.parametrize('temperature, topk, topp', SETTINGS)
def test_baseline_inverse_cdf_sampler_matches_target(models, temperature, topk, topp):
  model, params, _ = models
  dist = exact_distribution(model, params, IDENTITY, temperature, topk, topp)

  @jax.jit
  def run(key):
    cache = t5.encode_and_init_cache(model, params, ENC, LENGTH)
    out, _ = decoding.temperature_sample(
        jnp.zeros((1, LENGTH), jnp.int32), cache,
        decoding.tokens_to_logits_from_step_fn(t5.make_step_fn(model, params)), 1,
        decode_rng=key, num_decodes=N, temperature=temperature, topk=topk, topp=topp,
        sampler='inverse_cdf')
    return out[0]
  samples = np.asarray(run(jax.random.PRNGKey(0)))
  pvalue = chi_square_pvalue(samples, dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} for {temperature} {topk} {topp}'
