"""Our decoders as T5X `decode_fn`s: T5X's calling convention and prompt layout.

T5X passes `decode_fn` the shifted-right prompt `[0, p1, p2, …]` (BOS at 0); ours take
`[p1, p2, …]`. The same prompt in either layout must give the same output.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import decoding, generate
from specdec_jax.interop.t5x import decoding as t5x_decoding
from specdec_jax.models import t5
from specdec_jax.interop.t5x.features import ours_prompt_to_t5x, t5x_prompt_to_ours
from specdec_jax.interop.t5x.model import SpeculativeEncoderDecoderModel

ENC = np.array([[5, 6, 7, 8, 9, 1], [11, 12, 13, 1, 0, 0], [14, 1, 0, 0, 0, 0]], np.int32)
L = 8
KEY = jax.random.PRNGKey(3)


def t5x_prompt():
  """T5X layout: BOS 0, then the forced tokens; row 2 has no prompt."""
  p = np.zeros((3, L), np.int32)
  p[0, 1:4] = [20, 21, 22]
  p[1, 1:2] = [30]
  return p


def test_layout_converters():
  p = t5x_prompt()
  ours = np.asarray(t5x_prompt_to_ours(p))
  np.testing.assert_array_equal(ours[0, :4], [20, 21, 22, 0])
  np.testing.assert_array_equal(ours[1, :2], [30, 0])
  assert not ours[2].any() and not ours[:, -1].any()
  np.testing.assert_array_equal(ours_prompt_to_t5x(ours), p)
  # T5X ignores column 0 (the BOS slot); so does the conversion.
  p2 = p.copy()
  p2[:, 0] = 7
  np.testing.assert_array_equal(t5x_prompt_to_ours(p2), ours)
  with pytest.raises(ValueError, match='max_decode_len'):
    t5x_prompt_to_ours(p[0])


@functools.partial(jax.jit, static_argnames=('fn', 'num_decodes', 'temperature', 'topk',
                                             'model'))
def _baseline(fn, params, prompt, key, *, num_decodes, temperature, topk, model):
  cache = t5.encode_and_init_cache(model, params, jnp.asarray(ENC), L)
  ttl = decoding.tokens_to_logits_from_step_fn(t5.make_step_fn(model, params))
  return fn(prompt, cache, ttl, 1, decode_rng=key, num_decodes=num_decodes,
            temperature=temperature, topk=topk)


@pytest.mark.parametrize('temperature,topk,num_decodes', [(0.0, 1, 1), (1.0, 0, 2)])
def test_temperature_sample_t5x_layout_equals_ours(pair, temperature, topk, num_decodes):
  p = t5x_prompt()
  kw = dict(num_decodes=num_decodes, temperature=temperature, topk=topk)
  ref, ref_lp = _baseline(decoding.temperature_sample, pair.params, t5x_prompt_to_ours(p), KEY,
                    model=pair.model, **kw)
  got, got_lp = _baseline(t5x_decoding.temperature_sample, pair.params, p, KEY, model=pair.model,
                    **kw)
  assert got.shape == (3, num_decodes, L)
  np.testing.assert_array_equal(got, ref)
  np.testing.assert_allclose(got_lp, ref_lp, rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(got[0, :, :3], [[20, 21, 22]] * num_decodes)
  assert np.all(got[1, :, 0] == 30)


# ------------------------------------------- T5X's own flax cache and one-token decoder

V = 12
TABLE = np.random.RandomState(0).randn(V, V).astype(np.float32)


def _t5x_style_tokens_to_logits(state):
  """A bigram 'decoder' on a T5X-style flax cache (scalar `cache_index`, additive
  one-hot writes). It reads its input from `state.sequences` in T5X's layout (the
  token at position `cur_index`), so a wrongly shifted layout changes its output."""
  cache = state.cache
  idx = cache['decoder']['cache_index']
  token = jnp.take_along_axis(state.sequences, state.cur_index[:, None], axis=1)[:, 0]
  one_hot = jax.nn.one_hot(idx, L, dtype=jnp.int32)[None]
  seen = cache['decoder']['cached_key'] + one_hot * token[:, None]
  new = {'decoder': {'cache_index': idx + 1, 'cached_key': seen}}
  return jnp.asarray(TABLE)[token], new


def _bigram_reference(prompt_t5x, eos_id):
  """T5X `temperature_sample` semantics at temperature 0, in NumPy."""
  out = np.zeros_like(prompt_t5x)
  for b, row in enumerate(prompt_t5x):
    seq = list(row) + [0]
    for i in range(L):
      nxt = seq[i + 1] if seq[i + 1] != 0 else int(np.argmax(TABLE[seq[i]]))
      seq[i + 1] = nxt
      out[b, i] = nxt
      if nxt == eos_id and row[i + 1] == 0:
        break
  return out


def test_temperature_sample_with_t5x_flax_cache():
  p = np.zeros((3, L), np.int32)
  p[0, 1:3] = [4, 5]
  p[1, 1] = 9
  cache = {'decoder': {'cache_index': jnp.array(0, jnp.int32),
                       'cached_key': jnp.zeros((3, L), jnp.int32)}}
  eos = int(np.argmax(TABLE[int(np.argmax(TABLE[5]))]))  # reached after row 0's prompt
  fn = jax.jit(lambda c, p: t5x_decoding.temperature_sample(
      p, c, _t5x_style_tokens_to_logits, eos, num_decodes=2, temperature=0.0))
  decodes, scores = fn(cache, p)
  assert decodes.shape == (3, 2, L) and scores.shape == (3, 2)
  ref = _bigram_reference(p, eos)
  np.testing.assert_array_equal(decodes[:, 0], ref)
  np.testing.assert_array_equal(decodes[:, 1], ref)
  # T5X's cache expansion: batch leaves repeated per decode, the scalar index kept.
  expanded = t5x_decoding.expand_cache(cache, 2)
  assert expanded['decoder']['cache_index'].shape == ()
  assert expanded['decoder']['cached_key'].shape == (6, L)
  idx = {'decoder': {'cache_index': jnp.arange(3), 'cached_bias': jnp.ones((1, 4))}}
  out = t5x_decoding.expand_cache(idx, 2, apply_to_index=True)
  np.testing.assert_array_equal(out['decoder']['cache_index'], [0, 0, 1, 1, 2, 2])
  assert out['decoder']['cached_bias'].shape == (1, 4)


def test_temperature_sample_argument_errors(pair):
  p = t5x_prompt()
  ttl = lambda state: (None, state.cache)
  with pytest.raises(ValueError, match='logit_callback_fn'):
    t5x_decoding.temperature_sample(p, None, ttl, 1, logit_callback_fn=lambda l, s: l)
  with pytest.raises(ValueError, match='Cannot decode more steps'):
    t5x_decoding.temperature_sample(p, None, ttl, 1, max_decode_steps=L + 1)
  with pytest.raises(ValueError, match='eos_id'):
    t5x_decoding.temperature_sample(p, None, ttl, 1.5)
  with pytest.raises(ValueError, match='target_module'):
    t5x_decoding.speculative_sample(p, None, ttl, 1, draft_module=pair.draft_model,
                                    draft_params=pair.draft_params)


# ------------------------------------------------------------- speculative sampling

@pytest.mark.parametrize('temperature', [0.0, 1.0])
def test_speculative_sample_t5x_layout_equals_ours(pair, temperature):
  p = t5x_prompt()
  ref, ref_lp, ref_stats = generate.t5_speculative_generate(
      pair.model, pair.params, pair.draft_model, pair.draft_params, ENC, L, 3,
      temperature=temperature, num_decodes=2, decode_rng=KEY,
      decoder_prompt=t5x_prompt_to_ours(p))

  @jax.jit
  def run(params, draft_params, prompt, key):
    return t5x_decoding.speculative_sample(
        prompt, None, None, 1, decode_rng=key, num_decodes=2, temperature=temperature,
        topk=0, draft_module=pair.draft_model, draft_params=draft_params, gamma=3,
        target_module=pair.model, target_params=params, encoder_input_tokens=ENC,
        return_stats=True)
  got, got_lp, stats = run(pair.params, pair.draft_params, p, KEY)
  np.testing.assert_array_equal(got, ref)
  np.testing.assert_allclose(got_lp, ref_lp, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(stats.target_calls, ref_stats.target_calls)
  np.testing.assert_array_equal(got[0, :, :3], [[20, 21, 22]] * 2)


def test_model_decode_fns_get_t5x_convention(pair):
  """Our model class calls a decode_fn as T5X's EncoderDecoderModel does (T5X-layout
  prompt, `functools.partial(self._compute_logits_from_slice, params=…,
  encoded_inputs=…, raw_inputs=…)`): both adapters give our layout's output."""
  class Vocab:
    vocab_size, eos_id = 60, 1
  dit = np.zeros((3, L), np.int32)
  dit[0, 1:4] = [20, 21, 22]
  dit[1, 1:3] = [30, 1]  # T5X strips EOS from the prompt
  ours = t5x_prompt_to_ours(dit * (dit != 1))
  batch = {'encoder_input_tokens': ENC, 'decoder_input_tokens': dit}
  ref, _ = generate.t5_generate(pair.model, pair.params, ENC, L, decoder_prompt=ours)

  base = SpeculativeEncoderDecoderModel(
      pair.model, Vocab(), Vocab(), None, decode_fn=t5x_decoding.temperature_sample,
      draft_module=pair.draft_model, draft_params=pair.draft_params)
  got, aux = base.predict_batch_with_aux(pair.params, batch, prompt_with_targets=True)
  np.testing.assert_array_equal(got, ref[:, 0])
  assert set(aux) == {'scores'}
  with pytest.raises(ValueError, match='gamma'):  # not an argument of temperature_sample
    base.predict_batch_with_aux(pair.params, batch, decoder_params={'gamma': 2})

  spec = SpeculativeEncoderDecoderModel(
      pair.model, Vocab(), Vocab(), None,
      decode_fn=functools.partial(t5x_decoding.speculative_sample, gamma=3),
      draft_module=pair.draft_model)
  # The draft comes from params['draft'] (an argument), the target from the partial.
  full = {**pair.params, 'draft': pair.draft_params}
  got, _ = spec.predict_batch_with_aux(full, batch, prompt_with_targets=True)
  np.testing.assert_array_equal(got, ref[:, 0])


def test_as_t5_module_from_a_t5x_config(pair):
  """T5X's network.Transformer carries a T5Config with the same field names."""
  fields = [(f.name, f.type) for f in dataclasses.fields(pair.config)
            if not f.name.startswith('relative_attention')]
  T5XConfig = dataclasses.make_dataclass('T5Config', fields, frozen=True)  # noqa: N806
  cfg = T5XConfig(**{name: getattr(pair.config, name) for name, _ in fields})
  module = t5x_decoding.as_t5_module(type('Transformer', (), {'config': cfg})())
  assert isinstance(module, t5.Transformer) and module.config == pair.config
  Extra = dataclasses.make_dataclass('T5Config', fields + [('scan_layers', bool)])  # noqa: N806
  with pytest.raises(ValueError, match='scan_layers'):
    t5x_decoding.as_t5_module(type('M', (), {'config': Extra(
        **{name: getattr(pair.config, name) for name, _ in fields}, scan_layers=True)})())
