"""Block verification (Sun et al., ICLR 2025, Algorithm 2): exact, and never worse.

Distribution tests (as tests/test_speculative_distribution.py): the exact probability
of every output of a tiny T5 target is computed by enumerating all continuations under
the same standardization; N = 20,000 speculative samples drawn with
`verification='block'` (seed 0, one batched call) are compared with a chi-square
goodness-of-fit test (bins with expected count < 5 merged). Pass: p-value ≥ 1e-3.
Settings: T = 1, T = 0.7 with top-k 4, T = 1 with top-p 0.8 (12-id vocabulary, length 3,
γ = 2); γ = 1 … 6 at T = 1 on a 6-id vocabulary with outputs of length 7 (so every γ
drafts up to 6 tokens); every adaptive draft-length policy; per-row temperatures with
a greedy row (batch 2, num_decodes N). A planted variant that stops at the first
failing position must fail the same test (p-value < 1e-3).

One round, exactly (no sampling): for random autoregressive target and draft tables
(6 ids, γ = 2, 3, 4, Dirichlet 0.5 and 3.0), the distribution of the first γ + 1 output
tokens after one round is computed from the implementation's stopping probabilities and
block residuals by enumerating every draft block and every τ; its total variation from
the target's must be < 2e-5 (float32). Both planted variants — block stopping with the
token-wise residual max(0, p − q) (without the running P_τ), and stopping at the first
failing position — must be > 1e-3 from it. (The token-wise-residual variant is about
0.007 in total variation from the target on these tiny models: the chi-square test
with 20,000 samples cannot see it, this exact test does.)

Expected accepted length (no sampling): for every draft block x of a tiny model,
E[accepted | x] is computed exactly — token-wise Σ_i Π_{j≤i} min(1, p_j/q_j), block
Σ_i i · h_i Π_{j>i} (1 − h_j) — and summed under q(x) over all V^γ blocks. Block must be
≥ token for γ = 1 … 6 (equal at γ = 1 and at T = 0) and strictly greater for γ ≥ 2 at
T = 1, which the token-wise rule relabelled 'block' fails.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import decoding
from specdec_jax.decoding import accept
from specdec_jax.decoding import policies
from specdec_jax.decoding import sampling
from specdec_jax.models import t5

from conftest import small_config
from test_speculative_distribution import (ENC, IDENTITY, N, P_MIN, SETTINGS, chi_square_pvalue,
                                           exact_distribution, speculative_samples)

V_LONG, LENGTH_LONG = 6, 7  # ids of ENC (up to 5) must exist


def _tiny(vocab, seed):
  cfg = small_config(vocab_size=vocab, emb_dim=16, num_encoder_layers=1, num_decoder_layers=2,
                     num_heads=2, mlp_dim=32)
  model = t5.Transformer(cfg)
  params = t5.init_params(cfg, jax.random.PRNGKey(seed))
  params['decoder']['logits_dense']['kernel'] = params['decoder']['logits_dense']['kernel'] * 3
  draft_params = t5.init_params(cfg, jax.random.PRNGKey(seed + 1))
  return model, params, draft_params


@pytest.fixture(scope='module')
def models():
  return _tiny(12, 10)  # the distribution suite's pair


@pytest.fixture(scope='module')
def long_models():
  return _tiny(V_LONG, 20)


# ----------------------------------------------------------------- distribution tests

@pytest.mark.parametrize('temperature, topk, topp', SETTINGS)
def test_block_distribution_matches_target(models, temperature, topk, topp):
  model, params, draft_params = models
  dist = exact_distribution(model, params, IDENTITY, temperature, topk, topp)
  samples, stats = speculative_samples(model, params, draft_params, IDENTITY, IDENTITY,
                                       temperature, topk, topp, verification='block')
  pvalue = chi_square_pvalue(samples, dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} for block {temperature} {topk} {topp}'
  assert int(np.sum(stats.accepted)) > 0


@pytest.fixture(scope='module')
def long_dist(long_models):
  model, params, _ = long_models
  return exact_distribution(model, params, IDENTITY, 1.0, 0, 0.0, vocab=V_LONG,
                            length=LENGTH_LONG)


@pytest.mark.parametrize('gamma', [1, 2, 3, 4, 5, 6])
def test_block_distribution_every_gamma(long_models, long_dist, gamma):
  model, params, draft_params = long_models
  samples, stats = speculative_samples(model, params, draft_params, IDENTITY, IDENTITY, 1.0, 0,
                                       0.0, gamma=gamma, vocab=V_LONG, length=LENGTH_LONG,
                                       verification='block')
  pvalue = chi_square_pvalue(samples, long_dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} for block γ={gamma}'
  assert int(np.max(stats.accepted)) >= min(gamma, 2)


POLICIES = {
    'heuristic': policies.DraftPolicy('heuristic', gamma_init=1),
    'confidence': policies.DraftPolicy('confidence', threshold=0.3),
    'optimal': policies.DraftPolicy('optimal', c=0.2, v=(1.0, 1.1, 1.3, 1.4, 1.5)),
}


@pytest.mark.parametrize('policy', sorted(POLICIES))
def test_block_distribution_adaptive(long_models, long_dist, policy):
  model, params, draft_params = long_models
  samples, _ = speculative_samples(model, params, draft_params, IDENTITY, IDENTITY, 1.0, 0, 0.0,
                                   gamma=4, vocab=V_LONG, length=LENGTH_LONG,
                                   verification='block', policy=POLICIES[policy])
  pvalue = chi_square_pvalue(samples, long_dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} for block with {policy}'


def test_block_per_row_temperature_with_a_greedy_row(long_models, long_dist):
  """Row 0 at T = 0 gives the greedy output N times; row 1 at T = 1 is the target's."""
  model, params, draft_params = long_models
  samples, _ = speculative_samples(model, params, draft_params, IDENTITY, IDENTITY,
                                   jnp.array([0.0, 1.0]), 0, 0.0, gamma=3, vocab=V_LONG,
                                   length=LENGTH_LONG, verification='block', batch=2)
  samples = np.asarray(samples)
  greedy = exact_distribution(model, params, IDENTITY, 0.0, 0, 0.0, vocab=V_LONG,
                              length=LENGTH_LONG)
  (only,) = [k for k, v in greedy.items() if v > 0.5]
  assert all(tuple(int(x) for x in row) == only for row in samples[0])
  pvalue = chi_square_pvalue(samples[1], long_dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} for the T = 1 row'


