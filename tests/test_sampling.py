"""The inverse-CDF sampler (`sampling.inverse_cdf`).

Statistical test: a fixed 300-id distribution (not a multiple of the 128-id block;
zero-probability ids at both ends, inside a block and a whole zero block; masses from
1e-6 to 0.2). N = 200,000 draws with seed 0 in one call, compared with the exact
probabilities by a chi-square goodness-of-fit test (ids with expected count < 5
merged); passes when p-value ≥ 1e-3. A planted wrong variant — one uniform reused for
both levels of the search instead of two independent ones — must fail the same test.
Zero-probability ids must never be drawn, also at the edges of [0, 1).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats as scipy_stats

from specdec_jax import decoding
from specdec_jax.decoding import sampling

N, P_MIN, V = 200_000, 1e-3, 300


def _probs():
  rng = np.random.default_rng(3)
  p = rng.gamma(0.3, size=V)
  p[[0, 1, 77, 299]] = 0.0  # zeros at both ends and inside the first block
  p[128:256] = 0.0  # a whole block of zeros
  p[5] = 1e-6 * p.sum()  # a rare id
  return p / p.sum()


def _pvalue(samples, p):
  observed = np.bincount(samples, minlength=V).astype(np.float64)
  assert observed[p == 0].sum() == 0, 'an id of probability 0 was drawn'
  expected = p * len(samples)
  small = expected < 5
  obs = np.append(observed[~small], observed[small].sum())
  exp = np.append(expected[~small], expected[small].sum())
  return scipy_stats.chisquare(obs, exp).pvalue


def test_inverse_cdf_matches_the_distribution():
  p = _probs()
  probs = jnp.broadcast_to(jnp.asarray(p, jnp.float32), (N, V))
  u = jax.random.uniform(jax.random.PRNGKey(0), (N, 2))
  samples = np.asarray(jax.jit(sampling.inverse_cdf)(u, probs))
  assert _pvalue(samples, p) >= P_MIN


def test_planted_shared_uniform_fails():
  p = _probs()
  probs = jnp.broadcast_to(jnp.asarray(p, jnp.float32), (N, V))
  u = jax.random.uniform(jax.random.PRNGKey(0), (N, 1))
  samples = np.asarray(jax.jit(sampling.inverse_cdf)(jnp.concatenate([u, u], 1), probs))
  assert _pvalue(samples, p) < P_MIN


def test_edges_of_the_unit_interval_never_draw_zero_probability_ids():
  p = jnp.asarray(_probs(), jnp.float32)
  top = np.float32(1) - np.float32(2 ** -24)  # the largest float32 below 1
  u = jnp.asarray([[0, 0], [0, top], [top, 0], [top, top]], jnp.float32)
  ids = np.asarray(sampling.inverse_cdf(u, jnp.broadcast_to(p, (4, V))))
  positive = np.flatnonzero(np.asarray(p) > 0)
  first_block_last = positive[positive < 128].max()
  assert list(ids) == [positive[0], first_block_last, positive[positive >= 256].min(),
                       positive[-1]]
  # Unnormalized weights and a vocabulary smaller than one block.
  w = jnp.asarray([[0.0, 2.0, 0.0, 6.0, 0.0]] * 3)
  ids = sampling.inverse_cdf(jnp.asarray([[0, 0], [0, 0.25], [0, top]]), w)
  assert list(np.asarray(ids)) == [1, 3, 3]


def test_one_hot_rows_draw_their_id():
  ids = jnp.asarray([0, 127, 128, 8191])
  probs = jax.nn.one_hot(ids, 8192)
  u = jax.random.uniform(jax.random.PRNGKey(1), (4, 2))
  np.testing.assert_array_equal(np.asarray(sampling.inverse_cdf(u, probs)), ids)


def test_baseline_sampler_option(pair):
  """'gumbel' (default) is T5X's sampler; 'inverse_cdf' is accepted; others raise."""
  from specdec_jax import generate  # pylint: disable=g-import-not-at-top
  tokens = jnp.asarray([[3, 4, 5, 1], [6, 7, 1, 0]], jnp.int32)
  common = dict(temperature=1.0, decode_rng=jax.random.PRNGKey(0))
  default, _ = generate.t5_generate(pair.model, pair.params, tokens, 8, **common)
  gumbel, _ = generate.t5_generate(pair.model, pair.params, tokens, 8, sampler='gumbel',
                                   **common)
  np.testing.assert_array_equal(np.asarray(default), np.asarray(gumbel))
  inv, _ = generate.t5_generate(pair.model, pair.params, tokens, 8, sampler='inverse_cdf',
                                **common)
  assert np.asarray(inv).shape == np.asarray(gumbel).shape
  with pytest.raises(ValueError, match='sampler must be one of'):
    generate.t5_generate(pair.model, pair.params, tokens, 8, sampler='multinomial', **common)
  with pytest.raises(ValueError, match='sampler must be one of'):
    decoding.temperature_sample(jnp.zeros((1, 4), jnp.int32), None, None, 1,
                                sampler='topk')
