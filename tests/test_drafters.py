"""Drafters that are not models (issue #40): exactness for every drafter.

Exact-enumeration test (as tests/test_speculative_distribution.py): tiny T5 target over a
12-id vocabulary, outputs of length 3; the probability of every output is computed by
enumerating all 12^3 continuations; N = 20,000 speculative samples (seed 0) are
compared by a chi-square goodness-of-fit test (bins with expected count < 5 merged),
passing when p ≥ 1e-3. Held to it: n-gram lookup with a source that the target's
outputs repeat (drafts proposed in most rounds) and one they never do, the bigram and
unigram tables, lookup+model, each at T = 1, T = 0.7 with top-k 4 and T = 1 with top-p
0.8, with token and block verification. Planted wrong variants must fail the same test:
the lookup's q reported as the target-agnostic smoothed distribution while it drafts
deterministically, and lenience l = 0.3 (not exact by design, paper Appendix A.5).
At T = 0 every drafter gives the greedy baseline's tokens.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import decoding, generate
from specdec_jax.decoding import drafters
from specdec_jax.models import t5

from test_speculative_distribution import (ENC, IDENTITY, LENGTH, N, P_MIN, V,  # noqa: F401
                                           chi_square_pvalue, exact_distribution, models)

REPEATING = jnp.array([[3, 4, 5, 6, 2, 7, 8, 9, 1]], jnp.int32)  # most ids appear once
NEVER = jnp.array([[11, 11, 1]], jnp.int32)  # matches only after the target emits 11
SETTINGS = [(1.0, 0, 0.0), (0.7, 4, 0.0), (1.0, 0, 0.8)]


def bigram_table(order: int, seed: int = 3, k: int = 5):
  rng = np.random.default_rng(seed)
  rows = 1 if order == 1 else V
  ids = np.stack([rng.choice(V, k, replace=False) for _ in range(rows)]).astype(np.int32)
  logits = rng.normal(size=(rows, k)) * 2
  log_probs = logits - np.log(np.exp(logits).sum(1, keepdims=True))
  return jnp.asarray(ids), jnp.asarray(log_probs, jnp.float32)


def make_drafter(kind, model, draft_params, gamma):
  """(drafter, state builder(batch) -> state)."""
  if kind in ('lookup', 'lookup_never'):
    src = REPEATING if kind == 'lookup' else NEVER
    return drafters.LookupDrafter(max_ngram=2, min_ngram=1), lambda dc: src
  if kind in ('bigram', 'unigram'):
    order = 2 if kind == 'bigram' else 1
    return drafters.NgramTableDrafter(order=order), lambda dc: bigram_table(order)
  if kind == 'lookup+model':
    step = t5.make_step_fn(model, draft_params)
    d = drafters.LookupThenModel(drafters.LookupDrafter(max_ngram=2, min_ngram=2),
                                 drafters.ModelDrafter(step))
    return d, lambda dc: (REPEATING, dc, d.initial_valid(1))
  raise ValueError(kind)


def drafter_samples(model, params, draft_params, kind, temperature, topk, topp, *, gamma=3,
                    seed=0, verification='token', lenience=1.0, num=N):
  drafter, state_of = make_drafter(kind, model, draft_params, gamma)
  step = t5.make_step_fn(model, params)

  @jax.jit
  def run(key):
    length = generate.cache_length(LENGTH, gamma)
    tc = t5.encode_and_init_cache(model, params, ENC, length)
    dc = t5.encode_and_init_cache(model, draft_params, ENC, length)
    out, _, stats = decoding.speculative_sample(
        jnp.zeros((1, LENGTH), jnp.int32), tc, step, state_of(dc), None, eos_id=1,
        gamma=gamma, vocab_size=V, decode_rng=key, num_decodes=num, temperature=temperature,
        topk=topk, topp=topp, verification=verification, drafter=drafter, lenience=lenience)
    return out[0], stats
  out, stats = run(jax.random.PRNGKey(seed))
  return np.asarray(out), stats


KINDS = ['lookup', 'lookup_never', 'bigram', 'unigram', 'lookup+model']


@pytest.mark.parametrize('temperature, topk, topp', SETTINGS)
@pytest.mark.parametrize('kind', KINDS)
def test_drafter_distribution_matches_target(models, kind, temperature, topk, topp):
  model, params, draft_params = models
  dist = exact_distribution(model, params, IDENTITY, temperature, topk, topp)
  samples, stats = drafter_samples(model, params, draft_params, kind, temperature, topk, topp)
  pvalue = chi_square_pvalue(samples, dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} for {kind} {temperature} {topk} {topp}'
  drafted = int(np.sum(stats.drafted))
  if kind == 'lookup':
    assert drafted > N // 2  # the test exercises drafts, not only bonus tokens
    if (temperature, topk, topp) == (1.0, 0, 0.0):  # (top-p may exclude every draft)
      assert int(np.sum(stats.accepted)) > 0


@pytest.mark.parametrize('kind', ['lookup', 'bigram', 'lookup+model'])
def test_drafter_block_verification_matches_target(models, kind):
  model, params, draft_params = models
  dist = exact_distribution(model, params, IDENTITY, 1.0, 0, 0.0)
  samples, _ = drafter_samples(model, params, draft_params, kind, 1.0, 0, 0.0,
                               verification='block')
  pvalue = chi_square_pvalue(samples, dist)
  assert pvalue >= P_MIN, f'chi-square p={pvalue:.2e} for {kind} block'


def test_planted_smoothed_lookup_q_fails(models, monkeypatch):
  """A lookup that drafts deterministically but reports a smoothed q (0.5 on its token,
  the rest spread evenly) breaks Theorem 3.5's premise: it must fail."""
  model, params, draft_params = models
  dist = exact_distribution(model, params, IDENTITY, 1.0, 0, 0.0)

  def smoothed(tokens, vocab_size, r):
    return 0.5 * jax.nn.one_hot(tokens, vocab_size) + 0.5 / vocab_size
  monkeypatch.setattr(drafters, '_one_hot_q', smoothed)
  samples, _ = drafter_samples(model, params, draft_params, 'lookup', 1.0, 0, 0.0)
  assert chi_square_pvalue(samples, dist) < P_MIN