def _planted_token_residual(draft_tokens, q, p, n_drafted):
  weights, h, big_p = REAL_STOP(draft_tokens, q, p, n_drafted)
  gamma = draft_tokens.shape[1]
  q_ahead = jnp.concatenate([q, jnp.zeros_like(q[:, :1])], axis=1)
  q_ahead = jnp.where((jnp.arange(gamma + 1)[None, :] < n_drafted[:, None])[..., None],
                      q_ahead, 0.0)
  return jnp.maximum(p - q_ahead, 0.0), h, big_p  # residual without the running P_τ


def _planted_first_failure(weights, stop_h, p, draft_tokens, n_drafted, greedy, coins, u):
  del p, greedy  # τ = the passes before the first failing position (Algorithm 1's stopping)
  gamma = draft_tokens.shape[1]
  passes = (coins < stop_h) & (jnp.arange(1, gamma + 1)[None, :] <= n_drafted[:, None])
  n_acc = jnp.sum(jnp.cumprod(passes.astype(jnp.int32), axis=1), axis=1).astype(jnp.int32)
  w = jnp.take_along_axis(weights, n_acc[:, None, None], axis=1)[:, 0]
  return n_acc, sampling.inverse_cdf(u, w / jnp.sum(w, axis=-1, keepdims=True))


REAL_STOP = accept.block_stop_probabilities


def test_planted_first_failure_fails_the_chi_square(models, monkeypatch):
  model, params, draft_params = models
  dist = exact_distribution(model, params, IDENTITY, 1.0, 0, 0.0)
  monkeypatch.setattr(accept, '_block_finish', _planted_first_failure)
  samples, _ = speculative_samples(model, params, draft_params, IDENTITY, IDENTITY, 1.0, 0, 0.0,
                                   verification='block')
  assert chi_square_pvalue(samples, dist) < P_MIN


