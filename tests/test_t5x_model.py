"""SpeculativeEncoderDecoderModel: T5X's EncoderDecoderModel contract, and the gin configs.

Tiny random models (conftest `pair`: vocab 64, emb 32/16); fake seqio-like vocabularies
(tiny SentencePiece models trained on the fly) so that TensorFlow is never imported.
"""

from __future__ import annotations

import glob
import io
import os
import pathlib
import re

from flax import traverse_util
from flax.linen import partitioning as nn_partitioning
import gin
from gin import config_parser
import jax
import numpy as np
import pytest
import sentencepiece as spm

from specdec_jax import generate
from specdec_jax.interop.t5x import gin_registry as gin_utils  # noqa: F401  (registers network.*, models.*, ...)
from specdec_jax.models import t5
from specdec_jax.models.config import PRESETS
from specdec_jax.interop.t5x.base import HAS_T5X
from specdec_jax.interop.t5x.model import SpeculativeEncoderDecoderModel

REPO = pathlib.Path(__file__).resolve().parent.parent
MAX_LEN = 8
ENC = np.array([[5, 6, 7, 8, 9, 1], [11, 12, 13, 1, 0, 0], [14, 1, 0, 0, 0, 0]], np.int32)


def _tiny_t5x() -> pathlib.Path:
  """T5X's test checkpoint in the shared data (`$SPECDEC_DATA`, else ../shared/data)."""
  from specdec_jax.util import paths  # pylint: disable=g-import-not-at-top
  try:
    root = paths.data_dir()
  except FileNotFoundError:  # no data folder: the tests that need it are skipped
    env = os.environ.get('SPECDEC_DATA')
    root = pathlib.Path(env).expanduser() if env else paths.REPO_ROOT.parent / 'shared' / 'data'
  return root / 't5x_checkpoints' / 'test_t5_tiny.checkpoint_0'


TINY_T5X = _tiny_t5x()


class FakeVocab:
  """The parts of `seqio.SentencePieceVocabulary` the model uses."""

  def __init__(self, tokenizer=None, size=60, eos_id=1):
    self.tokenizer = tokenizer
    self.vocab_size = tokenizer.get_piece_size() if tokenizer is not None else size
    self.eos_id = eos_id

  def decode(self, ids):
    return ' '.join(f'<{i}>' for i in ids)


def train_sp(lines, vocab_size=32):
  out = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(lines * 5), model_writer=out, vocab_size=vocab_size,
      model_type='unigram', pad_id=0, eos_id=1, unk_id=2, bos_id=-1,
      hard_vocab_limit=False, minloglevel=2)
  return spm.SentencePieceProcessor(model_proto=out.getvalue())


EN = ['the cat sat on the mat', 'a dog ran in the park', 'the bird sang a song',
      'cats and dogs play', 'the sun is hot today']
DE = ['der hund lief im park', 'die katze sass auf der matte', 'ein vogel sang ein lied',
      'katzen und hunde spielen', 'die sonne ist heiss']


def make_model(pair, **kwargs):
  vocab = kwargs.pop('vocab', FakeVocab(size=60))
  return SpeculativeEncoderDecoderModel(
      pair.model, vocab, vocab, optimizer_def=None, draft_module=pair.draft_model,
      draft_params=kwargs.pop('draft_params', pair.draft_params), **kwargs)


def t5x_batch(decoder_input_tokens=None):
  targets = np.array([[3, 4, 5, 1, 0, 0, 0, 0], [6, 7, 1, 0, 0, 0, 0, 0],
                      [8, 9, 10, 11, 12, 13, 14, 1]], np.int32)
  inputs = np.concatenate([np.zeros((3, 1), np.int32), targets[:, :-1]], axis=1)
  return {'encoder_input_tokens': ENC,
          'decoder_input_tokens': inputs if decoder_input_tokens is None
          else decoder_input_tokens,
          'decoder_target_tokens': targets,
          'decoder_loss_weights': (targets > 0).astype(np.float32)}


@pytest.fixture(scope='module')
def model(pair):
  return make_model(pair, gamma=3)


def greedy_reference(pair, decoder_prompt=None):
  # num_decodes=2 everywhere: one baseline compilation (the prompt is a traced input);
  # at temperature 0 both decodes are the greedy decode.
  return generate.t5_generate(pair.model, pair.params, ENC, MAX_LEN, eos_id=1, num_decodes=2,
                              decoder_prompt=decoder_prompt)


