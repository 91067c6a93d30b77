"""Fast tests of the vocabulary, data pipeline and training step (well under a minute)."""

import json
import pathlib

import gin
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax.train import data as data_lib
from specdec_jax.util import flags
from specdec_jax.train import job as train_lib
from specdec_jax.train import step as train_step
from specdec_jax.text import vocabulary
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

REPO = pathlib.Path(__file__).resolve().parent.parent
SHIPPED_VOCAB = REPO / 'specdec_jax/assets/demo_ende/vocab/ende8k.model'

SENTENCES = [
    'A man in an orange hat starring at something.',
    'Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.',
    'Two young guys with shaggy hair look at their hands while hanging out in the yard.',
    'Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.',
    'A little girl climbing into a wooden playhouse.',
    'Ein kleines Mädchen klettert in ein Spielhaus aus Holz.',
] * 20

TINY = T5Config(vocab_size=128, emb_dim=32, num_heads=2, head_dim=16, num_encoder_layers=1,
                num_decoder_layers=1, mlp_dim=64, mlp_activations=('gelu', 'linear'),
                dropout_rate=0.0, logits_via_embedding=False)


def test_train_sentencepiece_t5_conventions(tmp_path):
  path = vocabulary.train_sentencepiece(SENTENCES, tmp_path / 'v', vocab_size=80)
  again = vocabulary.train_sentencepiece(SENTENCES, tmp_path / 'w', vocab_size=80)
  assert path.read_bytes() == again.read_bytes()  # deterministic
  sp = vocabulary.load_processor(path)
  assert (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id()) == (0, 1, 2, -1)
  assert sp.vocab_size() == 80
  ids = sp.encode('Ein kleines Mädchen.')
  assert sp.decode(ids) == 'Ein kleines Mädchen.'


def test_shipped_vocabulary_via_seqio():
  vocab = vocabulary.load_vocabulary(SHIPPED_VOCAB)
  assert vocab.eos_id == 1 and vocab.pad_id == 0 and vocab.unk_id == 2
  assert vocab.vocab_size == 8100
  for text in ['A man in an orange hat.', 'Zwei Männer überqueren die Straße.']:
    ids = vocab.encode(text)
    assert all(2 < i < 8000 for i in ids)
    assert vocab.decode(ids) == text
  assert vocab.decode(vocab.encode('Hund') + [1, 0, 0]) == 'Hund'


def test_features_shift_and_weights():
  feats = data_lib.make_features([[5, 6, 1]], [[7, 8, 9, 1]], 6)
  np.testing.assert_array_equal(feats['encoder_input_tokens'], [[5, 6, 1, 0, 0, 0]])
  np.testing.assert_array_equal(feats['decoder_target_tokens'], [[7, 8, 9, 1, 0, 0]])
  np.testing.assert_array_equal(feats['decoder_input_tokens'], [[0, 7, 8, 9, 1, 0]])
  np.testing.assert_array_equal(feats['decoder_loss_weights'], [[1, 1, 1, 1, 0, 0]])
  # Truncation keeps a final EOS.
  long = data_lib.make_features([list(range(3, 20)) + [1]], [[4] * 10 + [1]], 8)
  assert long['encoder_input_tokens'][0, -1] == 1 and long['decoder_target_tokens'][0, -1] == 1


def test_bucketed_dataset_shapes():
  sp = vocabulary.load_processor(SHIPPED_VOCAB)
  src, tgt = SENTENCES[0::2], SENTENCES[1::2]
  inputs = data_lib.encode_inputs(sp, src)
  assert sp.decode(inputs[0][:-1]).startswith('translate English to German: A man')
  ds = data_lib.BucketedDataset(inputs, data_lib.encode_targets(sp, tgt), batch_size=16,
                                buckets=(32, 48), seed=3)
  batches = list(ds.batches(0))
  assert len(batches) == ds.steps_per_epoch == 4  # 60 examples, all in bucket 32
  rows = 0
  for b in batches:
    assert set(b) == set(data_lib.FEATURES)
    for v in b.values():
      assert v.shape == (16, 32)
    np.testing.assert_array_equal(b['decoder_input_tokens'][:, 1:],
                                  b['decoder_target_tokens'][:, :-1])
    assert np.all(b['decoder_input_tokens'][:, 0] == 0)
    rows += int((b['decoder_loss_weights'].sum(1) > 0).sum())
  assert rows == 60
  # Same seed and epoch → same order; another epoch → another order.
  np.testing.assert_array_equal(next(ds.batches(0))['encoder_input_tokens'],
                                batches[0]['encoder_input_tokens'])
  assert sorted(len(i) for _, i in ds.batch_plan(1)) == [12, 16, 16, 16]


def _tiny_batch():
  rng = np.random.default_rng(0)
  inputs = [list(rng.integers(3, 100, size=n)) + [1] for n in (5, 7, 9, 4)]
  targets = [list(rng.integers(3, 100, size=n)) + [1] for n in (6, 3, 8, 5)]
  return data_lib.make_features(inputs, targets, 12)


def _tiny_target_state():
  """The TINY model, AdamW at a constant 1e-2 and its initial train state."""
  model = t5.Transformer(TINY)
  params = t5.init_params(TINY, jax.random.PRNGKey(0))
  opt = train_lib.make_optimizer(train_lib.make_schedule(1e-2, 1, 'constant'))
  state = train_lib.TrainState(step=jnp.array(0, jnp.int32), params=params,
                               opt_state=opt.init(params))
  return model, opt, state


def test_train_steps_reduce_loss():
  model, opt, state = _tiny_target_state()
  step = train_lib.make_train_step(model, opt, mode='target', label_smoothing=0.1)
  batch = _tiny_batch()
  losses = []
  for _ in range(15):
    state, metrics = step(state, batch, jax.random.PRNGKey(1), None)
    losses.append(float(metrics['nll']))
  assert np.isfinite(losses).all()
  assert losses[-1] < 0.5 * losses[0], losses
  assert int(state.step) == 15