def test_block_greedy_is_the_greedy_output(long_models):
  """At T = 0 'block' emits the target's greedy tokens (as the baseline does)."""
  model, params, draft_params = long_models
  enc = jnp.array([[3, 2, 3, 1], [2, 2, 1, 0]], jnp.int32)
  step, dstep = t5.make_step_fn(model, params), t5.make_step_fn(model, draft_params)
  out = {}
  for verification in ('token', 'block'):
    tc = t5.encode_and_init_cache(model, params, enc, 8)
    dc = t5.encode_and_init_cache(model, draft_params, enc, 8)
    out[verification] = np.asarray(decoding.speculative_sample(
        jnp.zeros((2, 6), jnp.int32), tc, step, dc, dstep, eos_id=1, gamma=3, vocab_size=V_LONG,
        temperature=0.0, verification=verification)[0])
  cache = t5.encode_and_init_cache(model, params, enc, 6)
  base, _ = decoding.temperature_sample(jnp.zeros((2, 6), jnp.int32), cache,
                                        decoding.tokens_to_logits_from_step_fn(step), 1,
                                        temperature=0.0)
  np.testing.assert_array_equal(out['block'], np.asarray(base))
  np.testing.assert_array_equal(out['token'], np.asarray(base))


def test_unknown_verification_is_refused():
  with pytest.raises(ValueError, match="verification must be 'token'"):
    accept.check_verification('blocks')


# ------------------------------------------------------------------------ unit tests

def _random_case(rng, batch, gamma, vocab, one_hot_q=False):
  p = rng.dirichlet(np.full(vocab, 0.5), size=(batch, gamma + 1)).astype(np.float32)
  q = rng.dirichlet(np.full(vocab, 0.5), size=(batch, gamma)).astype(np.float32)
  tokens = np.array([[rng.choice(vocab, p=q[b, i] / q[b, i].sum()) for i in range(gamma)]
                     for b in range(batch)], np.int32)
  if one_hot_q:
    q = np.eye(vocab, dtype=np.float32)[tokens]
  n_drafted = rng.integers(0, gamma + 1, size=batch).astype(np.int32)
  coins = rng.random((batch, gamma)).astype(np.float32)
  u = rng.random((batch, 2)).astype(np.float32)
  return tokens, q, p, n_drafted, coins, u


def test_one_hot_closed_form_equals_the_general_rule():
  rng = np.random.default_rng(0)
  tokens, q, p, n_drafted, coins, u = _random_case(rng, 512, 5, 7, one_hot_q=True)
  general = accept.block_accept_and_resample(tokens, q, p, n_drafted, False, coins, u)
  closed = accept.block_accept_one_hot(tokens, p, n_drafted, False, coins, u)
  np.testing.assert_array_equal(np.asarray(general[0]), np.asarray(closed[0]))
  np.testing.assert_array_equal(np.asarray(general[1]), np.asarray(closed[1]))
  assert len(set(np.asarray(general[0]).tolist())) >= 3  # several accepted lengths occur


def test_gamma_one_block_is_the_token_rule():
  rng = np.random.default_rng(1)
  tokens, q, p, n_drafted, coins, u = _random_case(rng, 512, 1, 7)
  block = accept.block_accept_and_resample(tokens, q, p, n_drafted, False, coins, u)
  token = accept.accept_and_resample(tokens, q, p, n_drafted, False, coins, u)
  np.testing.assert_array_equal(np.asarray(block[0]), np.asarray(token[0]))
  np.testing.assert_array_equal(np.asarray(block[1]), np.asarray(token[1]))


def _prefix_distributions(model, params, gamma, vocab, temperature):
  """p(· | x_<i) for every block x in vocab^γ: float64 `[V^γ, γ + 1, V]`."""
  blocks = np.array(list(itertools.product(range(vocab), repeat=gamma)), np.int32)
  dec_in = np.concatenate([np.zeros((len(blocks), 1), np.int32), blocks], axis=1)
  logits = model.apply({'params': params}, jnp.repeat(ENC, len(blocks), 0), jnp.asarray(dec_in),
                       jnp.ones_like(dec_in), enable_dropout=False)
  probs = sampling.probs_from_logits(sampling.standardize(logits, temperature))
  return blocks, np.asarray(probs, np.float64)


def _reference_h(tokens, q, p):
  """Algorithm 2's h_1..h_γ in float64 numpy, written from the paper (n_drafted = γ)."""
  batch, gamma = tokens.shape
  rows = np.arange(batch)
  big_p, h = np.ones(batch), np.zeros((batch, gamma))
  for i in range(gamma):
    ratio = p[rows, i, tokens[:, i]] / q[rows, i, tokens[:, i]]
    big_p = np.minimum(big_p * ratio, 1.0)
    ahead_q = q[:, i + 1] if i + 1 < gamma else np.zeros_like(p[:, 0])
    num = np.maximum(big_p[:, None] * p[:, i + 1] - ahead_q, 0.0).sum(-1)
    den = num + 1.0 - big_p
    h[:, i] = np.where(num > 0, num / np.where(den > 0, den, 1.0), 0.0)
  return h