def test_predict_greedy_equals_target_greedy(pair, model):
  batch = t5x_batch()
  ref, ref_lp = greedy_reference(pair)
  decodes, aux = model.predict_batch_with_aux(pair.params, batch, return_all_decodes=True,
                                              num_decodes=2)
  assert decodes.shape == (3, 2, MAX_LEN) and aux['scores'].shape == (3, 2)
  np.testing.assert_array_equal(decodes, ref)
  np.testing.assert_allclose(aux['scores'], ref_lp)
  for key in ('target_calls', 'drafted', 'accepted', 'alpha'):
    assert aux[key].shape == (3, 2), key
  assert np.all(aux['accepted'] <= aux['drafted'])
  assert np.all(aux['drafted'] <= 3 * aux['target_calls'])
  assert np.all((aux['alpha'] >= 0) & (aux['alpha'] <= 1))

  # return_all_decodes=False: the best (last) decode, T5X shapes [batch, len] / [batch].
  best, aux1 = model.predict_batch_with_aux(pair.params, batch, return_all_decodes=False,
                                            num_decodes=2)
  assert best.shape == (3, MAX_LEN) and aux1['scores'].shape == (3,)
  np.testing.assert_array_equal(best, ref[:, -1])
  assert aux1['target_calls'].shape == (3,)


@pytest.mark.parametrize('policy', ['heuristic', 'confidence'])
def test_predict_with_an_adaptive_draft_policy(pair, policy):
  """`draft_policy` reaches the loop: greedy output unchanged, draft lengths ≤ γ."""
  model = make_model(pair, gamma=3, draft_policy=policy)
  assert model.draft_policy.kind == policy
  ref, _ = greedy_reference(pair)
  decodes, aux = model.predict_batch_with_aux(pair.params, t5x_batch(), num_decodes=2,
                                              return_all_decodes=True)
  np.testing.assert_array_equal(decodes, ref)
  assert np.all(aux['drafted'] <= 3 * aux['target_calls'])


def test_predict_default_shapes_and_prompt(pair, model):
  ref, _ = greedy_reference(pair)
  decodes, aux = model.predict_batch_with_aux(pair.params, t5x_batch())
  assert decodes.shape == (3, MAX_LEN) and aux['scores'].shape == (3,)
  np.testing.assert_array_equal(decodes, ref[:, 0])
  np.testing.assert_array_equal(model.predict_batch(pair.params, t5x_batch()), decodes)

  # prompt_with_targets: decoder_input_tokens after the leading 0 are forced (EOS
  # stripped, as in T5X), then decoding continues.
  dit = np.zeros((3, MAX_LEN), np.int32)
  dit[0, 1:4] = [20, 21, 22]
  dit[1, 1:3] = [30, 1]  # EOS in the prompt is stripped
  prompt = np.concatenate([dit[:, 1:] * (dit[:, 1:] != 1), np.zeros((3, 1), np.int32)], 1)
  ref_p, _ = greedy_reference(pair, prompt)
  got, _ = model.predict_batch_with_aux(pair.params, t5x_batch(dit), prompt_with_targets=True)
  np.testing.assert_array_equal(got, ref_p[:, 0])
  np.testing.assert_array_equal(got[0, :3], [20, 21, 22])
  assert got[1, 0] == 30


def test_decoder_params_errors(pair, model):
  batch = t5x_batch()
  with pytest.raises(ValueError, match='both'):
    model.predict_batch_with_aux(pair.params, batch, rng=jax.random.PRNGKey(1),
                                 decoder_params={'decode_rng': jax.random.PRNGKey(2)})
  with pytest.raises(ValueError, match='Unknown decoder_params'):
    model.predict_batch_with_aux(pair.params, batch, decoder_params={'beam_size': 4})
  with pytest.raises(ValueError, match='topk'):
    model.predict_batch_with_aux(pair.params, batch, decoder_params={'topk': 5, 'topp': 0.9})
  with pytest.raises(ValueError, match='gamma'):
    model.predict_batch_with_aux(pair.params, batch, decoder_params={'gamma': 0})
  # One of topk / topp from the constructor, the other from decoder_params: the message
  # names both sources and the fix (raised before any compilation).
  topk_model = make_model(pair, gamma=3, topk=5)
  with pytest.raises(ValueError, match=r"decoder_params\['topp'\]=0.9 conflicts with the "
                     r"model's topk=5 \(set by its constructor or gin\).*decoder_params\['topk'\]=0"):
    topk_model.predict_batch_with_aux(pair.params, batch, decoder_params={'topp': 0.9})
  with pytest.raises(ValueError, match='lacks'):
    model.predict_batch_with_aux(pair.params, {'encoder_input_tokens': ENC})