def test_distill_loss_finite():
  teacher_cfg = TINY.replace(num_decoder_layers=2)
  teacher = t5.Transformer(teacher_cfg)
  tparams = t5.init_params(teacher_cfg, jax.random.PRNGKey(5))
  model = t5.Transformer(TINY.replace(dropout_rate=0.1))
  params = t5.init_params(TINY, jax.random.PRNGKey(0))
  opt = train_lib.make_optimizer(train_lib.make_schedule(1e-3, 10))
  state = train_lib.TrainState(step=jnp.array(0, jnp.int32), params=params,
                               opt_state=opt.init(params))
  step = train_lib.make_train_step(model, opt, mode='distill', label_smoothing=0.0,
                                   kd_weight=0.5, teacher=teacher)
  state, metrics = step(state, _tiny_batch(), jax.random.PRNGKey(1), tparams)
  for k in ('loss', 'kl', 'nll', 'teacher_agree'):
    assert np.isfinite(float(metrics[k])), k
  assert float(metrics['kl']) >= 0


def test_tv_to_teacher_is_one_minus_sum_min():
  # ½ Σ|p − q| = 1 − Σ min(p, q) (the acceptance rate of speculative sampling), checked
  # against NumPy on random logits; identical logits give 0, zero weight drops a position.
  rng = np.random.default_rng(4)
  s = rng.normal(size=(3, 5, 17)).astype(np.float32) * 2
  t = rng.normal(size=(3, 5, 17)).astype(np.float32) * 2
  w = np.ones((3, 5), np.float32)
  w[2, 3:] = 0
  p = np.exp(t) / np.exp(t).sum(-1, keepdims=True)
  q = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
  want = ((1 - np.minimum(p, q).sum(-1)) * w).sum()
  np.testing.assert_allclose(float(train_lib.tv_to_teacher(s, t, w)), want, rtol=1e-5)
  assert abs(float(train_lib.tv_to_teacher(s, s, w))) < 1e-5


def test_distill_loss_composition_and_tv_descent(tmp_path):
  # loss = (1 − kd)·CE + kd·KL + tv_weight·TV per token (label smoothing 0, so CE = NLL);
  # a TV weight makes the steps lower the TV itself.
  teacher_cfg = TINY.replace(num_decoder_layers=2)
  teacher = t5.Transformer(teacher_cfg)
  tparams = t5.init_params(teacher_cfg, jax.random.PRNGKey(5))
  model = t5.Transformer(TINY)
  params = t5.init_params(TINY, jax.random.PRNGKey(0))
  batch = _tiny_batch()

  def run(kd_weight, tv_weight, steps):
    opt = train_lib.make_optimizer(train_lib.make_schedule(3e-3, 1, 'constant'))
    fresh = jax.tree_util.tree_map(jnp.array, params)  # the step donates its state
    state = train_lib.TrainState(step=jnp.array(0, jnp.int32), params=fresh,
                                 opt_state=opt.init(fresh))
    step = train_lib.make_train_step(model, opt, mode='distill', label_smoothing=0.0,
                                     kd_weight=kd_weight, tv_weight=tv_weight, teacher=teacher)
    history = []
    for _ in range(steps):
      state, metrics = step(state, batch, jax.random.PRNGKey(1), tparams)
      history.append({k: float(v) for k, v in metrics.items()})
    return history

  m = run(0.3, 0.5, 1)[0]
  np.testing.assert_allclose(m['loss'], 0.7 * m['nll'] + 0.3 * m['kl'] + 0.5 * m['tv'],
                             rtol=1e-5)
  assert 0 < m['tv'] < 1
  # CE on these random targets pulls the student away from the teacher; a large TV weight
  # beside it lowers the TV instead (with a sign error it would rise faster than CE alone).
  ce_run = run(0.0, 0.0, 25)
  tv_run = run(0.0, 20.0, 25)
  assert tv_run[-1]['tv'] < tv_run[0]['tv'] - 0.2, ([h['tv'] for h in tv_run], [h['tv'] for h in ce_run])
  assert tv_run[-1]['tv'] < ce_run[-1]['tv'] - 0.3, (tv_run[-1], ce_run[-1])
  # Bad input: a TV weight outside distillation, or a negative one, is refused before any
  # data is read or model compiled.
  never = tmp_path / 'never'
  with pytest.raises(ValueError, match='train.tv_weight=0.5 needs train.mode="distill"'):
    train_lib.train(run_dir=str(never), model_config=TINY, mode='target', tv_weight=0.5)
  with pytest.raises(ValueError, match='train.tv_weight must be a finite number >= 0'):
    train_lib.train(run_dir=str(never), model_config=TINY, mode='distill', tv_weight=-1.0)
  for bad in (float('inf'), True):
    with pytest.raises(ValueError, match='train.tv_weight must be a finite number >= 0'):
      train_lib.train(run_dir=str(never), model_config=TINY, mode='distill', tv_weight=bad)
  assert not never.exists()  # refused before the run folder is made