def test_lenience_is_not_exact(models):
  """Lenience l < 1 (paper Appendix A.5) accepts more and is detectably not the target's
  distribution; l = 1 is the exact rule (the same samples as the default)."""
  model, params, draft_params = models
  dist = exact_distribution(model, params, IDENTITY, 1.0, 0, 0.0)
  exact, s1 = drafter_samples(model, params, draft_params, 'bigram', 1.0, 0, 0.0)
  same, _ = drafter_samples(model, params, draft_params, 'bigram', 1.0, 0, 0.0, lenience=1.0)
  np.testing.assert_array_equal(exact, same)
  lenient, s2 = drafter_samples(model, params, draft_params, 'bigram', 1.0, 0, 0.0,
                                lenience=0.3)
  assert chi_square_pvalue(lenient, dist) < P_MIN
  assert np.sum(s2.accepted) > np.sum(s1.accepted)


@pytest.mark.parametrize('kind', KINDS)
def test_drafter_greedy_equals_baseline(pair, kind):
  """T = 0: every drafter gives the greedy baseline's tokens, on a batch of 3 rows with
  sources that do and do not repeat in the output."""
  m, p = pair.model, pair.params
  enc = jnp.array([[5, 9, 13, 22, 7, 1, 0, 0], [40, 41, 1, 0, 0, 0, 0, 0],
                   [8, 8, 8, 9, 9, 1, 0, 0]], jnp.int32)
  max_len, gamma = 12, 4
  base, _ = generate.t5_generate(m, p, enc, max_len)
  step = t5.make_step_fn(m, p)
  if kind in ('lookup', 'lookup_never'):
    # The target's own greedy output as the source: lookup proposes (and the target
    # accepts) long blocks; 'lookup_never' looks up in the encoder input.
    src = base[:, 0] if kind == 'lookup' else enc
    drafter, state = drafters.LookupDrafter(), src
  elif kind in ('bigram', 'unigram'):
    order = 2 if kind == 'bigram' else 1
    drafter = drafters.NgramTableDrafter(order=order)
    rng = np.random.default_rng(0)
    rows = 64 if order == 2 else 1
    state = (jnp.asarray(rng.integers(0, 64, (rows, 4)), jnp.int32),
             jnp.full((rows, 4), -np.log(4.0), jnp.float32))
  else:
    dstep = t5.make_step_fn(pair.draft_model, pair.draft_params)
    drafter = drafters.LookupThenModel(drafters.LookupDrafter(max_ngram=3, min_ngram=2),
                                       drafters.ModelDrafter(dstep))
    state = None

  @jax.jit
  def run(enc, state):
    length = generate.cache_length(max_len, gamma)
    tc = t5.encode_and_init_cache(m, p, enc, length)
    if state is None:
      dc = t5.encode_and_init_cache(pair.draft_model, pair.draft_params, enc, length)
      state = (enc, dc, drafter.initial_valid(enc.shape[0]))
    return decoding.speculative_sample(
        jnp.zeros((enc.shape[0], max_len), jnp.int32), tc, step, state, None, eos_id=1,
        gamma=gamma, vocab_size=m.config.vocab_size, temperature=0.0, drafter=drafter)
  out, _, stats = run(enc, state)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(base))
  if kind == 'lookup':  # copying the right answer: nearly every draft accepted
    assert float(np.sum(stats.accepted)) >= 0.8 * float(np.sum(stats.drafted)) > 0
    assert int(np.sum(stats.target_calls)) < int(np.sum(stats.tokens)) // 2


