"""`temperature_sample` behaves like T5X's `decoding.temperature_sample`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import decoding
from specdec_jax.generate import t5 as generate  # the module: its jitted programs are patched here
from specdec_jax.decoding import sampling
from specdec_jax.models import t5

ENC = np.array([[5, 6, 7, 8, 9, 1], [10, 11, 12, 1, 0, 0], [13, 1, 0, 0, 0, 0]], np.int32)


def _full_logits(pair, enc, dec_tokens):
  """Teacher-forced logits of the decoded tokens, from a full forward pass."""
  dec_in = jnp.concatenate([jnp.zeros_like(dec_tokens[:, :1]), dec_tokens[:, :-1]], axis=1)
  return pair.model.apply({'params': pair.params}, enc, dec_in, jnp.ones_like(dec_in),
                          enable_dropout=False)


def test_greedy_is_argmax_of_full_forward_pass(pair):
  decodes, log_probs = generate.t5_generate(pair.model, pair.params, ENC, 12, eos_id=1)
  assert decodes.shape == (3, 1, 12) and log_probs.shape == (3, 1)
  out = decodes[:, 0]
  logits = _full_logits(pair, ENC, out)
  np.testing.assert_array_equal(np.asarray(jnp.argmax(logits, -1)), np.asarray(out))
  np.testing.assert_array_equal(np.asarray(log_probs), 0.0)  # greedy + rescale: T5X's 0


def _eos_target(pair, eos_id, eos_position):
  """Target whose EOS logit is boosted at one decoder position (forces EOS there)."""
  step = t5.make_step_fn(pair.model, pair.params)

  def step_fn(tokens, lengths, cache):
    logits, cache = step(tokens, lengths, cache)
    pos = lengths[:, None] + jnp.arange(tokens.shape[1])[None] + 1  # predicted position
    boost = jnp.where(pos == eos_position[:, None], 1e4, 0.0)
    return logits.at[..., eos_id].add(boost), cache
  return step_fn


def test_eos_ends_row_and_rest_is_padding(pair):
  cache = t5.encode_and_init_cache(pair.model, pair.params, ENC, 10)
  eos_at = jnp.array([3, 7, 99])  # row 2 never ends early
  step_fn = _eos_target(pair, 1, eos_at)
  fn = jax.jit(lambda c: decoding.temperature_sample(
      jnp.zeros((3, 10), jnp.int32), c, decoding.tokens_to_logits_from_step_fn(step_fn),
      eos_id=1, temperature=0.0))
  out = np.asarray(fn(cache)[0][:, 0])
  assert out[0, 2] == 1 and (out[0, 3:] == 0).all() and (out[0, :2] != 1).all()
  assert out[1, 6] == 1 and (out[1, 7:] == 0).all()
  assert (out[2] != 0).all()


def test_forced_prompt_kept_and_not_scored(pair):
  prompt = np.zeros((3, 10), np.int32)
  prompt[0, :3] = [20, 21, 22]
  prompt[1, :1] = [30]
  rng = jax.random.PRNGKey(3)
  out, lp = generate.t5_generate(pair.model, pair.params, ENC, 10, eos_id=1,
                                 temperature=1.0, decoder_prompt=prompt, decode_rng=rng)
  out = np.asarray(out[:, 0])
  np.testing.assert_array_equal(out[0, :3], [20, 21, 22])
  assert out[1, 0] == 30
  # Log-prob = sum over generated (non-prompt) tokens of log p(token), from a full pass.
  logits = _full_logits(pair, ENC, jnp.asarray(out))
  logp = np.asarray(jax.nn.log_softmax(logits, -1))
  for b, plen in enumerate([3, 1, 0]):
    toks = out[b]
    end = np.argmax(toks == 1) + 1 if (toks == 1).any() else len(toks)
    want = sum(logp[b, t, toks[t]] for t in range(plen, end))
    np.testing.assert_allclose(float(lp[b, 0]), want, rtol=1e-4, atol=1e-4)


def test_topk_and_topp_restrict_support(pair):
  enc = jnp.asarray(np.repeat(ENC[:1], 64, axis=0))
  logits = _full_logits(pair, enc[:1], jnp.zeros((1, 1), jnp.int32))[0, 0]
  order = np.argsort(-np.asarray(logits))
  out, _ = generate.t5_generate(pair.model, pair.params, enc, 1, eos_id=1, temperature=1.0,
                                topk=3, decode_rng=jax.random.PRNGKey(0))
  assert set(np.asarray(out[:, 0, 0]).tolist()) <= set(order[:3].tolist())
  probs = np.asarray(jax.nn.softmax(logits))
  nucleus = order[:np.searchsorted(np.cumsum(probs[order]), 0.3) + 1]
  out, _ = generate.t5_generate(pair.model, pair.params, enc, 1, eos_id=1, temperature=1.0,
                                topp=0.3, decode_rng=jax.random.PRNGKey(0))
  assert set(np.asarray(out[:, 0, 0]).tolist()) <= set(nucleus.tolist())
  std = sampling.standardize(logits[None], 1.0, topk=3)
  assert int(jnp.sum(std > sampling.NEG_INF / 2)) == 3


def test_num_decodes_sorted_and_max_decode_steps(pair):
  out, lp = generate.t5_generate(pair.model, pair.params, ENC, 8, eos_id=1, temperature=1.0,
                                 num_decodes=5, decode_rng=jax.random.PRNGKey(1))
  assert out.shape == (3, 5, 8) and lp.shape == (3, 5)
  assert (np.diff(np.asarray(lp), axis=1) >= 0).all()
  assert len({tuple(r) for r in np.asarray(out[0])}) > 1
  out, _ = generate.t5_generate(pair.model, pair.params, ENC, 8, eos_id=1,
                                max_decode_steps=3)
  full, _ = generate.t5_generate(pair.model, pair.params, ENC, 8, eos_id=1)
  np.testing.assert_array_equal(np.asarray(out[:, 0, 3:]), 0)
  np.testing.assert_array_equal(np.asarray(out[:, 0, :3]), np.asarray(full[:, 0, :3]))


def test_per_row_temperature(pair):
  temps = jnp.array([0.0, 1.0, 0.0])
  out, _ = generate.t5_generate(pair.model, pair.params, ENC, 8, eos_id=1, temperature=temps,
                                decode_rng=jax.random.PRNGKey(5))
  greedy, _ = generate.t5_generate(pair.model, pair.params, ENC, 8, eos_id=1)
  np.testing.assert_array_equal(np.asarray(out)[[0, 2]], np.asarray(greedy)[[0, 2]])


@pytest.mark.parametrize('kwargs, match', [
    (dict(topk=3, topp=0.5), 'At most one of topk and topp'),
    (dict(temperature=-1.0), 'temperature must be >= 0'),
    (dict(num_decodes=0), 'num_decodes'),
    (dict(max_decode_steps=0), 'max_decode_steps'),
])
def test_bad_arguments_raise_before_compiling(pair, kwargs, match, monkeypatch):
  def no_compile(*a, **k):
    raise AssertionError('compiled before validating')
  monkeypatch.setattr(generate, '_generate', no_compile)
  with pytest.raises(ValueError, match=match):
    generate.t5_generate(pair.model, pair.params, ENC, 8, eos_id=1, **kwargs)
