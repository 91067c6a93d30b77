r"""Checks our decoder-only family against the REAL T5X (verification only, never a dependency).

    python scripts/check_t5x_decoder_only.py [--out=out/check_t5x_decoder_only.json]
        [--t5x_commit=cc342d4...]                      (repo root; about 1-2 min on CPU)

Run it in an environment where `import t5x` gives the real T5X, e.g. the one that
`shared/tools/real_t5x/build_env.sh` builds (see its README). This repository's
`specdec_jax` is imported from the checkout holding this script (it is put first on
`sys.path`), not from whatever copy the environment has installed.

For two tiny configs (gated-gelu with `logits_dense`; relu with `logits_via_embedding`):
  a. params tree: T5X's `t5x.examples.decoder_only.network.DecoderWrapper` initialised vs
     our `decoder_only.init_params` / `params_axes`: paths, shapes, dtypes and logical axes
     must be identical (whether the initial values also coincide is reported, not required).
  b. logits: T5X's initialised params loaded unchanged into our module; full-sequence
     logits of T5X's module vs ours on a padded batch, causal, prefix-LM
     (`decoder_causal_attention`) and packed (`decoder_segment_ids`): max |diff| over the
     non-padding positions must be <= --logits_tol (padding positions are reported too).
  c. decoding: T5X's `t5x.models.DecoderOnlyModel(..., decode_fn=decoding.temperature_sample)`
     `.predict_batch_with_aux(params, batch, decoder_params={'temperature': 0.0})` on a
     batch made by seqio's own `DecoderFeatureConverter` (prompts of different lengths,
     one empty), with `inputs_bidirectional_attention` False and True, vs our
     `decoder_only_generate(..., max_decode_len=L, max_length=L)` and
     `decoder_only_speculative_generate(..., gamma)` with a random tiny draft: the
     decodes must be equal token for token. T5X's `aux['scores']` vs our log-probs is
     reported (informational). So must our `SpeculativeDecoderOnlyModel(decode_fn=
     specdec_jax.interop.t5x.decoding.temperature_sample).predict_batch_with_aux` on the
     same batch (`model_class_decode_fn_vs_t5x`).
  d. scores: T5X's `DecoderOnlyModel.score_batch` vs the score from our module's logits
     (`models.family.forward`, log-softmax at the targets, times `decoder_loss_weights`).
  e. features: our `train.data.make_prefix_lm_features` vs seqio's DecoderFeatureConverter
     on the same rows (all features equal).
c and d run on two param sets: the scaled random params, and the same with EOS relabelled
onto the token T5X's greedy decodes emit most (so rows end at EOS at different lengths);
speculative decoding runs with a random tiny draft (almost every draft token rejected)
and with a noisy copy of the target (--draft_noise; partial acceptance).

Prints the JSON report, writes it atomically to --out, exits 1 on any failed check.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import flax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import traverse_util  # noqa: E402

import specdec_jax  # noqa: E402
from specdec_jax.generate.decoder_only import decoder_only_generate  # noqa: E402
from specdec_jax.generate.decoder_only import decoder_only_speculative_generate  # noqa: E402
from specdec_jax.models import decoder_only as do  # noqa: E402
from specdec_jax.models import family  # noqa: E402
from specdec_jax.interop.t5x import decoding as t5x_decoding  # noqa: E402
from specdec_jax.interop.t5x.decoder_only_model import SpeculativeDecoderOnlyModel  # noqa: E402
from specdec_jax.models.config import DecoderOnlyConfig  # noqa: E402
from specdec_jax.train import data as data_lib  # noqa: E402

EOS_ID = 1

TINY = dict(vocab_size=64, emb_dim=32, num_heads=2, num_layers=2, head_dim=16, mlp_dim=64,
            dropout_rate=0.0)
CONFIGS = {
    'gated_gelu_logits_dense': dict(mlp_activations=('gelu', 'linear'),
                                    logits_via_embedding=False),
    'relu_logits_via_embedding': dict(mlp_activations=('relu',), logits_via_embedding=True),
}
# Multipliers of the layers' output kernels (`self_attention/out`, `mlp/wo`) per config:
# with the tied N(0, 1) embedding the residual stream otherwise dominates and each token
# predicts itself (greedy decodes `[a, a, a, …]`); ×6 gives varied decodes.
LAYER_SCALE = {'gated_gelu_logits_dense': 1.0, 'relu_logits_via_embedding': 6.0}
DRAFT = dict(vocab_size=64, emb_dim=16, num_heads=2, num_layers=1, head_dim=8, mlp_dim=32,
             dropout_rate=0.0, mlp_activations=('relu',), logits_via_embedding=False)


def _flat(tree):
  return traverse_util.flatten_dict(flax.core.unfreeze(tree), sep='/')


def _to_jnp(tree):
  return jax.tree_util.tree_map(jnp.asarray, flax.core.unfreeze(tree))


def scale_params(params, factor: float, layer_factor: float = 1.0):
  """Sharper output distributions, so greedy decodes are not trivially constant:
  `logits_dense` kernel × factor, or (tied embedding) the final norm's scale × factor;
  every layer's `self_attention/out` and `mlp/wo` kernels × layer_factor."""
  params = jax.tree_util.tree_map(lambda x: x, flax.core.unfreeze(params))
  dec = params['decoder']
  if 'logits_dense' in dec:
    dec['logits_dense']['kernel'] = dec['logits_dense']['kernel'] * factor
  else:
    dec['decoder_norm']['scale'] = dec['decoder_norm']['scale'] * factor
  for name, layer in dec.items():
    if name.startswith('layers_'):
      for block, kernel in (('self_attention', 'out'), ('mlp', 'wo')):
        layer[block][kernel]['kernel'] = layer[block][kernel]['kernel'] * layer_factor
  return params