def _metric(value) -> float:
  """A loss metric's value: a float scalar (standalone class) or, with t5x importable, a
  CLU metric of T5X's `compute_base_metrics` (its `compute()`)."""
  return float(value.compute() if hasattr(value, 'compute') else value)


def test_score_batch_and_loss(pair, model):
  batch = t5x_batch()
  logits = jax.jit(pair.model.apply, static_argnames='enable_dropout')(
      {'params': pair.params}, batch['encoder_input_tokens'], batch['decoder_input_tokens'],
      batch['decoder_target_tokens'], enable_dropout=False)
  lp = jax.nn.log_softmax(np.asarray(logits, np.float64), axis=-1)
  tok = np.take_along_axis(lp, batch['decoder_target_tokens'][..., None], -1)[..., 0]
  expected = np.sum(tok * batch['decoder_loss_weights'], axis=-1)
  scores = model.score_batch(pair.params, batch)
  assert scores.shape == (3,)
  np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-5)

  # Custom loss weights, and the default (targets > 0) when they are absent.
  weights = np.zeros((3, MAX_LEN), np.float32)
  weights[:, 0] = 1.0
  scores_w, inter = model.score_batch(pair.params, dict(batch, decoder_loss_weights=weights),
                                      return_intermediates=True)
  np.testing.assert_allclose(scores_w, tok[:, 0], rtol=1e-5, atol=1e-5)
  assert inter['decoder']['token_scores'][0].shape == (3, MAX_LEN)
  no_w = {k: v for k, v in batch.items() if k != 'decoder_loss_weights'}
  np.testing.assert_allclose(model.score_batch(pair.params, no_w), expected, rtol=1e-5,
                             atol=1e-5)

  # Without smoothing / z-loss the training loss is minus the summed scores.
  loss, metrics = model.loss_fn(pair.params, batch, None)
  np.testing.assert_allclose(loss, -expected.sum(), rtol=1e-5)
  assert set(metrics) >= {'loss', 'z_loss', 'cross_ent_loss', 'accuracy',
                          'loss_per_nonpadding_target_token'}
  weight_sum = batch['decoder_loss_weights'].sum()
  if HAS_T5X:  # T5X's loss_fn: CLU metrics; the weight sum is the per-token average's count
    assert float(metrics['loss_per_nonpadding_target_token'].count) == weight_sum
  else:  # the standalone class: float scalars, with the weight sum as its own metric
    assert float(metrics['weight_sum']) == weight_sum
  np.testing.assert_allclose(_metric(metrics['loss']), -expected.sum(), rtol=1e-5)
  np.testing.assert_allclose(_metric(metrics['cross_ent_loss']), -expected.sum(), rtol=1e-5)
  np.testing.assert_allclose(_metric(metrics['z_loss']), 0.0, atol=1e-6)
  np.testing.assert_allclose(_metric(metrics['loss_per_nonpadding_target_token']),
                             -expected.sum() / weight_sum, rtol=1e-5)
  mask = batch['decoder_loss_weights'] > 0
  hits = np.argmax(lp, -1) == batch['decoder_target_tokens']
  np.testing.assert_allclose(_metric(metrics['accuracy']), hits[mask].mean(), rtol=1e-6)
  # With label smoothing and z-loss (T5X semantics: smoothed targets, minus their
  # entropy constant, plus z_loss * logsumexp(logits)^2, weighted sum).
  ls, zl = 0.1, 1e-4
  smooth = make_model(pair, label_smoothing=ls, z_loss=zl)
  loss_s, metrics_s = smooth.loss_fn(pair.params, batch, None)
  vocab = lp.shape[-1]
  low = ls / (vocab - 1)
  soft = np.full(lp.shape, low) + (1 - ls - low) * np.eye(vocab)[batch['decoder_target_tokens']]
  const = -((1 - ls) * np.log(1 - ls) + (vocab - 1) * low * np.log(low + 1e-20))
  log_z = np.log(np.sum(np.exp(np.asarray(logits, np.float64)), axis=-1))
  w = batch['decoder_loss_weights']
  expected_s = np.sum((-np.sum(soft * lp, -1) - const + zl * log_z ** 2) * w)
  np.testing.assert_allclose(loss_s, expected_s, rtol=1e-4)
  np.testing.assert_allclose(_metric(metrics_s['z_loss']), np.sum(zl * log_z ** 2 * w),
                             rtol=1e-4)
  with pytest.raises(ValueError, match='Packed'):
    model.score_batch(pair.params, dict(batch, decoder_segment_ids=np.ones((3, MAX_LEN))))