@pytest.mark.parametrize('temperature', [1.0, 0.7, 0.0])
def test_expected_accepted_length_block_at_least_token(long_models, temperature):
  model, params, draft_params = long_models
  gains = {}
  for gamma in range(1, 7):
    blocks, p = _prefix_distributions(model, params, gamma, V_LONG, temperature)
    _, q = _prefix_distributions(model, draft_params, gamma, V_LONG, temperature)
    q = q[:, :gamma]
    rows = np.arange(len(blocks))[:, None]
    q_x = q[rows, np.arange(gamma)[None], blocks]
    p_x = p[rows, np.arange(gamma)[None], blocks]
    weight = np.prod(q_x, axis=1)  # q(x): probability the draft proposes block x
    keep = weight > 0
    ratio = np.minimum(p_x[keep] / q_x[keep], 1.0)
    token = np.sum(np.cumprod(ratio, axis=1), axis=1)
    _, h, _ = accept.block_stop_probabilities(
        jnp.asarray(blocks[keep]), jnp.asarray(q[keep], jnp.float32),
        jnp.asarray(p[keep], jnp.float32), jnp.full((int(keep.sum()),), gamma, jnp.int32))
    h = np.asarray(h, np.float64)
    np.testing.assert_allclose(h, _reference_h(blocks[keep], q[keep], p[keep]), atol=2e-5)
    stop = h * np.concatenate([np.cumprod((1 - h)[:, ::-1], axis=1)[:, ::-1][:, 1:],
                               np.ones((len(h), 1))], axis=1)  # P(τ = i) = h_i Π_{j>i}(1 − h_j)
    block = np.sum(stop * np.arange(1, gamma + 1)[None], axis=1)
    e_token = float(np.sum(weight[keep] * token))
    e_block = float(np.sum(weight[keep] * block))
    assert e_block >= e_token - 1e-5, (gamma, e_block, e_token)
    gains[gamma] = e_block - e_token
  if temperature == 0.0:
    assert all(abs(g) < 1e-5 for g in gains.values()), gains
  else:
    assert abs(gains[1]) < 1e-5, gains
    assert all(gains[g] > 1e-4 for g in range(2, 7)), gains


# ------------------------------------------- one round, exactly (no sampling at all)

def _tables(rng, vocab, gamma, concentration):
  """Random autoregressive target / draft tables: p[k] is `[V]*k + [V]` (prefix → dist)."""
  p = [rng.dirichlet(np.full(vocab, concentration), size=(vocab,) * k) for k in range(gamma + 1)]
  q = [rng.dirichlet(np.full(vocab, concentration), size=(vocab,) * k) for k in range(gamma)]
  return p, q


def one_round_output(p, q, vocab, gamma, width=None):
  """Exact distribution of the first γ + 1 output tokens after one block-verification
  round (the implementation's h and block residual), later tokens from the target.

  With `width` > γ the rule sees `width` draft slots and n_drafted = γ: the slots beyond
  hold junk (random tokens and q, p zero as `verify_block_adaptive` leaves it)."""
  blocks = np.array(list(itertools.product(range(vocab), repeat=gamma)), np.int64)
  def at(table, k):  # table[k] at each block's first k tokens: [blocks, V]
    return np.broadcast_to(table[k][tuple(blocks[:, :k].T)], (len(blocks), vocab))
  p_stack = np.stack([at(p, k) for k in range(gamma + 1)], axis=1)
  q_stack = np.stack([at(q, k) for k in range(gamma)], axis=1)
  w = np.prod(np.take_along_axis(q_stack, blocks[..., None], axis=-1)[..., 0], axis=1)
  tokens_in, q_in, p_in = blocks, q_stack, p_stack
  if width is not None and width > gamma:
    junk = np.random.default_rng(99)
    extra = width - gamma
    tokens_in = np.concatenate([blocks, junk.integers(0, vocab, (len(blocks), extra))], axis=1)
    q_in = np.concatenate([q_stack, junk.dirichlet(np.ones(vocab), (len(blocks), extra))], 1)
    p_in = np.concatenate([p_stack, np.zeros((len(blocks), extra, vocab))], axis=1)
  weights, h, _ = accept.block_stop_probabilities(
      jnp.asarray(tokens_in, jnp.int32), jnp.asarray(q_in, jnp.float32),
      jnp.asarray(p_in, jnp.float32), jnp.full((len(blocks),), gamma, jnp.int32))
  weights = np.asarray(weights, np.float64)[:, :gamma + 1]
  h = np.asarray(h, np.float64)[:, :gamma]
  later = np.concatenate([np.cumprod((1 - h)[:, ::-1], axis=1)[:, ::-1][:, 1:],
                          np.ones((len(h), 1))], axis=1)
  stop = np.concatenate([np.prod(1 - h, axis=1, keepdims=True), h * later], axis=1)  # P(τ)
  joint = np.ones((vocab,) * (gamma + 1))  # the target's own distribution of γ + 1 tokens
  for k in range(gamma + 1):
    joint = joint * p[k].reshape((vocab,) * (k + 1) + (1,) * (gamma - k))
  out = np.zeros_like(joint)
  for tau in range(gamma + 1):
    corr = weights[:, tau] / np.maximum(weights[:, tau].sum(-1, keepdims=True), 1e-300)
    contrib = (w * stop[:, tau])[:, None] * corr  # [blocks, V]: (x_1..x_γ, y)
    a = contrib.reshape((vocab,) * gamma + (vocab,)).sum(axis=tuple(range(tau, gamma)))
    marginal = joint.sum(axis=tuple(range(tau + 1, gamma + 1)))  # over (x_1..x_τ, y)
    cond = joint / marginal.reshape(marginal.shape + (1,) * (gamma - tau))
    out += a.reshape(a.shape + (1,) * (gamma - tau)) * cond
  return out, joint