def test_query_lr_scale_scales_only_query_kernels():
  # AdamW's update of every attention query/kernel is multiplied by query_lr_scale; every
  # other leaf (key, value, out, mlp, embeddings, norms) gets the very same update.
  params = t5.init_params(TINY, jax.random.PRNGKey(0))
  grads = jax.tree_util.tree_map(lambda x: jnp.full_like(x, 0.3) * (1 + jnp.arange(x.size).reshape(x.shape) % 5), params)
  schedule = train_lib.make_schedule(1e-3, 1, 'constant')
  updates = {}
  for scale in (1.0, 0.125):
    opt = train_lib.make_optimizer(schedule, 0.01, query_lr_scale=scale)
    updates[scale], _ = opt.update(grads, opt.init(params), params)
  flat = dict(jax.tree_util.tree_flatten_with_path(updates[1.0])[0])
  scaled = dict(jax.tree_util.tree_flatten_with_path(updates[0.125])[0])
  queries = [path for path in flat if train_lib.is_query_kernel(path)]
  # TINY: encoder self-attention + decoder self- and cross-attention per layer.
  assert len(queries) == TINY.num_encoder_layers + 2 * TINY.num_decoder_layers
  for path, u in flat.items():
    want = u * 0.125 if path in queries else u
    np.testing.assert_allclose(scaled[path], want, rtol=1e-6, err_msg=str(path))
  with pytest.raises(ValueError, match='query_lr_scale'):
    train_lib.make_optimizer(schedule, query_lr_scale=0.0)
  with pytest.raises(ValueError, match='adamw only'):
    train_lib.make_optimizer(schedule, name='adafactor', query_lr_scale=0.5)


def test_kl_zero_for_identical_logits():
  logits = jax.random.normal(jax.random.PRNGKey(0), (2, 3, 11))
  w = jnp.ones((2, 3))
  assert abs(float(train_lib.kl_to_teacher(logits, logits, w))) < 1e-5


def _unlikelihood_reference(logits, targets, weights, dedupe=True, exclude_next=True):
  """Welleck et al. 2020, eq. 4, by enumeration; the two flags plant wrong variants."""
  p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
  total = 0.0
  for b in range(targets.shape[0]):
    for t in range(targets.shape[1]):
      prefix = [targets[b, s] for s in range(t) if weights[b, s] > 0]
      cands = list(dict.fromkeys(prefix)) if dedupe else prefix
      if exclude_next:
        cands = [c for c in cands if c != targets[b, t]]
      total += weights[b, t] * sum(-np.log(1 - p[b, t, c]) for c in cands)
  return total


def test_unlikelihood_matches_enumeration_and_rejects_wrong_variants():
  # The negative candidates at t are the distinct valid prefix tokens other than y_t; a
  # small vocabulary (4) makes repeats and y_t-in-prefix frequent, so the planted variants
  # (candidates counted with multiplicity; y_t not excluded) differ by more than the tolerance.
  rng = np.random.default_rng(7)
  logits = rng.normal(size=(3, 9, 4)).astype(np.float32)
  targets = rng.integers(0, 4, size=(3, 9)).astype(np.int32)
  weights = np.ones((3, 9), np.float32)
  weights[1, 6:] = 0
  got = float(train_step.unlikelihood(logits, targets, weights))
  np.testing.assert_allclose(got, _unlikelihood_reference(logits, targets, weights), rtol=1e-5)
  for wrong in (dict(dedupe=False), dict(exclude_next=False)):
    assert abs(got - _unlikelihood_reference(logits, targets, weights, **wrong)) > 0.1 * got
  # No repeated history, no penalty: every candidate set is empty at t = 0.
  assert float(train_step.unlikelihood(logits[:, :1], targets[:, :1], weights[:, :1])) == 0.0


def test_unlikelihood_training_step_lowers_ul():
  # A target step with unlikelihood_weight > 0 reports `ul` and lowers it over ten steps on a
  # fixed batch; a distill run rejects the option before any work.
  model, opt, state = _tiny_target_state()
  step = train_lib.make_train_step(model, opt, mode='target', label_smoothing=0.0,
                                   unlikelihood_weight=1.0)
  batch = _tiny_batch()
  uls = []
  for _ in range(10):
    state, metrics = step(state, batch, jax.random.PRNGKey(1), None)
    uls.append(float(metrics['ul']))
  assert np.isfinite(uls).all() and uls[-1] < uls[0], uls
  with pytest.raises(ValueError, match='unlikelihood_weight'):
    train_lib.train(run_dir='unused', model_config=TINY, mode='distill', unlikelihood_weight=1.0)