def test_get_initial_variables(pair, model):
  # Abstractly, as T5X does (jax.eval_shape of get_initial_variables): no compute.
  shapes = {'encoder_input_tokens': (2, 6), 'decoder_input_tokens': (2, 5)}
  variables = jax.eval_shape(lambda rng: model.get_initial_variables(rng, shapes),
                             jax.random.PRNGKey(0))
  assert set(variables) == {'params', 'params_axes'}
  params, axes = variables['params'], variables['params_axes']
  # The draft lives in the params tree (T5X places / partitions / passes it like any
  # param), with its logical axes next to the target's.
  t5.check_params({k: v for k, v in params.items() if k != 'draft'}, pair.config)
  t5.check_params(params['draft'], pair.draft_config)
  assert axes['token_embedder']['embedding_axes'].names == ('vocab', 'embed')
  assert axes['draft']['token_embedder']['embedding_axes'].names == ('vocab', 'embed')
  # T5X's TrainState.create check (_validate_params_axes): every param has axis names.
  names = nn_partitioning.get_axis_names(axes)
  assert (set(traverse_util.flatten_dict(params, sep='/')) ==
          set(traverse_util.flatten_dict(names, sep='/')))
  assert tuple(names['draft']['decoder']['layers_0']['mlp']['wi_0']['kernel']) == ('embed', 'mlp')
  with pytest.raises(ValueError, match='lacks'):
    model.get_initial_variables(jax.random.PRNGKey(0), {'encoder_input_tokens': (2, 6)})


def test_params_with_draft_and_split(pair, model):
  full = model.params_with_draft(pair.params)
  assert full['draft'] is pair.draft_params and full['decoder'] is pair.params['decoder']
  target, draft = model.split_params(full)
  assert draft is pair.draft_params and 'draft' not in target
  # Target-only params outside a trace: completed from the constructor's draft_params.
  assert model.split_params(pair.params)[1] is pair.draft_params
  with pytest.raises(ValueError, match='already hold'):
    model.params_with_draft(full)
  with pytest.raises(ValueError, match='draft_module.config'):
    model.params_with_draft(pair.params, pair.params)
  # Scoring / the loss ignore params['draft'].
  np.testing.assert_allclose(model.score_batch(full, t5x_batch()),
                             model.score_batch(pair.params, t5x_batch()))
  no_draft = make_model(pair, draft_params=None)
  with pytest.raises(ValueError, match='No draft params'):
    no_draft.split_params(pair.params)


def _constant_sizes(hlo_text: str):
  """Element counts of the non-splat constants in StableHLO text.

  `stablehlo.constant dense<"0x…"> : tensor<64x16xf32>` (or `dense<[[…]]>`) holds
  data baked into the program; splats (`dense<0.0> : tensor<…>`, one value) do not.
  """
  sizes = []
  for match in re.finditer(r'stablehlo\.constant\s+dense<["\[][^:]*:\s*tensor<([^>]*)>',
                           hlo_text):
    dims = [int(d) for d in match.group(1).split('x')[:-1]]
    sizes.append(int(np.prod(dims)) if dims else 1)
  return sizes


def test_predict_step_takes_draft_params_as_arguments(pair, model):
  """T5X jits predict_batch_with_aux with the params as an argument: no draft constants."""
  batch = {k: v for k, v in t5x_batch().items() if k in ('encoder_input_tokens',
                                                           'decoder_input_tokens')}
  full = model.params_with_draft(pair.params)
  step = lambda params, batch: model.predict_batch_with_aux(params, batch)
  text = jax.jit(step).lower(full, batch).as_text()
  smallest_param = min(int(np.size(x)) for x in jax.tree_util.tree_leaves(pair.draft_params))
  assert smallest_param >= 16
  # Every draft (and target) param is an argument: no constant as big as any of them.
  assert max(_constant_sizes(text), default=0) < smallest_param, sorted(_constant_sizes(text))[-5:]
  # The detector finds them when they are closed over (as the old lazy loading did).
  closed = jax.jit(lambda batch: model.predict_batch_with_aux(full, batch)).lower(batch)
  draft_sizes = sorted(int(np.size(x)) for x in jax.tree_util.tree_leaves(pair.draft_params))
  assert sorted(_constant_sizes(closed.as_text()))[-1] >= draft_sizes[-1]
  # Target-only params inside a trace would bake the draft in: refused, with the fix.
  with pytest.raises(ValueError, match='constants'):
    jax.jit(step).lower(pair.params, batch)