@pytest.mark.parametrize('gamma', [2, 3, 4])
@pytest.mark.parametrize('concentration', [0.5, 3.0])
def test_one_round_is_exactly_the_target(gamma, concentration):
  """Total variation between one round's output and the target's is 0 (float32 rounding),
  while each planted variant is far from it (> 1e-3)."""
  vocab = 6
  p, q = _tables(np.random.default_rng(gamma * 10 + int(concentration)), vocab, gamma,
                 concentration)
  out, joint = one_round_output(p, q, vocab, gamma)
  assert 0.5 * np.abs(out - joint).sum() < 2e-5


@pytest.mark.parametrize('gamma, width', [(1, 4), (2, 4), (3, 5)])
def test_one_round_with_fewer_drafts_than_slots_is_exactly_the_target(gamma, width):
  """n_drafted < the slots (γ shrunk near the length budget, or an adaptive policy): the
  junk beyond n_drafted never reaches the output."""
  vocab = 6
  p, q = _tables(np.random.default_rng(gamma), vocab, gamma, 1.0)
  out, joint = one_round_output(p, q, vocab, gamma, width=width)
  assert 0.5 * np.abs(out - joint).sum() < 2e-5


@pytest.mark.parametrize('plant', ['token_residual', 'first_failure'])
def test_one_round_planted_variants_are_not_the_target(plant, monkeypatch):
  vocab, gamma = 6, 3
  p, q = _tables(np.random.default_rng(7), vocab, gamma, 3.0)
  if plant == 'token_residual':
    monkeypatch.setattr(accept, 'block_stop_probabilities', _planted_token_residual)
    out, joint = one_round_output(p, q, vocab, gamma)
  else:  # Algorithm 1's stopping: P(τ = i) = Π_{j≤i} pass_j · (1 − pass_{i+1})
    real = accept.block_stop_probabilities

    def first_failure_h(*args):
      weights, h, big_p = real(*args)
      # Encode "τ = the passes before the first failure" as last-pass probabilities:
      # P(τ = i) = (Π_{j≤i} h_j)(1 − h_{i+1}) ⇔ h'_i = Π_{j≤i} h_j (1 − h_{i+1}) / P(τ ≥ i).
      g = h.shape[1]
      first = [jnp.prod(h[:, :i], axis=1) * (1 - (h[:, i] if i < g else 0.0))
               for i in range(g + 1)]
      stop = jnp.stack(first, axis=1)
      tail = jnp.cumsum(stop[:, ::-1], axis=1)[:, ::-1]  # P(τ ≥ i)
      h2 = jnp.where(tail[:, 1:] > 0, stop[:, 1:] / jnp.where(tail[:, 1:] > 0, tail[:, 1:], 1.0),
                     0.0)
      return weights, h2, big_p
    monkeypatch.setattr(accept, 'block_stop_probabilities', first_failure_h)
    out, joint = one_round_output(p, q, vocab, gamma)
  assert 0.5 * np.abs(out - joint).sum() > 1e-3