def test_gin_configs_parse_and_flags():
  parsed = flags.parse_gin_flags(
      ['--gin_file=configs/train/target_ende.gin', '--gin.train.max_steps=7'], 'train', '', '')
  bindings = parsed.bindings
  assert parsed.gin_files == ['configs/train/target_ende.gin']
  assert bindings == ['train.max_steps = 7']
  gin.clear_config()
  try:
    for name in ('target_ende.gin', 'target_ende_v3.gin', 'draft_ende.gin', 'draft_ende_v3.gin',
                 'draft_ende_v3_qls.gin', 'draft_ende_v31.gin', 'draft_ende_v32.gin',
                 'target_ende_v4.gin', 'target_ende_v5.gin', 'draft_ende_v5.gin',
                 'target_ende_v6_ul.gin', 'draft_ende_v6.gin', 'draft_ende_v61.gin',
                 'draft_ende_v62.gin'):
      gin.clear_config()
      gin.add_config_file_search_path(str(REPO))  # the v3 configs include the v2 ones
      gin.parse_config_files_and_bindings([str(REPO / 'configs/train' / name)], bindings)
      assert gin.query_parameter('network.T5Config.mlp_activations') == ('gelu', 'linear')
      assert gin.query_parameter('network.T5Config.logits_via_embedding') is False
      assert gin.query_parameter('network.T5Config.vocab_size') == 8192
      assert gin.query_parameter('train.max_steps') == 7
      if name == 'draft_ende_v3_qls.gin':  # the v3 draft's recipe (v3.1 fine-tunes it)
        assert gin.query_parameter('train.query_lr_scale') == pytest.approx(60 ** -0.5, abs=1e-4)
        assert gin.query_parameter('train.teacher_dir') == 'runs/target_ende_v3'
      if name == 'draft_ende_v32.gin':  # fine-tunes the v3.1 draft with a TV term
        assert gin.query_parameter('train.init_params_dir') == 'runs/draft_v31'
        assert gin.query_parameter('train.tv_weight') == 1.0
        assert len(gin.query_parameter('train.targets_path')) == 4
      if name == 'target_ende_v5.gin':  # v3's recipe, 1.25x the steps, one schedule
        assert gin.query_parameter('train.total_steps') == 2500
        assert gin.query_parameter('train.learning_rate') == 1.5e-3
        assert gin.query_parameter('train.run_dir') == 'runs/target_ende_v5'
      if name == 'target_ende_v6_ul.gin':  # the v3 target (from git) + unlikelihood fine-tuning
        assert gin.query_parameter('train.unlikelihood_weight') == 1.0
        assert gin.query_parameter('train.init_params_dir') == 'runs/target_v3'
      if name == 'draft_ende_v6.gin':  # the v3.2 draft (from git) onto the exported target v6
        assert gin.query_parameter('train.init_params_dir') == 'runs/draft_v32'
        assert gin.query_parameter('train.teacher_dir') == 'out/pair_v6/target'
        assert gin.query_parameter('train.total_steps') == 600
      if name == 'draft_ende_v61.gin':  # draft v6 + a second sampled set, TV weight 1.5
        assert gin.query_parameter('train.init_params_dir') == 'runs/draft_ende_v6'
        assert gin.query_parameter('train.tv_weight') == 1.5
        assert gin.query_parameter('train.targets_path')[-1] == 'runs/distill_v6/sampled_train_s2.ids'
      if name == 'draft_ende_v62.gin':  # the v6 draft (from git) + three new sampled sets, 1,800 steps
        assert gin.query_parameter('train.init_params_dir') == 'runs/draft_v6'  # v6, from git
        assert gin.query_parameter('train.total_steps') == 1800
        assert gin.query_parameter('train.targets_path')[1:] == tuple(
            f'runs/distill_v6/sampled_train_s{s}.ids' for s in (2, 3, 4))
      if name == 'target_ende_v4.gin':  # v3's schedule + subword regularisation
        assert gin.query_parameter('train.subword_samples') == 4
        assert gin.query_parameter('train.total_steps') == 2000
  finally:
    gin.clear_config()


def test_config_roundtrip():
  assert train_lib.config_from_dict(train_lib.config_to_dict(TINY)) == TINY


def test_shipped_demo_pair_loads():
  import json
  from specdec_jax import checkpoints
  root = REPO / 'specdec_jax/assets/demo_ende'
  pair = json.loads((root / 'pair.json').read_text())
  for role in ('target', 'draft'):
    config = train_lib.config_from_dict(pair[role]['t5_config'])
    params = checkpoints.load_t5x_checkpoint(root / role, config=config)
    t5.check_params(params, config)
    assert train_lib.param_count(params) == pair[role]['params']


def _tiny_split(tmp_path, n=6):
  """A 6-pair split `toy/train` under a data dir of its own."""
  root = tmp_path / 'data'
  (root / 'toy').mkdir(parents=True)
  (root / 'toy/train.en').write_text('\n'.join(SENTENCES[0:2 * n:2]) + '\n')
  (root / 'toy/train.de').write_text('\n'.join(SENTENCES[1:2 * n:2]) + '\n')
  return root


def test_dataset_from_several_target_files(tmp_path):
  sp = vocabulary.load_processor(SHIPPED_VOCAB)
  root = _tiny_split(tmp_path)
  (tmp_path / 'a.ids').write_text(''.join(f'{10 + i} 11\n' for i in range(6)))
  (tmp_path / 'b.ids').write_text(''.join(f'{20 + i}\n' for i in range(6)))
  ds = data_lib.load_dataset(sp, 'toy/train', batch_size=4, buckets=(32,), data_dir=root,
                             targets_path=(tmp_path / 'a.ids', str(tmp_path / 'b.ids')))
  assert len(ds.inputs) == len(ds.targets) == 12  # each source once per file
  assert ds.inputs[:6] == ds.inputs[6:]
  assert ds.targets[0] == [10, 11, 1] and ds.targets[6] == [20, 1]
  one = data_lib.load_dataset(sp, 'toy/train', batch_size=4, buckets=(32,), data_dir=root,
                              targets_path=tmp_path / 'a.ids')
  assert one.targets == ds.targets[:6]
  (tmp_path / 'short.ids').write_text('5\n')
  with pytest.raises(ValueError, match='short.ids has 1 lines but toy/train has 6'):
    data_lib.load_dataset(sp, 'toy/train', data_dir=root,
                          targets_path=(tmp_path / 'a.ids', tmp_path / 'short.ids'))
  with pytest.raises(ValueError, match='empty sequence'):
    data_lib.load_dataset(sp, 'toy/train', data_dir=root, targets_path=())