def test_constructor_errors(pair):
  with pytest.raises(ValueError, match='gamma'):
    make_model(pair, gamma=0)
  with pytest.raises(ValueError, match='draft_policy'):
    make_model(pair, draft_policy='sometimes')
  with pytest.raises(ValueError, match="verification must be 'token'"):
    make_model(pair, verification='blockwise')
  with pytest.raises(ValueError, match='compilation_cache'):
    make_model(pair, compilation_cache=True)
  with pytest.raises(ValueError, match='Transformer'):
    SpeculativeEncoderDecoderModel(pair.model, None, None, None, draft_module=object(),
                                   draft_params=pair.draft_params)
  with pytest.raises(ValueError, match='params'):  # the target's params for the draft
    make_model(pair, draft_params=pair.params)
  with pytest.raises(ValueError, match='vocab_size'):
    make_model(pair, vocab=FakeVocab(size=100))
  # Our-layout loop as a model decode_fn would misread T5X's prompt layout.
  from specdec_jax import decoding
  with pytest.raises(ValueError, match='t5x_decoding.temperature_sample'):
    make_model(pair, decode_fn=decoding.temperature_sample)


def test_vocabulary_mismatch(pair):
  sp_en, sp_de, sp_en2 = train_sp(EN), train_sp(DE), train_sp(EN)
  assert sp_en.get_piece_size() == sp_de.get_piece_size()
  target_vocab = FakeVocab(sp_en)
  # Same pieces (another object) pass; different pieces fail before compiling.
  make_model(pair, vocab=target_vocab, draft_vocabulary=FakeVocab(sp_en2))
  with pytest.raises(ValueError, match='mismatch at id'):
    make_model(pair, vocab=target_vocab, draft_vocabulary=FakeVocab(sp_de))
  with pytest.raises(ValueError, match='ids'):
    make_model(pair, vocab=target_vocab, draft_vocabulary=FakeVocab(train_sp(EN, 28)))
  with pytest.raises(ValueError, match='eos_id'):
    make_model(pair, vocab=target_vocab, draft_vocabulary=FakeVocab(sp_en2, eos_id=2))


@pytest.mark.skipif(not TINY_T5X.exists(), reason='shared T5X checkpoint fixture missing')
def test_draft_checkpoint_path_is_loaded_lazily():
  from specdec_jax import checkpoints
  config = PRESETS['t5_1_1_small'].replace(emb_dim=8, num_heads=4, head_dim=3, mlp_dim=16,
                                           num_encoder_layers=2, num_decoder_layers=2)
  module = t5.Transformer(config)
  params = jax.device_put(checkpoints.load_t5x_checkpoint(TINY_T5X, config))  # as T5X holds them
  vocab = FakeVocab(size=32100)
  model = SpeculativeEncoderDecoderModel(module, vocab, vocab, None, draft_module=module,
                                         draft_params=str(TINY_T5X), gamma=2)
  assert not model.draft_params_loaded
  enc, length = ENC[:2], 5
  batch = {'encoder_input_tokens': enc, 'decoder_input_tokens': np.zeros((2, length), np.int32)}
  decodes, aux = model.predict_batch_with_aux(params, batch)
  assert model.draft_params_loaded and decodes.shape == (2, length)
  # The draft is the target: every drafted token is accepted.
  np.testing.assert_array_equal(aux['accepted'], aux['drafted'])


# ---------------------------------------------------------------------------- gin configs

CONFIGS = REPO / 'specdec_jax' / 'configs'
MODEL_GINS = sorted(glob.glob(str(CONFIGS / 'models' / 't5_1_*' / '*.gin')))  # T5 sizes
# T5X-only configurables (t5x is not importable here): skipped when parsing our side.
T5X_NAMES = ['adafactor.Adafactor', 'adafactor.standard_logical_factor_rules',
             'utils.RestoreCheckpointConfig']


