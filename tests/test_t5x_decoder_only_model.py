"""`SpeculativeDecoderOnlyModel`: T5X's `DecoderOnlyModel` contract, decoding speculatively.

Greedy `predict_batch_with_aux` on seqio-`DecoderFeatureConverter` features (prompts of
different lengths per row) returns what our baseline returns in T5X's layout
(`decoder_only_generate(max_length=L)`, itself checked against a loop of full forward
passes in tests/test_decoder_only.py, and against T5X's own `DecoderOnlyModel` by
`scripts/check_t5x_decoder_only.py`), inside `jax.jit` too; `score_batch` counts the
targets only; bad modules and settings are refused at construction. Runs with or without
t5x importable.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import decoding, generate
from specdec_jax.interop.t5x import decoding as t5x_decoding
from specdec_jax.interop.t5x.decoder_only_model import SpeculativeDecoderOnlyModel
from specdec_jax.models import decoder_only as do
from specdec_jax.train import data as data_lib

from test_decoder_only import tiny_config
from test_t5x_model import FakeVocab

L = 14


@pytest.fixture(scope='module')
def tiny():
  cfg = tiny_config()
  target = do.DecoderOnlyTransformer(cfg)
  params = do.init_params(cfg, jax.random.PRNGKey(0))
  draft_cfg = cfg.replace(num_layers=1)
  draft = do.DecoderOnlyTransformer(draft_cfg)
  draft_params = do.init_params(draft_cfg, jax.random.PRNGKey(1))
  return target, params, draft, draft_params


def make_model(tiny, **kwargs):
  target, _, draft, draft_params = tiny
  vocab = FakeVocab(size=37)
  return SpeculativeDecoderOnlyModel(target, vocab, optimizer_def=None, draft_module=draft,
                                     draft_params=draft_params, **kwargs)


def batch():
  inputs = [[5, 6, 1], [7, 1], [8, 9, 10, 11, 1]]
  targets = [[3, 4, 1], [12, 13, 14, 1], [15, 1]]
  feats = data_lib.make_prefix_lm_features(inputs, targets, L, bidirectional=True)
  return feats, inputs


@pytest.mark.parametrize('bidirectional', [False, True])
def test_predict_greedy_is_the_baseline_in_t5x_layout(tiny, bidirectional):
  target, params, _, _ = tiny
  model = make_model(tiny, gamma=3, inputs_bidirectional_attention=bidirectional)
  feats, inputs = batch()
  prompts = data_lib.pad_batch(inputs, L - 1)
  ref, ref_lp = generate.decoder_only_generate(target, params, prompts, L, eos_id=1,
                                               max_length=L,
                                               inputs_bidirectional_attention=bidirectional)
  decodes, aux = model.predict_batch_with_aux(params, feats)
  assert decodes.shape == (3, L) and aux['scores'].shape == (3,)
  np.testing.assert_array_equal(decodes, ref[:, 0])
  np.testing.assert_allclose(aux['scores'], ref_lp[:, 0])
  # A row fills at most L positions with its prompt and generated tokens (T5X).
  generated = np.sum(np.asarray(decodes) != 0, axis=1)
  assert all(g <= L - len(x) for g, x in zip(generated, inputs))
  assert np.all(aux['accepted'] <= aux['drafted'])


def test_predict_inside_jit_with_the_draft_in_params(tiny):
  target, params, _, draft_params = tiny
  model = make_model(tiny, gamma=2, inputs_bidirectional_attention=True)
  feats, _ = batch()
  eager, _ = model.predict_batch_with_aux(params, feats)
  full = model.params_with_draft(params)
  jitted, _ = jax.jit(lambda p, b: model.predict_batch_with_aux(p, b))(full, feats)
  np.testing.assert_array_equal(jitted, eager)
  with pytest.raises(ValueError, match='inside a compiled function'):
    jax.jit(lambda p, b: model.predict_batch_with_aux(p, b))(params, feats)


def test_score_batch_counts_the_targets_only(tiny):
  target, params, _, _ = tiny
  model = make_model(tiny, inputs_bidirectional_attention=True)
  feats, _ = batch()
  scores = model.score_batch(params, feats)
  logits = target.apply({'params': params}, feats['decoder_input_tokens'],
                        feats['decoder_target_tokens'],
                        decoder_causal_attention=feats['decoder_causal_attention'],
                        enable_dropout=False)
  lp = jax.nn.log_softmax(logits)
  token = jnp.take_along_axis(lp, feats['decoder_target_tokens'][..., None], -1)[..., 0]
  np.testing.assert_allclose(scores, jnp.sum(token * feats['decoder_loss_weights'], -1),
                             rtol=1e-5)
  loss, _ = model.loss_fn(params, feats, None)
  assert np.isfinite(float(loss))


def test_initial_variables_hold_the_draft(tiny):
  model = make_model(tiny)
  variables = model.get_initial_variables(jax.random.PRNGKey(0),
                                          {'decoder_input_tokens': (2, L)})
  assert set(variables['params']) == {'decoder', 'draft'}
  assert set(variables['params_axes']) == {'decoder', 'draft'}
  do.check_params(variables['params']['draft'], model.draft_module.config)


def test_bad_settings_are_refused(tiny):
  target, _, draft, _ = tiny
  with pytest.raises(ValueError, match='encoder-decoder speculative decode_fn'):
    make_model(tiny, decode_fn=t5x_decoding.speculative_sample)
  with pytest.raises(ValueError, match='t5x_decoding.temperature_sample'):
    make_model(tiny, decode_fn=decoding.temperature_sample)
  with pytest.raises(ValueError, match='DecoderOnlyTransformer'):
    SpeculativeDecoderOnlyModel(object(), FakeVocab(size=37), None, draft_module=draft)
  with pytest.raises(ValueError, match='gamma'):
    make_model(tiny, gamma=0)
  model = make_model(tiny, inputs_bidirectional_attention=True)
  feats, _ = batch()
  del feats['decoder_causal_attention']
  with pytest.raises(ValueError, match='decoder_causal_attention'):
    model.score_batch(model.draft_params, feats)
  with pytest.raises(ValueError, match='right format'):
    model.predict_batch_with_aux(model.draft_params, feats)


@pytest.mark.parametrize('bidirectional,temperature', [(False, 0.0), (True, 0.0), (True, 1.0)])
def test_a_t5x_decode_fn_is_called_as_t5x_does(tiny, bidirectional, temperature):
  """`decode_fn=t5x_decoding.temperature_sample` (T5X's decoder-only convention: prefilled
  cache, `initial_index`, `remove_prefix`) gives the baseline's tokens and scores, greedy
  and sampled with the same key; `num_decodes` and `return_all_decodes` as T5X."""
  target, params, _, _ = tiny
  model = make_model(tiny, decode_fn=t5x_decoding.temperature_sample, temperature=temperature,
                     inputs_bidirectional_attention=bidirectional)
  feats, inputs = batch()
  prompts = data_lib.pad_batch(inputs, L - 1)
  key = jax.random.PRNGKey(3)
  ref, ref_lp = generate.decoder_only_generate(
      target, params, prompts, L, eos_id=1, max_length=L, temperature=temperature,
      decode_rng=key, inputs_bidirectional_attention=bidirectional)
  decodes, aux = model.predict_batch_with_aux(params, feats, rng=key)
  assert set(aux) == {'scores'} and decodes.shape == (3, L)
  np.testing.assert_array_equal(decodes, ref[:, 0])
  np.testing.assert_allclose(aux['scores'], ref_lp[:, 0], rtol=1e-5)
  if temperature == 0.0:  # the speculative path of the same class gives the same tokens
    spec, _ = make_model(tiny, gamma=3, inputs_bidirectional_attention=bidirectional
                         ).predict_batch_with_aux(params, feats)
    np.testing.assert_array_equal(decodes, spec)
  else:
    all_decodes, all_aux = model.predict_batch_with_aux(
        params, feats, rng=key, num_decodes=2, return_all_decodes=True)
    assert all_decodes.shape == (3, 2, L) and all_aux['scores'].shape == (3, 2)
    assert np.all(np.diff(np.asarray(all_aux['scores']), axis=1) >= 0)  # ascending, as T5X
  with pytest.raises(ValueError, match='initial_index'):
    model.predict_batch_with_aux(params, feats, decoder_params={'initial_index': 1})
  with pytest.raises(ValueError, match='logit_callback_fn is not supported'):
    model.predict_batch_with_aux(params, feats,
                                 decoder_params={'logit_callback_fn': lambda l, s: l})
  # The target alone needs no draft module; the speculative class without one refuses.
  alone = SpeculativeDecoderOnlyModel(target, FakeVocab(size=37), None,
                                      decode_fn=t5x_decoding.temperature_sample,
                                      temperature=temperature,
                                      inputs_bidirectional_attention=bidirectional)
  np.testing.assert_array_equal(alone.predict_batch_with_aux(params, feats, rng=key)[0],
                                decodes)
  with pytest.raises(ValueError, match='draft_module'):
    SpeculativeDecoderOnlyModel(target, FakeVocab(size=37), None)


def test_lookup_needs_no_draft(tiny):
  target, params, _, _ = tiny
  model = SpeculativeDecoderOnlyModel(target, FakeVocab(size=37), None, drafter='lookup',
                                      inputs_bidirectional_attention=True)
  feats, inputs = batch()
  ref, _ = generate.decoder_only_generate(target, params, data_lib.pad_batch(inputs, L - 1),
                                          L, eos_id=1, max_length=L,
                                          inputs_bidirectional_attention=True)
  decodes, _ = model.predict_batch_with_aux(params, feats)
  np.testing.assert_array_equal(decodes, ref[:, 0])


DECODER_ONLY_GINS = ['base', 'large', 'xl', 'xxl']


@pytest.mark.parametrize('size', DECODER_ONLY_GINS)
def test_decoder_only_model_gins_build_t5x_sizes(size, tmp_path, monkeypatch):
  """`specdec_jax/configs/models/decoder_only/<size>.gin` gives T5X's size (PRESETS, from
  t5x/examples/decoder_only/models/<size>.gin) and our T5X model class."""
  import gin
  from specdec_jax.interop.t5x import gin_registry  # noqa: F401  (registers the names)
  from specdec_jax.models.config import PRESETS
  monkeypatch.chdir(tmp_path)
  gin.clear_config()
  try:
    gin.parse_config_file(f'specdec_jax/configs/models/decoder_only/{size}.gin')
    config = gin.get_configurable('network.TransformerConfig')()
    assert config == PRESETS[f'decoder_only_{size}']
    module = gin.get_configurable('network.DecoderWrapper')()
    assert isinstance(module, do.DecoderOnlyTransformer) and module.config == config
    assert gin.query_parameter('models.SpeculativeDecoderOnlyModel.gamma') is not None
  finally:
    gin.clear_config()