def test_dataset_truncated_targets(tmp_path):
  # Lines that reached the distillation decoder's max_decode_len (3 here, per the file's
  # summary) are kept, dropped or replaced by the gold target; other lines are untouched.
  sp = vocabulary.load_processor(SHIPPED_VOCAB)
  root = _tiny_split(tmp_path)
  ids = tmp_path / 'd.ids'
  ids.write_text('5 6\n7 7 7\n8\n9 9 9\n10\n11 12\n')
  kw = dict(batch_size=4, buckets=(32,), data_dir=root, targets_path=ids)
  with pytest.raises(ValueError, match='needs its summary'):
    data_lib.load_dataset(sp, 'toy/train', truncated_targets='gold', **kw)
  (tmp_path / 'd.ids.summary.json').write_text(json.dumps({'max_decode_len': 3}))
  keep = data_lib.load_dataset(sp, 'toy/train', **kw)
  assert keep.targets[1] == [7, 7, 7, 1] and len(keep.targets) == 6
  drop = data_lib.load_dataset(sp, 'toy/train', truncated_targets='drop', **kw)
  assert drop.targets == [keep.targets[i] for i in (0, 2, 4, 5)]
  assert drop.inputs == [keep.inputs[i] for i in (0, 2, 4, 5)]
  gold = data_lib.load_dataset(sp, 'toy/train', truncated_targets='gold', **kw)
  _, tgt = data_lib.read_parallel('toy/train', root)
  golds = data_lib.encode_targets(sp, tgt)
  assert gold.inputs == keep.inputs
  assert gold.targets == [keep.targets[0], golds[1], keep.targets[2], golds[3],
                          keep.targets[4], keep.targets[5]]
  with pytest.raises(ValueError, match="truncated_targets must be one of"):
    data_lib.load_dataset(sp, 'toy/train', truncated_targets='replace', **kw)
  with pytest.raises(ValueError, match='gold targets are never truncated'):
    data_lib.load_dataset(sp, 'toy/train', batch_size=4, buckets=(32,), data_dir=root,
                          truncated_targets='drop')


def test_dataset_loop_repeats(tmp_path):
  # loop_repeats=3 also marks as truncated a line below the limit (10) in which a token
  # trigram occurs 3 times (overlaps counted: 4 4 4 4 4 holds "4 4 4" three times); a
  # trigram twice, or three tokens repeated without a repeated trigram, is left alone.
  assert data_lib.repeats_ngram([4, 4, 4, 4, 4], 3)
  assert not data_lib.repeats_ngram([4, 4, 4, 4], 3)
  assert data_lib.repeats_ngram([5, 6, 7, 5, 6, 7, 5, 6, 7], 3)
  assert not data_lib.repeats_ngram([5, 6, 7, 5, 6, 7, 9], 3)
  assert not data_lib.repeats_ngram([5, 9, 5, 8, 5, 7], 3)
  sp = vocabulary.load_processor(SHIPPED_VOCAB)
  root = _tiny_split(tmp_path)
  ids = tmp_path / 'd.ids'
  ids.write_text('5 6\n7 8 9 7 8 9 7 8 9\n8\n4 4 4 4 4\n10 11 12 10 11 12\n'
                 + ' '.join(['3'] * 10) + '\n')
  (tmp_path / 'd.ids.summary.json').write_text(json.dumps({'max_decode_len': 10}))
  kw = dict(batch_size=4, buckets=(32,), data_dir=root, targets_path=ids)
  _, tgt = data_lib.read_parallel('toy/train', root)
  golds = data_lib.encode_targets(sp, tgt)
  by_length = data_lib.load_dataset(sp, 'toy/train', truncated_targets='gold', **kw)
  assert [t == g for t, g in zip(by_length.targets, golds)] == [False] * 5 + [True]
  gold = data_lib.load_dataset(sp, 'toy/train', truncated_targets='gold', loop_repeats=3,
                               **kw)
  assert gold.targets == [[5, 6, 1], golds[1], [8, 1], golds[3], [10, 11, 12, 10, 11, 12, 1],
                          golds[5]]
  drop = data_lib.load_dataset(sp, 'toy/train', truncated_targets='drop', loop_repeats=2,
                               **kw)
  assert drop.targets == [[5, 6, 1], [8, 1]]
  for bad in (1, -1, 2.0, True):
    with pytest.raises(ValueError, match='loop_repeats must be 0'):
      data_lib.load_dataset(sp, 'toy/train', truncated_targets='gold', loop_repeats=bad, **kw)
  with pytest.raises(ValueError, match="needs truncated_targets='drop' or 'gold'"):
    data_lib.load_dataset(sp, 'toy/train', loop_repeats=3, **kw)


def test_dataset_subword_regularisation(tmp_path, monkeypatch):
  # K sampled segmentations per pair: every sample decodes back to the exact text (prefix
  # included on the source side), the samples differ from the best segmentation and from
  # each other, the same seed gives the same data, another seed other data.
  sp = vocabulary.load_processor(SHIPPED_VOCAB)
  root = _tiny_split(tmp_path)
  kw = dict(batch_size=4, buckets=(32, 48, 64), data_dir=root, subword_samples=3,
            subword_alpha=0.3)
  ds = data_lib.load_dataset(sp, 'toy/train', seed=5, **kw)
  src, tgt = data_lib.read_parallel('toy/train', root)
  assert len(ds.inputs) == len(ds.targets) == 18  # 3 samples × 6 pairs, sample-major
  for k in range(3):
    for i in range(6):
      assert ds.inputs[6 * k + i][-1] == 1 and ds.targets[6 * k + i][-1] == 1
      assert sp.decode(ds.inputs[6 * k + i][:-1]) == vocabulary.TRANSLATE_PREFIX + src[i]
      assert sp.decode(ds.targets[6 * k + i][:-1]) == tgt[i]
  best = data_lib.encode_targets(sp, tgt)
  assert sum(ds.targets[i] != best[i % 6] for i in range(18)) >= 9
  assert ds.targets[:6] != ds.targets[6:12]
  again = data_lib.load_dataset(sp, 'toy/train', seed=5, **kw)
  assert again.inputs == ds.inputs and again.targets == ds.targets
  other = data_lib.load_dataset(sp, 'toy/train', seed=6, **kw)
  assert other.targets != ds.targets
  assert next(ds.batches(0))['decoder_target_tokens'].shape[0] == 4
  with pytest.raises(ValueError, match='subword_samples needs the gold targets'):
    data_lib.load_dataset(sp, 'toy/train', data_dir=root, subword_samples=2,
                          targets_path=tmp_path / 'x.ids')
  with pytest.raises(ValueError, match='subword_alpha must be a finite number > 0'):
    data_lib.load_dataset(sp, 'toy/train', data_dir=root, subword_samples=2, subword_alpha=0)
  with pytest.raises(ValueError, match='subword_samples must be an int >= 0'):
    data_lib.load_dataset(sp, 'toy/train', data_dir=root, subword_samples=-1)
  with pytest.raises(ValueError, match='subword_samples must be an int >= 0'):
    data_lib.load_dataset(sp, 'toy/train', data_dir=root, subword_samples=True)
  # SentencePiece's sampler does not repeat across processes, so a cache keeps a resumed run
  # on the same samples: the second load reads it (the sampler is not called again), and a
  # cache of other settings is refused.
  cache = tmp_path / 'seg.npz'
  first = data_lib.load_dataset(sp, 'toy/train', seed=5, subword_cache=cache, **kw)
  assert cache.exists() and first.targets[0][-1] == 1
  from specdec_jax.train import subword

  def no_sampling(*a, **k):
    raise AssertionError('sampled again instead of reading the cache')
  monkeypatch.setattr(subword, 'sample_segmentations', no_sampling)
  reread = data_lib.load_dataset(sp, 'toy/train', seed=5, subword_cache=cache, **kw)
  assert reread.inputs == first.inputs and reread.targets == first.targets
  with pytest.raises(ValueError, match='seg.npz holds subword samples made with'):
    data_lib.load_dataset(sp, 'toy/train', seed=6, subword_cache=cache, **kw)
  # train() refuses the same settings before it makes its run folder or reads data.
  never = tmp_path / 'never'
  with pytest.raises(ValueError, match='subword_samples must be an int >= 0'):
    train_lib.train(run_dir=str(never), model_config=TINY, subword_samples=-1)
  with pytest.raises(ValueError, match='subword_samples needs the gold targets'):
    train_lib.train(run_dir=str(never), model_config=TINY, mode='distill', subword_samples=2,
                    targets_path='runs/x.ids')
  assert not never.exists()