def test_lookup_continuation_rules():
  """Longest match first, then the most recent; continuations stay in their segment."""
  source = jnp.array([[10, 11, 12, 13, 1, 0], [10, 11, 12, 13, 1, 0], [7, 8, 1, 0, 0, 0]],
                     jnp.int32)
  # sequences: index 0 = start token, y_1.. after.
  seqs = jnp.array([[0, 20, 11, 12, 0, 0, 0, 0],     # suffix (11, 12): source match at 12
                    [0, 11, 30, 31, 11, 0, 0, 0],    # suffix 11: text match (index 1) is
                                                     # more recent than the source's
                    [0, 5, 6, 0, 0, 0, 0, 0]], jnp.int32)  # nothing matches
  n = jnp.array([3, 4, 2], jnp.int32)
  tokens, count = drafters.lookup_continuation(source, seqs, n, gamma=4, max_ngram=3,
                                               min_ngram=1)
  np.testing.assert_array_equal(np.asarray(count), [2, 3, 0])
  np.testing.assert_array_equal(np.asarray(tokens[0, :2]), [13, 1])
  np.testing.assert_array_equal(np.asarray(tokens[1, :3]), [30, 31, 11])
  # min_ngram = 2: row 1's single-token suffix no longer counts.
  _, count = drafters.lookup_continuation(source, seqs, n, gamma=4, max_ngram=3, min_ngram=2)
  np.testing.assert_array_equal(np.asarray(count), [2, 0, 0])


def test_lookup_then_model_catches_up(pair):
  """After lookup rounds the model's cache lags; the model's draft after catch-up equals
  the draft of a model whose cache was fed every committed token."""
  m, p = pair.draft_model, pair.draft_params
  enc = jnp.array([[5, 9, 13, 1], [6, 7, 1, 0]], jnp.int32)
  step = t5.make_step_fn(m, p)
  gamma, text_len = 3, 12
  seqs = jnp.array([[0, 4, 8, 15, 16, 23, 42, 3, 2, 9, 9, 9, 9],
                    [0, 7, 7, 5, 6, 0, 0, 0, 0, 0, 0, 0, 0]], jnp.int32)
  n = jnp.array([9, 4], jnp.int32)
  cache0 = t5.encode_and_init_cache(m, p, enc, text_len + 1)
  full = drafters.ModelDrafter(step)
  combo = drafters.LookupThenModel(drafters.LookupDrafter(max_ngram=2, min_ngram=2), full)

  def round_info(seqs, n):
    prev = jnp.take_along_axis(seqs, jnp.maximum(n - 1, 0)[:, None], 1)[:, 0]
    cur = jnp.take_along_axis(seqs, n[:, None], 1)[:, 0]
    return drafters.Round(prev=prev, cur=cur, n=n, sequences=seqs,
                          n_drafted=jnp.full((2,), gamma, jnp.int32), forced=None,
                          uniforms=None, temperature=0.0, topk=0, topp=0.0,
                          vocab_size=m.config.vocab_size, real_vocab_size=None,
                          may_be_greedy=True, active=jnp.ones((2,), bool))
  # Reference: feed every committed input d_0..d_{n-2}, then draft.
  _, fed = step(seqs[:, :8], jnp.zeros((2,), jnp.int32), cache0)
  ref_tokens, _, _, _ = full.draft(fed, round_info(seqs, n), gamma)
  # Combination whose model cache holds only positions < 1 (row 0) and < 2 (row 1);
  # no source match for the suffixes, so the model drafts after catching up.
  _, lagging = step(seqs[:, :2], jnp.zeros((2,), jnp.int32), cache0)
  state = (jnp.array([[50, 51, 1], [52, 53, 1]], jnp.int32), lagging,
           jnp.array([1, 2], jnp.int32))
  tokens, _, count, state = combo.draft(state, round_info(seqs, n), gamma)
  np.testing.assert_array_equal(np.asarray(count), [gamma, gamma])
  np.testing.assert_array_equal(np.asarray(tokens), np.asarray(ref_tokens))


def test_bad_drafter_settings_raise():
  with pytest.raises(ValueError, match='min_ngram'):
    drafters.LookupDrafter(max_ngram=2, min_ngram=3)
  with pytest.raises(ValueError, match='lenience'):
    decoding.speculative_sample(jnp.zeros((1, 4), jnp.int32), None, None, None, None, 1, 2, 8,
                                lenience=0.0)
  with pytest.raises(ValueError, match="verification='token'"):
    decoding.speculative_sample(jnp.zeros((1, 4), jnp.int32), None, None, None, None, 1, 2, 8,
                                lenience=0.5, verification='block')
