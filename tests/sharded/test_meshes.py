"""Sharded decoding on simulated CPU meshes (run by tests/test_sharding.py in a child
process with XLA_FLAGS=--xla_force_host_platform_device_count=8).

Each mesh must give exactly the single-device result: the same tokens at temperature 0
and the same samples for the same key at temperature 1, for batches that do (8) and do
not (3) divide the data axis. The random models are small enough to compile quickly
but have real vocabularies (256), several heads (4, sharded over `model` where it
divides) and two decoder layers: a T5 pair and a decoder-only pair (prefix LM and causal,
prompts of different lengths in one batch).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from specdec_jax import checkpoints, generate, sharding
from specdec_jax.models import decoder_only, t5
from specdec_jax.models.config import DecoderOnlyConfig, T5Config

MESHES = [(8, 1), (1, 8), (2, 4), (4, 2)]
MAX_LEN = 12
GAMMA = 3
KEY = jax.random.PRNGKey(5)

TARGET = T5Config(vocab_size=256, emb_dim=32, num_heads=4, head_dim=8, mlp_dim=64,
                  num_encoder_layers=1, num_decoder_layers=2, mlp_activations=('gelu', 'linear'),
                  logits_via_embedding=False, dropout_rate=0.0)
DRAFT = T5Config(vocab_size=256, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
                 num_encoder_layers=1, num_decoder_layers=1, mlp_activations=('gelu', 'linear'),
                 logits_via_embedding=False, dropout_rate=0.0)


def test_eight_simulated_devices():
  assert jax.device_count() == 8, 'run with XLA_FLAGS=--xla_force_host_platform_device_count=8'


@pytest.fixture(scope='module')
def models():
  return (t5.Transformer(TARGET), t5.init_params(TARGET, jax.random.PRNGKey(1)),
          t5.Transformer(DRAFT), t5.init_params(DRAFT, jax.random.PRNGKey(2)))


def tokens(batch):
  return np.random.RandomState(batch).randint(2, 256, size=(batch, 7)).astype(np.int32)


_REFERENCE = {}


def reference(models, batch, temperature):
  """Single-device (speculative, baseline) outputs, computed once per setting."""
  key = (batch, temperature)
  if key not in _REFERENCE:
    tm, tp, dm, dp = models
    _REFERENCE[key] = (
        generate.t5_speculative_generate(tm, tp, dm, dp, tokens(batch), MAX_LEN, GAMMA,
                                         temperature=temperature, decode_rng=KEY),
        generate.t5_generate(tm, tp, tokens(batch), MAX_LEN, temperature=temperature,
                             decode_rng=KEY))
  return _REFERENCE[key]


def assert_same(sharded, single):
  np.testing.assert_array_equal(sharded[0], np.asarray(single[0]))  # tokens, exactly
  np.testing.assert_allclose(sharded[1], np.asarray(single[1]), atol=1e-4)  # log-probs


@pytest.mark.slow
@pytest.mark.parametrize('mesh_shape', MESHES)
@pytest.mark.parametrize('temperature', [0.0, 1.0])
def test_mesh_gives_the_single_device_output(models, mesh_shape, temperature):
  tm, tp, dm, dp = models
  plan = sharding.plan_from(mesh_shape)
  spec_ref, base_ref = reference(models, 3, temperature)
  spec = generate.t5_speculative_generate(tm, tp, dm, dp, tokens(3), MAX_LEN, GAMMA,
                                          temperature=temperature, decode_rng=KEY,
                                          sharding_plan=plan)
  assert_same(spec, spec_ref)
  for field in ('target_calls', 'drafted', 'accepted', 'tokens'):
    np.testing.assert_array_equal(getattr(spec[2], field), getattr(spec_ref[2], field))
  assert_same(generate.t5_generate(tm, tp, tokens(3), MAX_LEN, temperature=temperature,
                                   decode_rng=KEY, sharding_plan=plan), base_ref)


@pytest.mark.slow
@pytest.mark.parametrize('mesh_shape,draft', [((4, 2), 'replicated'), ((2, 4), 'like_target')])
def test_dividing_batch_and_draft_sharded_like_the_target(models, mesh_shape, draft):
  tm, tp, dm, dp = models
  plan = sharding.plan_from(mesh_shape, draft_sharding=draft)
  spec_ref, base_ref = reference(models, 8, 1.0)
  assert_same(generate.t5_speculative_generate(tm, tp, dm, dp, tokens(8), MAX_LEN, GAMMA,
                                               temperature=1.0, decode_rng=KEY,
                                               sharding_plan=plan), spec_ref)
  assert_same(generate.t5_generate(tm, tp, tokens(8), MAX_LEN, temperature=1.0,
                                   decode_rng=KEY, sharding_plan=plan), base_ref)


def test_param_shardings_follow_t5x_rules(models):
  plan = sharding.plan_from((2, 4))
  sh = plan.param_shardings(TARGET)
  P = jax.sharding.PartitionSpec
  layer = sh['decoder']['layers_0']
  assert sh['token_embedder']['embedding'].spec == P('model', None)  # ('vocab', 'embed')
  assert layer['mlp']['wi_0']['kernel'].spec == P(None, 'model')  # ('embed', 'mlp')
  assert layer['mlp']['wo']['kernel'].spec == P('model', None)  # ('mlp', 'embed')
  assert layer['self_attention']['query']['kernel'].spec == P(None, 'model')  # joined_kv
  assert sh['decoder']['logits_dense']['kernel'].spec == P(None, 'model')  # ('embed', 'vocab')
  assert layer['pre_mlp_layer_norm']['scale'].spec == P(None)  # ('embed',)
  draft = plan.param_shardings(DRAFT, 'draft')
  assert all(s.spec == P(*([None] * len(s.spec))) for s in jax.tree.leaves(draft))
  custom = sharding.plan_from((2, 4), sharding.standard_logical_axis_rules(
      additional_rules=(('mlp', None),)))
  assert custom.param_shardings(TARGET)['decoder']['layers_0']['mlp']['wo']['kernel'].spec == P(
      None, None)


def test_plan_errors_name_the_argument():
  with pytest.raises(ValueError, match='mesh_shape.*needs 6 devices but 8'):
    sharding.plan_from((2, 3))
  with pytest.raises(ValueError, match='mesh_shape must be'):
    sharding.plan_from((8,))
  with pytest.raises(ValueError, match='draft_sharding'):
    sharding.plan_from((8, 1), draft_sharding='sharded')
  with pytest.raises(ValueError, match='logical_axis_rules'):
    sharding.plan_from((8, 1), (('mlp', 'tensor'),))
  assert dict(sharding.plan_from((-1, 2)).mesh.shape) == {'data': 4, 'model': 2}


@pytest.mark.parametrize('layout', ['legacy', 'orbax'])
def test_checkpoint_restored_into_shardings(models, tmp_path, layout):
  _, params, _, _ = models
  save = (checkpoints.save_t5x_checkpoint if layout == 'legacy'
          else checkpoints.save_orbax_checkpoint)
  save(params, tmp_path, step=1)
  plan = sharding.plan_from((1, 8))
  want = plan.param_shardings(TARGET)
  got = checkpoints.load_t5x_checkpoint(tmp_path, TARGET, shardings=want)
  for (path, x), s, ref in zip(jax.tree_util.tree_flatten_with_path(got)[0],
                               jax.tree.leaves(want), jax.tree.leaves(params)):
    assert isinstance(x, jax.Array) and x.sharding.is_equivalent_to(s, x.ndim), path
    np.testing.assert_array_equal(np.asarray(x), np.asarray(ref))
    for shard in x.addressable_shards:  # each device holds only its slice
      assert shard.data.shape == s.shard_shape(x.shape), path
  mem = sharding.per_device_bytes(got)
  big = [x for x in jax.tree.leaves(got) if x.size >= 256 * 32]
  assert all(x.addressable_shards[0].data.size * 8 == x.size for x in big)
  assert mem['max_per_device'] < mem['total'] / 4


def test_t5x_model_partitioned_from_its_params_axes(pair):
  """The T5X model class under T5X's partitioner convention: every param, the draft's
  included, sharded from `params_axes` (`get_initial_variables`), and
  `predict_batch_with_aux` jitted with those in_shardings gives the one-device result."""
  from specdec_jax.interop.t5x.model import SpeculativeEncoderDecoderModel

  class Vocab:
    vocab_size, eos_id = 60, 1

  model = SpeculativeEncoderDecoderModel(pair.model, Vocab(), Vocab(), optimizer_def=None,
                                         draft_module=pair.draft_model, gamma=3)
  enc = np.array([[5, 6, 7, 8, 9, 1], [11, 12, 13, 1, 0, 0], [14, 1, 0, 0, 0, 0],
                  [20, 21, 22, 23, 1, 0]], np.int32)
  batch = {'encoder_input_tokens': enc, 'decoder_input_tokens': np.zeros((4, 8), np.int32)}
  variables = model.get_initial_variables(jax.random.PRNGKey(3), {
      'encoder_input_tokens': enc.shape, 'decoder_input_tokens': (4, 8)})
  params = variables['params']
  want = model.predict_batch_with_aux(params, batch)
  for mesh_shape, draft in (((2, 4), 'replicated'), ((1, 8), 'like_target')):
    plan = sharding.plan_from(mesh_shape, draft_sharding=draft)
    shardings = plan.variables_shardings(params, variables['params_axes'])
    assert shardings['draft']['decoder']['logits_dense']['kernel'].spec == (
        jax.sharding.PartitionSpec(None, None) if draft == 'replicated'
        else jax.sharding.PartitionSpec(None, 'model'))
    placed = jax.device_put(params, shardings)
    batch_sh = {k: plan.batch_sharding(2) for k in batch}
    fn = jax.jit(model.predict_batch_with_aux, in_shardings=(shardings, batch_sh))
    got = fn(placed, batch)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))
    np.testing.assert_allclose(np.asarray(got[1]['scores']), np.asarray(want[1]['scores']),
                               atol=1e-4)


def test_memory_model_matches_measured_per_device_bytes(models, capsys):
  """The demo target (33.4M params) on a (1, 8) mesh holds ≈ 1/8 of its params per
  device, as `memory.param_bytes` predicts; the KV caches' per-device bytes on (2, 4)
  are what `memory.kv_cache_bytes` predicts."""
  import json

  from specdec_jax.util import paths
  from specdec_jax.sharding import memory
  from specdec_jax.train.run_files import config_from_dict
  demo = paths.ASSETS_DIR / 'demo_ende'
  cfg = config_from_dict(json.loads((demo / 'pair.json').read_text())['target_config'])
  plan = sharding.plan_from((1, 8))
  params = checkpoints.load_t5x_checkpoint(demo / 'target', cfg,
                                           shardings=plan.param_shardings(cfg))
  measured = sharding.per_device_bytes(params)
  predicted = memory.param_bytes(plan, cfg, dtype=jax.tree.leaves(params)[0].dtype)
  assert measured['total'] == predicted['total']
  assert measured['max_per_device'] == predicted['per_device']
  share = measured['max_per_device'] / measured['total']
  with capsys.disabled():
    print(f'\ndemo target on (1, 8): {measured["total"] / 2**20:.1f} MiB in all, '
          f'{measured["max_per_device"] / 2**20:.2f} MiB per device ({share:.4f})')
  assert 0.125 <= share < 0.13

  tm, tp, dm, dp = models
  plan = sharding.plan_from((2, 4))
  for role, model, p, cfg in (('target', tm, tp, TARGET), ('draft', dm, dp, DRAFT)):
    fn = jax.jit(lambda p, x, model=model, role=role: plan.constrain_cache(
        t5.encode_and_init_cache(model, p, x, generate.cache_length(MAX_LEN, GAMMA)), role))
    toks = jax.device_put(tokens(4), plan.batch_sharding(2))
    cache = fn(jax.device_put(p, plan.param_shardings(cfg, role)), toks)
    got = sharding.per_device_bytes(cache)
    want = memory.kv_cache_bytes(plan, cfg, batch=4, enc_len=7, max_decode_len=MAX_LEN,
                                 gamma=GAMMA, role=role)
    assert (got['total'], got['max_per_device']) == (want['total'], want['per_device']), role


@pytest.mark.slow
def test_num_decodes_and_per_row_temperatures(models):
  """num_decodes = 2 samples per input and a `[batch]` temperature (rows 0 and 2 greedy)
  on (2, 4): the one-device samples, sorted the same way."""
  tm, tp, dm, dp = models
  plan = sharding.plan_from((2, 4))
  temps = np.array([0.0, 1.0, 0.0], np.float32)
  kw = dict(temperature=temps, decode_rng=KEY, num_decodes=2)
  want = generate.t5_speculative_generate(tm, tp, dm, dp, tokens(3), MAX_LEN, GAMMA, **kw)
  got = generate.t5_speculative_generate(tm, tp, dm, dp, tokens(3), MAX_LEN, GAMMA,
                                         sharding_plan=plan, **kw)
  assert got[0].shape == (3, 2, MAX_LEN)
  assert_same(got, want)


# ------------------------------------------------------------------ decoder-only models
#
# Few compiled programs (each speculative one takes seconds): per-row temperatures
# (greedy and sampled rows in one batch) cover T = 0 and T = 1 in one program, and with
# per-row keys a row's output does not depend on the other rows, so the batch-3 cases
# compare against the first 3 rows of one batch-8 reference per mode. The keys of rows
# 0-2 are those one key splits into for a batch of 3, so the one-key case (the
# benchmark's call, padded 3 → 8) shares that reference; only its baseline, which draws
# from one batch key, needs a one-device batch-3 run.

DO_TARGET = DecoderOnlyConfig(vocab_size=256, emb_dim=32, num_heads=4, num_layers=2,
                              head_dim=8, mlp_dim=64, mlp_activations=('gelu', 'linear'),
                              dropout_rate=0.0)
DO_DRAFT = DO_TARGET.replace(emb_dim=16, num_heads=2, num_layers=1, mlp_dim=32)
DO_LENGTHS = (2, 6, 0, 7, 1, 3, 5, 4)  # an empty prompt: unconditional generation
DO_TEMPS = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0], np.float32)
DO_KEYS = np.concatenate([np.asarray(jax.random.split(KEY, 3)),
                          np.asarray(jax.random.split(jax.random.fold_in(KEY, 1), 5))])


def random_params(config, seed):
  """Params of T5X's tree and shapes, drawn on the host (flax's eager init takes seconds):
  scales 1, embeddings N(0, 1), kernels N(0, 1 / fan_in)."""
  rng = np.random.RandomState(seed)
  shapes = jax.eval_shape(lambda: decoder_only.init_params(config, jax.random.PRNGKey(0), 2))

  def draw(s):
    if len(s.shape) == 1:
      return np.ones(s.shape, np.float32)
    return (rng.standard_normal(s.shape) / np.sqrt(s.shape[0])).astype(np.float32)
  params = jax.tree.map(draw, shapes)
  emb = params['decoder']['token_embedder']
  emb['embedding'] = emb['embedding'] * np.float32(np.sqrt(emb['embedding'].shape[0]))
  return params


@pytest.fixture(scope='module')
def do_models():
  return (decoder_only.DecoderOnlyTransformer(DO_TARGET),
          jax.device_put(random_params(DO_TARGET, 1)),
          decoder_only.DecoderOnlyTransformer(DO_DRAFT),
          jax.device_put(random_params(DO_DRAFT, 2)))


def do_prompts(batch):
  rng = np.random.RandomState(0)
  out = np.zeros((len(DO_LENGTHS), max(DO_LENGTHS)), np.int32)
  for b, m in enumerate(DO_LENGTHS):
    out[b, :m] = rng.randint(2, 256, size=m)
  return out[:batch]


def do_kwargs(batch, bidirectional, per_row_keys, plan=None):
  return dict(temperature=DO_TEMPS[:batch], inputs_bidirectional_attention=bidirectional,
              decode_rng=DO_KEYS[:batch] if per_row_keys else KEY, sharding_plan=plan)


def do_spec(do_models, batch, **kw):
  tm, tp, dm, dp = do_models
  return jax.device_get(generate.decoder_only_speculative_generate(
      tm, tp, dm, dp, do_prompts(batch), MAX_LEN, GAMMA, **kw))


def do_base(do_models, batch, **kw):
  tm, tp, _, _ = do_models
  return jax.device_get(generate.decoder_only_generate(tm, tp, do_prompts(batch), MAX_LEN,
                                                       **kw))


_DO_REFERENCE = {}


def do_reference(do_models, batch, bidirectional, per_row_keys):
  """One-device (speculative, baseline) outputs of the first `batch` rows."""
  n = len(DO_LENGTHS)
  if bidirectional not in _DO_REFERENCE:  # all 8 rows, per-row keys
    kw = do_kwargs(n, bidirectional, True)
    _DO_REFERENCE[bidirectional] = (do_spec(do_models, n, **kw), do_base(do_models, n, **kw))
  spec, base = jax.tree.map(lambda x: np.asarray(x)[:batch], _DO_REFERENCE[bidirectional])
  if not per_row_keys:  # one batch key: the baseline's draws depend on it
    base = do_base(do_models, batch, **do_kwargs(batch, bidirectional, False))
  return spec, base


@pytest.mark.slow
@pytest.mark.parametrize('mesh_shape,batch,bidirectional,per_row_keys,draft', [
    ((8, 1), 3, False, False, 'replicated'),  # padded 3 → 8, one key
    ((1, 8), 3, True, True, 'replicated'),  # no data split: heads and vocab over 8
    ((2, 4), 8, False, True, 'like_target'),
    ((4, 2), 8, True, True, 'like_target'),
])
def test_decoder_only_mesh_gives_the_single_device_output(do_models, mesh_shape, batch,
                                                          bidirectional, per_row_keys, draft):
  """Prefix-LM and causal prompts of different lengths (one empty) in one batch, greedy
  and sampled rows: speculative and baseline give the one-device tokens, log-probs and
  statistics on every mesh, the draft replicated or sharded like the target."""
  plan = sharding.plan_from(mesh_shape, draft_sharding=draft)
  kw = do_kwargs(batch, bidirectional, per_row_keys, plan)
  spec, base = do_spec(do_models, batch, **kw), do_base(do_models, batch, **kw)
  spec_ref, base_ref = do_reference(do_models, batch, bidirectional, per_row_keys)
  assert isinstance(spec[0], np.ndarray) and spec[0].shape == (batch, 1, MAX_LEN)
  assert_same(spec, spec_ref)
  assert_same(base, base_ref)
  for field in ('drafted', 'accepted', 'tokens'):
    np.testing.assert_array_equal(getattr(spec[2], field), getattr(spec_ref[2], field))
  assert np.all(spec[2].tokens > 0) and np.any(spec[2].accepted > 0)


def test_decoder_only_param_shardings_follow_t5x_rules(do_models):
  plan = sharding.plan_from((2, 4))
  sh = plan.param_shardings(DO_TARGET)
  P = jax.sharding.PartitionSpec
  dec = sh['decoder']
  layer = dec['layers_0']
  assert dec['token_embedder']['embedding'].spec == P('model', None)  # ('vocab', 'embed')
  assert layer['mlp']['wi_0']['kernel'].spec == P(None, 'model')  # ('embed', 'mlp')
  assert layer['mlp']['wo']['kernel'].spec == P('model', None)  # ('mlp', 'embed')
  assert layer['self_attention']['query']['kernel'].spec == P(None, 'model')  # joined_kv
  assert layer['self_attention']['out']['kernel'].spec == P('model', None)
  assert dec['logits_dense']['kernel'].spec == P(None, 'model')  # ('embed', 'vocab')
  assert dec['relpos_bias']['rel_embedding'].spec == P('model', None)  # ('heads', buckets)
  assert layer['pre_mlp_layer_norm']['scale'].spec == P(None)  # ('embed',)
  draft = plan.param_shardings(DO_DRAFT, 'draft')
  assert all(s.spec == P(*([None] * len(s.spec))) for s in jax.tree.leaves(draft))
  placed = jax.device_put(do_models[1], sh)  # the tree matches the params'
  from specdec_jax.sharding import memory
  got = sharding.per_device_bytes(placed)
  want = memory.param_bytes(plan, DO_TARGET)
  assert (got['total'], got['max_per_device']) == (want['total'], want['per_device'])