def test_every_size_has_a_gin_file():
  names = {f'{pathlib.Path(f).parent.name}_{pathlib.Path(f).stem}' for f in MODEL_GINS}
  assert names == {k for k in PRESETS if k.startswith(('t5_1_0_', 't5_1_1_'))}


@pytest.mark.parametrize('path', MODEL_GINS, ids=lambda p: os.path.relpath(p, REPO))
def test_model_gin_builds_preset_config(path, tmp_path, monkeypatch):
  # From another working directory, by the package-relative name T5X users pass.
  monkeypatch.chdir(tmp_path)
  gin.clear_config()
  try:
    gin.parse_config_file(os.path.relpath(path, REPO))
    config = gin.get_configurable('network.T5Config')()
    key = f'{pathlib.Path(path).parent.name}_{pathlib.Path(path).stem}'
    assert config == PRESETS[key]
    module = gin.get_configurable('network.Transformer')()
    assert isinstance(module, t5.Transformer) and module.config == config
    assert gin.query_parameter('models.SpeculativeEncoderDecoderModel.gamma') is not None
    assert gin.query_parameter('seqio.SentencePieceVocabulary.extra_ids') == 100
    assert gin.query_parameter('%OPTIMIZER') is None  # T5X's: configs/t5x/adafactor.gin
  finally:
    gin.clear_config()


class _Statements(config_parser.ParserDelegate):
  """Parses a gin file into plain statements (references as ('@', selector, evaluate))."""

  def configurable_reference(self, scoped_configurable_name, evaluate):
    return ('@', scoped_configurable_name, evaluate)

  def macro(self, macro_name):
    return ('%', macro_name)


def _statements(path):
  with open(path) as f:
    parsed = list(config_parser.ConfigParser(f, _Statements()))
  imports = [(st.module, st.is_from) for st in parsed
             if isinstance(st, config_parser.ImportStatement)]
  bindings = {(st.selector, st.arg_name): st.value for st in parsed
              if isinstance(st, config_parser.BindingStatement)}
  includes = [st.filename for st in parsed if isinstance(st, config_parser.IncludeStatement)]
  return imports, bindings, includes


def test_t5x_optimizer_gin_binds_t5x_adafactor():
  """OPTIMIZER as t5x/examples/t5/t5_1_1/base.gin binds it (T5X's OptimizerDef, not optax)."""
  imports, bindings, _ = _statements(CONFIGS / 't5x' / 'adafactor.gin')
  assert imports == [('__gin__.dynamic_registration', True), ('t5x.adafactor', True)]
  assert bindings == {
      ('OPTIMIZER', ''): ('@', 'adafactor.Adafactor', True),
      ('adafactor.Adafactor', 'decay_rate'): 0.8,
      ('adafactor.Adafactor', 'step_offset'): 0,
      ('adafactor.Adafactor', 'logical_factor_rules'):
          ('@', 'adafactor.standard_logical_factor_rules', True)}


def test_t5x_restore_gin_binds_the_draft_hook():
  from specdec_jax.interop.t5x import restore as t5x_restore
  imports, bindings, _ = _statements(CONFIGS / 't5x' / 'restore_draft.gin')
  assert ('t5x.utils', True) in imports and ('specdec_jax.interop.t5x.restore', True) in imports
  assert bindings == {
      ('utils.RestoreCheckpointConfig', 'state_transformation_fns'):
          [('@', 't5x_restore.add_draft_params', False)],
      ('t5x_restore.add_draft_params', 'draft_checkpoint'): ('%', 'DRAFT_CHECKPOINT')}
  # T5X calls it as fn(state_dict, target_state_dict[, is_resuming=...]).
  import inspect
  sig = inspect.signature(t5x_restore.add_draft_params)
  assert list(sig.parameters)[:2] == ['state_dict', 'target_state_dict']
  assert 'is_resuming' in sig.parameters