def test_distill_data_greedy_and_sampled(tmp_path):
  """Greedy distillation data is the baseline decoder's argmax output; sampled data is
  reproducible per seed and differs from greedy on an untrained (high-entropy) model."""
  from specdec_jax.train import distill_data as distill_lib
  from specdec_jax.train import evaluation
  from specdec_jax.train import run_files
  root = _tiny_split(tmp_path)
  cfg = TINY.replace(vocab_size=8192)
  params = t5.init_params(cfg, jax.random.PRNGKey(0))
  run = tmp_path / 'run'
  run.mkdir()
  (run / 'config.json').write_text(__import__('json').dumps(train_lib.config_to_dict(cfg)))
  run_files.save_params(params, run / 'params.msgpack')
  common = dict(target_run=str(run), split='toy/train', vocab_path=str(SHIPPED_VOCAB),
                data_dir=str(root), batch_size=4, max_decode_len=8)
  greedy = distill_lib.distill_data(output_path=str(tmp_path / 'g.ids'), **common)
  assert greedy['sentences'] == 6 and 'greedy' in greedy['decoder']
  g = data_lib.read_target_ids(tmp_path / 'g.ids')
  sp = vocabulary.load_processor(SHIPPED_VOCAB)
  src, _ = data_lib.read_parallel('toy/train', root)
  expect = [None] * 6
  for idx, rows in evaluation.decode_batches(t5.Transformer(cfg), params,
                                             data_lib.encode_inputs(sp, src), batch_size=4,
                                             max_decode_len=8, sort_by_length=False):
    for i, r in zip(idx, rows):
      expect[i] = evaluation.ids_until_eos(r)
  assert g == expect
  s1 = distill_lib.distill_data(output_path=str(tmp_path / 's1.ids'), temperature=1.0, seed=3,
                                **common)
  distill_lib.distill_data(output_path=str(tmp_path / 's2.ids'), temperature=1.0, seed=3,
                           **common)
  assert 'sampled, temperature 1.0, seed 3' in s1['decoder']
  s = data_lib.read_target_ids(tmp_path / 's1.ids')
  assert s == data_lib.read_target_ids(tmp_path / 's2.ids')  # same seed, same samples
  assert s != g  # an untrained 8k-vocabulary model samples far from its argmax
  with pytest.raises(ValueError, match='distill_data.temperature must be >= 0'):
    distill_lib.distill_data(output_path=str(tmp_path / 'x.ids'), temperature=-1.0, **common)


def test_distill_data_cli_errors(tmp_path):
  """Bad settings exit 2 naming the setting; a failure inside the run is not one of them."""
  from specdec_jax.train import distill_data as distill_lib
  run = ['--gin.distill_data.target_run="runs/none"', f'--gin.distill_data.output_path="{tmp_path}/x"']
  assert distill_lib.main(run + ['--gin.distill_data.batch_size=0']) == 2
  assert distill_lib.main(run + ['--gin.distill_data.temperature=-0.5']) == 2
  assert distill_lib.main(run) == 2  # no such run: FileNotFoundError before decoding
  assert distill_lib.main(run + ['--gin.distill_data.seed=-2']) == 2
  assert not list(tmp_path.iterdir())
  # An output path that is a folder is refused before the target is even looked for.
  (tmp_path / 'x').mkdir()
  assert distill_lib.main(run) == 2
  assert list(tmp_path.iterdir()) == [tmp_path / 'x']
  # Its own vocabulary as the output: refused, the vocabulary untouched.
  vocab = tmp_path / 'v.model'
  vocab.write_bytes(b'spm')
  assert distill_lib.main([run[0], f'--gin.distill_data.vocab_path="{vocab}"',
                           f'--gin.distill_data.output_path="{vocab}"']) == 2
  assert vocab.read_bytes() == b'spm'