# ------------------------------------------------------------------------------ a. tree

def check_tree(network, t5x_cfg, cfg, seed):
  x = jnp.ones((1, 8), jnp.int32)
  theirs = network.DecoderWrapper(t5x_cfg).init(jax.random.PRNGKey(seed), x, x,
                                                 enable_dropout=False)
  t_params = _flat(theirs['params'])
  t_axes = {k.removesuffix('_axes'): tuple(v.names)
            for k, v in _flat(theirs['params_axes']).items()}
  ours = do.init_params(cfg, jax.random.PRNGKey(seed), 8)
  o_params = _flat(ours)
  o_axes = {k: tuple(v) for k, v in _flat(do.params_axes(cfg)).items()}
  t_shapes = {k: (tuple(v.shape), str(v.dtype)) for k, v in t_params.items()}
  o_shapes = {k: (tuple(v.shape), str(v.dtype)) for k, v in o_params.items()}
  diffs = []
  for k in sorted(set(t_shapes) | set(o_shapes)):
    if t_shapes.get(k) != o_shapes.get(k):
      diffs.append(f'{k}: T5X shape/dtype {t_shapes.get(k)} vs ours {o_shapes.get(k)}')
  for k in sorted(set(t_axes) | set(o_axes)):
    if t_axes.get(k) != o_axes.get(k):
      diffs.append(f'{k}: T5X axes {t_axes.get(k)} vs ours {o_axes.get(k)}')
  same_values = (set(t_params) == set(o_params) and all(
      np.array_equal(np.asarray(t_params[k]), np.asarray(o_params[k])) for k in t_params))
  return theirs['params'], {
      'identical': not diffs, 'num_params': len(t_params), 'num_axes': len(t_axes),
      'differences': diffs[:20],
      'paths': {k: [list(t_shapes[k][0]), list(t_axes.get(k, ()))] for k in sorted(t_shapes)},
      'same_initial_values_for_same_rng (informational)': bool(same_values)}


# ------------------------------------------------------------------------------ b. logits