def test_t5x_model_gin_from_another_directory(tmp_path, monkeypatch):
  """The T5X model gin: parsed by its package-relative name outside the repository,
  our side built (T5X-only names skipped, as without t5x), the T5X parts included."""
  path = CONFIGS / 't5x' / 'speculative_model.gin'
  _, _, includes = _statements(path)
  assert includes == ['specdec_jax/configs/models/t5_1_1/xxl.gin',
                      'specdec_jax/configs/t5x/adafactor.gin',
                      'specdec_jax/configs/t5x/restore_draft.gin']
  monkeypatch.chdir(tmp_path)
  gin.clear_config()
  try:
    gin.parse_config_files_and_bindings(
        ['specdec_jax/configs/t5x/speculative_model.gin'], ['OPTIMIZER = None'],
        skip_unknown=T5X_NAMES, finalize_config=False)
    assert gin.get_configurable('network.T5Config')() == PRESETS['t5_1_1_xxl']
    with gin.config_scope('draft'):
      assert gin.get_configurable('network.T5Config')() == PRESETS['t5_1_1_small']
    assert gin.query_parameter('%GAMMA') == 4
    assert gin.query_parameter('%TEMPERATURE') == 0.0
    assert gin.query_parameter('%DRAFT_CHECKPOINT').startswith('gs://')
    ref = gin.query_parameter('t5x_restore.add_draft_params.draft_checkpoint')
    assert ref.selector == 'gin.macro' and list(ref.scopes) == ['DRAFT_CHECKPOINT']
    for name in ('draft_module', 'draft_params', 'gamma', 'temperature', 'optimizer_def'):
      gin.query_parameter(f'models.SpeculativeEncoderDecoderModel.{name}')
  finally:
    gin.clear_config()


def test_t5x_resolves_our_gin_files_like_its_own(tmp_path):
  """As T5X parses them: a fresh interpreter, outside the repository, nothing of ours
  imported beforehand and no search path added: the package-relative names resolve
  through gin's Python-path reader (the config folders are packages, like T5X's)."""
  import subprocess
  import sys
  code = ('import gin\n'
          'gin.parse_config_files_and_bindings(\n'
          "    ['specdec_jax/configs/t5x/speculative_model.gin'], ['OPTIMIZER = None'],\n"
          f'    skip_unknown={T5X_NAMES!r}, finalize_config=False)\n'
          "print(gin.query_parameter('%GAMMA'), gin.query_parameter('network.T5Config.emb_dim'))\n")
  env = {k: v for k, v in os.environ.items() if k != 'PYTHONPATH'}
  out = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, env=env, check=True,
                       capture_output=True, text=True, timeout=600)
  assert out.stdout.split() == ['4', '4096']


def test_gin_builds_model_end_to_end(pair, model):  # `model`: compiled first
  """A tiny model from the T5 1.1 gin file with overrides: built by gin and decoded."""
  gin.clear_config()
  cfg = pair.config
  try:
    gin.parse_config_files_and_bindings(
        ['specdec_jax/configs/models/t5_1_1/small.gin'],
        [f'network.T5Config.{k} = {v!r}' for k, v in dict(
            vocab_size=cfg.vocab_size, emb_dim=cfg.emb_dim, num_heads=cfg.num_heads,
            num_encoder_layers=cfg.num_encoder_layers, head_dim=cfg.head_dim,
            num_decoder_layers=cfg.num_decoder_layers, mlp_dim=cfg.mlp_dim).items()] +
        ['VOCABULARY = None', 'DRAFT_MODULE = @draft/network.Transformer()',
         'draft/network.T5Config.emb_dim = 16', 'draft/network.T5Config.num_encoder_layers = 1',
         'draft/network.T5Config.num_decoder_layers = 1', 'GAMMA = 3',
         'DRAFT_CHECKPOINT = None'], finalize_config=False)
    gin.bind_parameter('models.SpeculativeEncoderDecoderModel.draft_params', pair.draft_params)
    # Same settings as the `model` fixture, so the decode below reuses its compilation.
    vocab = FakeVocab(size=60)
    gin.bind_parameter('models.SpeculativeEncoderDecoderModel.input_vocabulary', vocab)
    gin.bind_parameter('models.SpeculativeEncoderDecoderModel.output_vocabulary', vocab)
    built = gin.get_configurable('models.SpeculativeEncoderDecoderModel')()
  finally:
    gin.clear_config()
  assert isinstance(built, SpeculativeEncoderDecoderModel)
  assert built.module.config == pair.config
  assert built.draft_module.config == pair.draft_config
  assert built.gamma == 3 and built.eos_id == 1 and built.temperature == 0.0
  decodes, _ = built.predict_batch_with_aux(pair.params, t5x_batch())
  np.testing.assert_array_equal(decodes, greedy_reference(pair)[0][:, 0])