def _t5x_model_folder(path, cfg, params, step=7):
  """A model folder as the shipped pair has: config.json + T5X checkpoint_<step>/."""
  import json
  from specdec_jax import checkpoints
  path.mkdir(parents=True)
  checkpoints.save_t5x_checkpoint(params, path, step)
  (path / 'config.json').write_text(json.dumps(train_lib.config_to_dict(cfg)))
  return path


def test_load_run_reads_t5x_model_folders(tmp_path):
  """`load_run` (teacher_dir, init_params_dir, distill_data.target_run) reads a training run
  or a folder of T5X checkpoints such as the shipped pair's, newest step first."""
  from specdec_jax.train import run_files
  params = t5.init_params(TINY, jax.random.PRNGKey(3))
  folder = _t5x_model_folder(tmp_path / 'm', TINY, params)
  cfg, loaded = run_files.load_run(folder)
  assert cfg == TINY
  assert jax.tree_util.tree_structure(params) == jax.tree_util.tree_structure(loaded)
  for a, b in zip(jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(loaded)):
    assert b.dtype == np.float32 and np.array_equal(np.asarray(a), b)
  with pytest.raises(FileNotFoundError, match='has no config.json'):
    run_files.load_run(tmp_path)
  (tmp_path / 'empty').mkdir()
  (tmp_path / 'empty/config.json').write_text((folder / 'config.json').read_text())
  with pytest.raises(FileNotFoundError, match='neither params.msgpack'):
    run_files.load_run(tmp_path / 'empty')


def test_train_init_params_dir_starts_from_those_params(tmp_path):
  """Fine-tuning: `train.init_params_dir` replaces the random init (0 steps: the saved params
  are exactly the folder's); another model's folder is a ValueError before any step."""
  from specdec_jax.train import run_files
  start = t5.init_params(TINY.replace(vocab_size=8192), jax.random.PRNGKey(11))
  cfg = TINY.replace(vocab_size=8192)
  folder = _t5x_model_folder(tmp_path / 'init', cfg, start)
  root = _tiny_split(tmp_path)
  common = dict(model_config=cfg, vocab_path=str(SHIPPED_VOCAB), train_split='toy/train',
                data_dir=str(root), batch_size=4, buckets=(32,), max_steps=0,
                checkpoint_every_steps=1000)
  summary = train_lib.train(run_dir=str(tmp_path / 'run'), init_params_dir=str(folder), **common)
  assert summary['init_params_dir'] == str(folder)
  saved = run_files.load_params(tmp_path / 'run/params.msgpack')
  assert jax.tree_util.tree_structure(start) == jax.tree_util.tree_structure(saved)
  for a, b in zip(jax.tree_util.tree_leaves(start), jax.tree_util.tree_leaves(saved)):
    assert np.array_equal(np.asarray(a), np.asarray(b))
  other = _t5x_model_folder(tmp_path / 'other', cfg.replace(mlp_dim=32),
                            t5.init_params(cfg.replace(mlp_dim=32), jax.random.PRNGKey(2)))
  with pytest.raises(ValueError, match='train.init_params_dir=.* another config'):
    train_lib.train(run_dir=str(tmp_path / 'run2'), init_params_dir=str(other), **common)
  # A resumed run takes its params from its train state and never reads init_params_dir.
  train_lib.train(run_dir=str(tmp_path / 'run'), init_params_dir=str(other), **common)


def test_v5_draft_recipe_chains_the_exported_target():
  """The v5 draft recipe reads target v5 as exported (out/pair_v5/target) for both its data and
  its teacher, starts from the shipped v3.2 draft, and trains on the greedy set plus the three
  sampled sets the sampled-data config's header loops over."""
  from specdec_jax.train import distill_data  # noqa: F401  (registers distill_data with gin)
  try:
    for name, temperature in (('distill_data_v5.gin', 0.0), ('distill_data_sampled_v5.gin', 1.0)):
      gin.clear_config()
      gin.add_config_file_search_path(str(REPO))
      gin.parse_config_files_and_bindings([str(REPO / 'configs/train' / name)], [])
      assert gin.query_parameter('distill_data.target_run') == 'out/pair_v5/target'
      assert gin.query_parameter('distill_data.max_decode_len') == 64
      if temperature:
        assert gin.query_parameter('distill_data.temperature') == temperature
      else:
        assert gin.query_parameter('distill_data.output_path') == 'runs/distill_v5/greedy_train.ids'
    gin.clear_config()
    gin.add_config_file_search_path(str(REPO))
    gin.parse_config_files_and_bindings([str(REPO / 'configs/train/draft_ende_v5.gin')], [])
    assert gin.query_parameter('train.mode') == 'distill'
    assert gin.query_parameter('train.teacher_dir') == 'out/pair_v5/target'
    assert gin.query_parameter('train.init_params_dir') == 'runs/draft_v32'  # v3.2, from git
    assert gin.query_parameter('train.targets_path') == (
        'runs/distill_v5/greedy_train.ids',
        *(f'runs/distill_v5/sampled_train_s{s}.ids' for s in (1, 2, 3)))
    assert gin.query_parameter('train.tv_weight') == 1.0
    assert gin.query_parameter('train.run_dir') == 'runs/draft_ende_v5'
  finally:
    gin.clear_config()