def logits_batch(vocab, rng):
  """A padded batch [4, 16]: rows of 16, 12, 7 and 3 tokens; prefix regions 5, 1, 3, 0;
  the packed variant puts two segments in each row."""
  lengths, prefixes, length = (16, 12, 7, 3), (5, 1, 3, 0), 16
  tgt = np.zeros((len(lengths), length), np.int32)
  for b, n in enumerate(lengths):
    tgt[b, :n] = rng.randint(2, vocab, size=n)
  dec_in = np.zeros_like(tgt)
  dec_in[:, 1:] = tgt[:, :-1]
  causal = (np.arange(length)[None] <= np.array(prefixes)[:, None]).astype(np.int32)
  seg = np.zeros_like(tgt)
  for b, n in enumerate(lengths):
    cut = max(1, n // 2)
    seg[b, :cut], seg[b, cut:n] = 1, 2
  packed_in = dec_in.copy()
  for b, n in enumerate(lengths):  # BOS at the start of the second segment
    cut = max(1, n // 2)
    if cut < n:
      packed_in[b, cut] = 0
  return tgt, dec_in, causal, seg, packed_in


def check_logits(network, t5x_cfg, model, t_params, rng):
  tgt, dec_in, causal, seg, packed_in = logits_batch(t5x_cfg.vocab_size, rng)
  t5x_module = network.DecoderWrapper(t5x_cfg)
  ours_params = _to_jnp(t_params)
  variants = {
      'causal': dict(decoder_input_tokens=dec_in, decoder_target_tokens=tgt),
      'prefix_lm': dict(decoder_input_tokens=dec_in, decoder_target_tokens=tgt,
                        decoder_causal_attention=causal),
      'packed_segments': dict(decoder_input_tokens=packed_in, decoder_target_tokens=tgt,
                              decoder_segment_ids=seg),
  }
  out = {}
  valid = tgt > 0
  for name, kw in variants.items():
    kw = {k: jnp.asarray(v) for k, v in kw.items()}
    theirs = np.asarray(t5x_module.apply({'params': t_params}, **kw, enable_dropout=False))
    mine = np.asarray(model.apply({'params': ours_params}, **kw, enable_dropout=False))
    diff = np.abs(theirs - mine)
    out[name] = {'max_abs_diff_valid_positions': float(diff[valid].max()),
                 'max_abs_diff_all_positions': float(diff.max()),
                 'max_abs_logit': float(np.abs(theirs[valid]).max()),
                 'shape': list(theirs.shape), 'dtype': str(mine.dtype)}
  return out


# ------------------------------------------------------------------------------ c/d. model

def seqio_batch(rows, inputs_len, targets_len):
  """The batch seqio's DecoderFeatureConverter makes (no packing) from `rows` of
  (inputs, targets); the features' length is inputs_len + targets_len."""
  import seqio  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  def gen():
    for x, y in rows:
      yield {'inputs': np.asarray(x, np.int32), 'targets': np.asarray(y, np.int32)}
  ds = tf.data.Dataset.from_generator(gen, output_signature={
      'inputs': tf.TensorSpec([None], tf.int32), 'targets': tf.TensorSpec([None], tf.int32)})
  conv = seqio.DecoderFeatureConverter(pack=False)
  ds = conv(ds, {'inputs': inputs_len, 'targets': targets_len})
  feats = list(ds.as_numpy_iterator())
  return {k: np.stack([f[k] for f in feats]) for k in feats[0]}


def make_rows(vocab, rng, prompt_lengths, eos_ended):
  rows = []
  for m, ends in zip(prompt_lengths, eos_ended):
    x = list(rng.randint(2, vocab, size=m))
    if ends and m:
      x[-1] = EOS_ID  # seqio appends EOS to the inputs
    t = list(rng.randint(2, vocab, size=rng.randint(2, 8))) + [EOS_ID]
    rows.append((x, t))
  return rows


def compare_decodes(theirs, ours):
  theirs, ours = np.asarray(theirs), np.asarray(ours)
  bad = np.argwhere(theirs != ours)
  return {'equal': bool(bad.size == 0), 'rows': int(theirs.shape[0]),
          'positions_compared': int(theirs.size),
          'nonzero_tokens_compared': int(np.sum((theirs != 0) | (ours != 0))),
          'mismatched_positions': int(len(bad)),
          'first_mismatches': [
              {'row': int(r), 'pos': int(p), 't5x': int(theirs[r, p]), 'ours': int(ours[r, p])}
              for r, p in bad[:12]]}


def t5x_decode(t5x, t5x_cfg, network, t_params, batch, bidirectional):
  """T5X's `DecoderOnlyModel.predict_batch_with_aux` at temperature 0 → (decodes, scores)."""
  import seqio  # pylint: disable=g-import-not-at-top
  vocab = seqio.PassThroughVocabulary(t5x_cfg.vocab_size, eos_id=EOS_ID)
  t5x_model = t5x.models.DecoderOnlyModel(
      module=network.DecoderWrapper(t5x_cfg), vocabulary=vocab, optimizer_def=None,
      inputs_bidirectional_attention=bidirectional, decode_fn=t5x.decoding.temperature_sample)
  jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
  decodes, aux = t5x_model.predict_batch_with_aux(t_params, jbatch,
                                                  decoder_params={'temperature': 0.0})
  return t5x_model, np.asarray(decodes), np.asarray(aux['scores'])


def check_model(t5x, t5x_cfg, network, model, t_params, drafts, batch, bidirectional, gamma):
  t5x_model, t_decodes, t_scores = t5x_decode(t5x, t5x_cfg, network, t_params, batch,
                                              bidirectional)
  jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
  length = batch['decoder_input_tokens'].shape[1]
  inputs = batch['decoder_input_tokens'] * batch['decoder_causal_attention']
  m = np.sum(inputs[:, 1:] != 0, axis=1)
  prompts = inputs[:, 1:1 + int(m.max())]  # [0, x_1 .. x_m, 0 ..] without the BOS
  ours_params = _to_jnp(t_params)
  base, base_lp = decoder_only_generate(
      model, ours_params, prompts, max_decode_len=length, max_length=length, eos_id=EOS_ID,
      temperature=0.0, inputs_bidirectional_attention=bidirectional)
  base = np.asarray(base)[:, 0]
  ended = np.cumsum(t_decodes == EOS_ID, axis=1) > 0
  out = {
      'prompt_lengths': m.tolist(), 'feature_length': int(length),
      'distinct_generated_tokens_t5x': int(len(set(t_decodes[t_decodes != 0].tolist()))),
      'rows_with_eos_t5x': int(np.sum(np.any(t_decodes == EOS_ID, axis=1))),
      'rows_filling_the_length_without_eos_t5x': int(np.sum(
          ~np.any(t_decodes == EOS_ID, axis=1))),
      'generated_pad_0_before_eos_or_end_t5x': int(np.sum(
          (t_decodes == 0) & (np.arange(length)[None] < (length - m)[:, None]) & ~ended)),
      't5x_decodes': t_decodes.tolist(),
      'baseline_vs_t5x': compare_decodes(t_decodes, base),
      'scores_max_abs_diff_baseline (informational)':
          float(np.abs(t_scores - np.asarray(base_lp)[:, -1]).max()),
  }
  if not out['baseline_vs_t5x']['equal']:
    out['ours_baseline_decodes'] = base.tolist()
  for draft_name, (draft_model, draft_params) in drafts.items():
    spec, spec_lp, stats = decoder_only_speculative_generate(
        model, ours_params, draft_model, draft_params, prompts, max_decode_len=length,
        gamma=gamma, max_length=length, eos_id=EOS_ID, temperature=0.0,
        inputs_bidirectional_attention=bidirectional)
    spec = np.asarray(spec)[:, 0]
    r = compare_decodes(t_decodes, spec)
    r['speculative_stats'] = {k: int(np.sum(np.asarray(getattr(stats, k)))) for k in
                              ('target_calls', 'drafted', 'accepted', 'tokens')}
    r['scores_max_abs_diff (informational)'] = float(
        np.abs(t_scores - np.asarray(spec_lp)[:, -1]).max())
    if not r['equal']:
      r['ours_decodes'] = spec.tolist()
    out[f'speculative_vs_t5x[{draft_name}]'] = r
  # c'. Our T5X model class with a user-set decode_fn, called as T5X's DecoderOnlyModel
  #     calls it (our prefilled cache, initial_index, remove_prefix).
  ours_model = SpeculativeDecoderOnlyModel(
      model, t5x_model.output_vocabulary, None, decode_fn=t5x_decoding.temperature_sample,
      inputs_bidirectional_attention=bidirectional, eos_id=EOS_ID)
  d_decodes, d_aux = ours_model.predict_batch_with_aux(ours_params, jbatch,
                                                       decoder_params={'temperature': 0.0})
  r = compare_decodes(t_decodes, d_decodes)
  r['scores_max_abs_diff (informational)'] = float(
      np.abs(t_scores - np.asarray(d_aux['scores'])).max())
  if not r['equal']:
    r['ours_decodes'] = np.asarray(d_decodes).tolist()
  out['model_class_decode_fn_vs_t5x'] = r
  # d. score_batch vs our module's logits.
  score_batch = dict(jbatch)
  if not bidirectional:
    score_batch.pop('decoder_causal_attention')
  t_score = np.asarray(t5x_model.score_batch(t_params, jbatch))
  logits = family.forward(model, ours_params, score_batch, enable_dropout=False)
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  tok = jnp.take_along_axis(logp, jbatch['decoder_target_tokens'][..., None], axis=-1)[..., 0]
  o_score = np.asarray(jnp.sum(tok * jbatch['decoder_loss_weights'], axis=-1))
  out['score_batch'] = {'t5x': t_score.tolist(), 'ours': o_score.tolist(),
                        'max_abs_diff': float(np.abs(t_score - o_score).max()),
                        'max_rel_diff': float(np.max(np.abs(t_score - o_score) /
                                                     np.maximum(np.abs(t_score), 1e-6)))}
  return out


def relabel_eos(params, token: int):
  """The same model with token ids `EOS_ID` and `token` swapped (embedding rows and, when
  present, `logits_dense` columns): it emits EOS wherever the original emitted `token`,
  so greedy rows end at different lengths."""
  params = jax.tree_util.tree_map(lambda x: x, flax.core.unfreeze(params))
  dec = params['decoder']
  perm = np.arange(dec['token_embedder']['embedding'].shape[0])
  perm[[EOS_ID, token]] = perm[[token, EOS_ID]]
  dec['token_embedder']['embedding'] = dec['token_embedder']['embedding'][perm]
  if 'logits_dense' in dec:
    dec['logits_dense']['kernel'] = dec['logits_dense']['kernel'][:, perm]
  return params


def noisy_copy(params, rel: float, seed: int):
  """`params` + Gaussian noise of `rel` × each array's std: a draft that often agrees."""
  leaves, tree = jax.tree_util.tree_flatten(flax.core.unfreeze(params))
  keys = jax.random.split(jax.random.PRNGKey(seed), len(leaves))
  return jax.tree_util.tree_unflatten(tree, [
      jnp.asarray(x) + rel * (jnp.std(x) + 1e-3) * jax.random.normal(k, x.shape, x.dtype)
      for x, k in zip(leaves, keys)])


# ------------------------------------------------------------------------------ main

SOURCES = ('specdec_jax/models/decoder_only.py', 'specdec_jax/models/layers.py',
           'specdec_jax/models/cache.py', 'specdec_jax/generate/decoder_only.py',
           'specdec_jax/decoding/baseline.py', 'specdec_jax/decoding/speculative.py',
           'specdec_jax/train/data.py')


def source_state() -> dict:
  """The checkout's git HEAD and the sha256 of the checked files (the work tree may hold
  uncommitted changes, so HEAD alone does not name what was checked)."""
  import hashlib  # pylint: disable=g-import-not-at-top
  import subprocess  # pylint: disable=g-import-not-at-top
  try:
    head = subprocess.run(['git', '-C', str(REPO), 'rev-parse', 'HEAD'], capture_output=True,
                          text=True, check=True).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    head = None
  return {'git_head': head, 'sha256': {
      f: hashlib.sha256((REPO / f).read_bytes()).hexdigest()[:16] for f in SOURCES}}


def write_json_atomic(path: pathlib.Path, obj) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix=f'.{path.name}.', suffix='.tmp', dir=path.parent)
  try:
    with os.fdopen(fd, 'w') as f:
      json.dump(obj, f, indent=1)
      f.write('\n')
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--out', default='out/check_t5x_decoder_only.json')
  ap.add_argument('--t5x_commit', default=None,
                  help='recorded in the report (the source tree of T5X has no git metadata)')
  ap.add_argument('--seed', type=int, default=0)
  ap.add_argument('--inputs_len', type=int, default=8, help='seqio inputs feature length')
  ap.add_argument('--targets_len', type=int, default=12, help='seqio targets feature length')
  ap.add_argument('--prompt_lengths', default='1,3,5,0,2,7',
                  help='per-row prompt lengths (rows = their number)')
  ap.add_argument('--gamma', type=int, default=3)
  ap.add_argument('--logit_scale', type=float, default=3.0)
  ap.add_argument('--draft_noise', type=float, default=0.15,
                  help='relative noise of the second draft (a noisy copy of the target)')
  ap.add_argument('--logits_tol', type=float, default=1e-5)
  ap.add_argument('--score_tol', type=float, default=1e-4)
  args = ap.parse_args(argv)

  import t5x  # pylint: disable=g-import-not-at-top
  import t5x.decoding  # noqa: F401  pylint: disable=g-import-not-at-top
  import t5x.models  # noqa: F401  pylint: disable=g-import-not-at-top
  import seqio  # pylint: disable=g-import-not-at-top
  from t5x.examples.decoder_only import network  # pylint: disable=g-import-not-at-top

  prompt_lengths = [int(s) for s in args.prompt_lengths.split(',')]
  if max(prompt_lengths) > args.inputs_len:
    ap.error('--prompt_lengths exceed --inputs_len')
  report = {
      'env': {'t5x_file': t5x.__file__, 't5x_commit': args.t5x_commit,
              'specdec_jax_file': specdec_jax.__file__, 'jax': jax.__version__,
              'flax': flax.__version__, 'seqio': getattr(seqio, '__version__', None),
              'backend': jax.default_backend(), 'specdec_sources': source_state()},
      'settings': {k: v for k, v in vars(args).items() if k != 'out'},
      'configs': {}}
  failures = []
  for ci, (name, overrides) in enumerate(CONFIGS.items()):
    rng = np.random.RandomState(args.seed + ci)
    cfg = DecoderOnlyConfig(**TINY, **overrides)
    t5x_cfg = network.TransformerConfig(**TINY, **overrides)
    model = do.DecoderOnlyTransformer(cfg)
    res = {'config': {**TINY, **overrides},
           'param_scaling': {'logits': args.logit_scale, 'layer_outputs': LAYER_SCALE[name]}}
    t_params, res['a_param_tree'] = check_tree(network, t5x_cfg, cfg, args.seed + ci)
    if not res['a_param_tree']['identical']:
      failures.append(f'{name}: a. param tree')
    t_params = scale_params(t_params, args.logit_scale, LAYER_SCALE[name])
    res['b_logits'] = check_logits(network, t5x_cfg, model, t_params, rng)
    for v, r in res['b_logits'].items():
      if not r['max_abs_diff_valid_positions'] <= args.logits_tol:
        failures.append(f'{name}: b. logits {v} ({r["max_abs_diff_valid_positions"]:.3g})')
    draft_cfg = DecoderOnlyConfig(**DRAFT)
    random_draft = (do.DecoderOnlyTransformer(draft_cfg),
                    scale_params(do.init_params(draft_cfg, jax.random.PRNGKey(100 + ci)),
                                 args.logit_scale))
    rows = make_rows(cfg.vocab_size, rng, prompt_lengths,
                     [i % 2 == 1 for i in range(len(prompt_lengths))])
    batch = seqio_batch(rows, args.inputs_len, args.targets_len)
    res['seqio_batch'] = {k: v.tolist() for k, v in batch.items()}
    # e. our feature builder (specdec_jax.train.data.make_prefix_lm_features) vs seqio's.
    ours_feats = data_lib.make_prefix_lm_features([x for x, _ in rows], [y for _, y in rows],
                                                  args.inputs_len + args.targets_len)
    diff_feats = sorted(k for k in set(batch) | set(ours_feats) if k not in batch or
                        k not in ours_feats or not np.array_equal(batch[k], ours_feats[k]))
    res['e_make_prefix_lm_features_vs_seqio'] = {'identical': not diff_feats,
                                                 'features': sorted(batch),
                                                 'differing': diff_feats}
    if diff_feats:
      failures.append(f'{name}: e. make_prefix_lm_features {diff_feats}')
    # Scenario 2: EOS relabelled onto the token T5X's causal greedy decodes emit most.
    _, first, _ = t5x_decode(t5x, t5x_cfg, network, t_params, batch, False)
    counts = np.bincount(first[first > EOS_ID], minlength=cfg.vocab_size)
    scenarios = {'scaled': t_params,
                 f'scaled_eos_relabelled_with_{int(counts.argmax())}':
                     relabel_eos(t_params, int(counts.argmax()))}
    for scenario, params in scenarios.items():
      drafts = {'random_tiny_draft': random_draft,
                f'target_plus_{args.draft_noise}_noise': (
                    model, noisy_copy(params, args.draft_noise, 200 + ci))}
      for bidirectional in (False, True):
        key = f'c_d_{scenario}_{"prefix_lm" if bidirectional else "causal"}'
        r = check_model(t5x, t5x_cfg, network, model, params, drafts, batch, bidirectional,
                        args.gamma)
        res[key] = r
        for which in [k for k in r if k.startswith(('baseline_vs', 'speculative_vs',
                                                    'model_class_decode_fn_vs'))]:
          if not r[which]['equal']:
            failures.append(f'{name}: c. {key} {which} '
                            f'({r[which]["mismatched_positions"]} positions differ)')
        if not r['score_batch']['max_rel_diff'] <= args.score_tol:
          failures.append(f'{name}: d. {key} score_batch '
                          f'({r["score_batch"]["max_abs_diff"]:.3g})')
    report['configs'][name] = res
  report['failures'] = failures
  report['passed'] = not failures
  text = json.dumps(report, indent=1)
  print(text)
  write_json_atomic(pathlib.Path(args.out), report)
  return 0 if report['passed'] else 1


if __name__ == '__main__':
  sys.exit(main())