def test_v31_recipe_and_the_shipped_pair():
  """The v3.1 draft's distillation configs and fine-tuning config point at the v3 target
  (shipped until v6, extracted from git into runs/target_v3), and `load_run` reads the
  shipped folders onto the pair's configs."""
  import json
  from specdec_jax.train import distill_data  # noqa: F401  (registers distill_data with gin)
  from specdec_jax.train import run_files
  root = REPO / 'specdec_jax/assets/demo_ende'
  pair = json.loads((root / 'pair.json').read_text())
  try:
    for name in ('distill_data_v3_shipped.gin', 'distill_data_sampled_v3_shipped.gin'):
      gin.clear_config()
      gin.add_config_file_search_path(str(REPO))
      gin.parse_config_files_and_bindings([str(REPO / 'configs/train' / name)], [])
      assert gin.query_parameter('distill_data.target_run') == 'runs/target_v3'  # v3, from git
    assert gin.query_parameter('distill_data.temperature') == 1.0  # the sampled set
    assert gin.query_parameter('distill_data.seed') == 1
    gin.clear_config()
    gin.add_config_file_search_path(str(REPO))
    gin.parse_config_files_and_bindings([str(REPO / 'configs/train/draft_ende_v31.gin')], [])
    assert gin.query_parameter('train.init_params_dir') == 'runs/draft_v3'  # v3, from git
    assert gin.query_parameter('train.teacher_dir') == 'runs/target_v3'
  finally:
    gin.clear_config()
  for role in ('target', 'draft'):
    # load_run reads the newest checkpoint_<step>: the folder must hold just the shipped one.
    assert [p.name for p in (root / role).glob('checkpoint_*')] == [
        pair[role]['checkpoint'].split('/')[-1]]
    config, params = run_files.load_run(root / role)
    assert run_files.config_to_dict(config) == pair[f'{role}_config']
    assert run_files.param_count(params) == pair[role]['params']


def _decoder_only_run(path, cfg, params, bidirectional):
  """A finished decoder-only training run: config.json, params.msgpack, summary.json."""
  import json
  from specdec_jax.train import run_files
  path.mkdir(parents=True)
  (path / 'config.json').write_text(json.dumps(train_lib.config_to_dict(cfg)))
  run_files.save_params(params, path / 'params.msgpack')
  (path / 'summary.json').write_text(json.dumps(
      {'inputs_bidirectional_attention': bidirectional}))
  return path


@pytest.mark.parametrize('bidirectional', [True, False])
def test_distill_data_and_agreement_for_a_decoder_only_target(tmp_path, bidirectional):
  """A decoder-only target's distillation data is its baseline decoder's greedy output with
  the run's own prefix-LM setting, and the teacher-forced agreement of a model with itself
  is 1 on every target position (the prompt positions are not counted)."""
  from specdec_jax.models import decoder_only
  from specdec_jax.models.config import DecoderOnlyConfig
  from specdec_jax.train import distill_data as distill_lib
  from specdec_jax.train import evaluation
  root = _tiny_split(tmp_path)
  cfg = DecoderOnlyConfig(vocab_size=8192, emb_dim=32, num_heads=2, head_dim=16, num_layers=2,
                          mlp_dim=64, dropout_rate=0.0)
  params = decoder_only.init_params(cfg, jax.random.PRNGKey(4))
  run = _decoder_only_run(tmp_path / 'run', cfg, params, bidirectional)
  out = distill_lib.distill_data(target_run=str(run), output_path=str(tmp_path / 'g.ids'),
                                 split='toy/train', vocab_path=str(SHIPPED_VOCAB),
                                 data_dir=str(root), batch_size=4, max_decode_len=8)
  assert ('prefix LM' if bidirectional else 'causal') in out['decoder']
  got = data_lib.read_target_ids(tmp_path / 'g.ids')
  sp = vocabulary.load_processor(SHIPPED_VOCAB)
  src, _ = data_lib.read_parallel('toy/train', root)
  inputs = data_lib.encode_inputs(sp, src)
  model = decoder_only.DecoderOnlyTransformer(cfg)
  expect, rows = [None] * 6, {}
  for idx, decodes in evaluation.decode_batches(
      model, params, inputs, batch_size=4, max_decode_len=8, sort_by_length=False,
      inputs_bidirectional_attention=bidirectional):
    for i, r in zip(idx, decodes):
      expect[i], rows[i] = evaluation.ids_until_eos(r), r
  assert got == expect
  # the other prefill gives other outputs on a random model: the flag was really used
  other = [None] * 6
  for idx, decodes in evaluation.decode_batches(
      model, params, inputs, batch_size=4, max_decode_len=8, sort_by_length=False,
      inputs_bidirectional_attention=not bidirectional):
    for i, r in zip(idx, decodes):
      other[i] = evaluation.ids_until_eos(r)
  assert other != expect
  enc = data_lib.pad_batch(inputs, 32)
  decodes = np.stack([rows[i] for i in range(6)])
  same = evaluation.draft_agreement(model, params, model, params, enc, decodes,
                                    inputs_bidirectional_attention=bidirectional)
  n_target = sum(min(len(x) + 1, 8) for x in expect)  # + EOS unless cut at 8
  assert same['positions'] == n_target and same['agree'] == n_target
  assert abs(same['beta'] - n_target) < 1e-3
  with pytest.raises(ValueError, match='inputs_bidirectional_attention must be True'):
    evaluation.draft_agreement(model, params, model, params, enc, decodes)


def test_decoder_only_student_must_share_the_teachers_prefix_lm_setting(tmp_path):
  from specdec_jax.models import decoder_only
  from specdec_jax.models.config import DecoderOnlyConfig
  cfg = DecoderOnlyConfig(vocab_size=8192, emb_dim=32, num_heads=2, head_dim=16, num_layers=1,
                          mlp_dim=64, dropout_rate=0.0)
  teacher = _decoder_only_run(tmp_path / 'teacher', cfg,
                              decoder_only.init_params(cfg, jax.random.PRNGKey(0)), True)
  with pytest.raises(ValueError, match='was trained with inputs_bidirectional_attention=True'):
    train_lib.train(run_dir=str(tmp_path / 'student'), model_config=cfg, mode='distill',
                    teacher_dir=str(teacher), inputs_bidirectional_attention=False,
                    data_dir=str(_tiny_split(tmp_path)), train_split='toy/train',
                    max_steps=1)
