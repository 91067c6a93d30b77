"""Decoder-only models: T5X's param tree, prefill, and both decoders, exact.

Param tree: the names, shapes and logical axes T5X's `t5x/examples/decoder_only/network.py`
builds (mirrored below from its code: `DecoderWrapper` → `decoder/…`), for gated-gelu,
relu and tied-embedding configs; with t5x importable, against T5X's own module too.

Prefill: one forward pass over the prompt region, then k-token cached calls, gives the
logits of the full-sequence forward (T5X's mask: causal, or bidirectional over the
inputs region in prefix-LM mode), per row with different prompt lengths; a causal
prefill of a prefix-LM prompt (the planted wrong prefill) does not.

Greedy: the baseline's tokens equal a naive loop of full forward passes; speculative
greedy output equals the baseline's, token for token, for every drafter, a policy,
block verification, γ 1 and 3, num_decodes 2, prompts of lengths 0 … 6 in one batch.

Distribution (paper Theorem 3.5): tiny decoder-only target and draft over 6 ids, two
prompts of different lengths (3 and 1) in one batch, outputs of length 3. The exact
probability of every output of each row is computed by enumerating all 6^3
continuations with full forward passes under the same standardization; N = 20,000
samples per row (seed 0, one batched call, `num_decodes` = N) are compared with a
chi-square goodness-of-fit test (bins with expected count < 5 merged), pass at p-value
≥ 1e-3, for T = 1, T = 0.7 with top-k 3, T = 1 with top-p 0.8, prefix LM and causal, and
per-row temperatures with a greedy row. A prefix-LM target decoded with a causal prefill
(the planted wrong prefill) must fail the same test (p-value < 1e-3).
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import generate
from specdec_jax.decoding import policies
from specdec_jax.decoding import sampling
from specdec_jax.models import decoder_only as do
from specdec_jax.models.config import DecoderOnlyConfig, from_dict, to_dict
from specdec_jax.train import data as data_lib

from test_speculative_distribution import N, P_MIN, chi_square_pvalue


def tiny_config(**overrides) -> DecoderOnlyConfig:
  base = dict(vocab_size=37, emb_dim=16, num_heads=2, num_layers=2, head_dim=8, mlp_dim=32,
              mlp_activations=('gelu', 'linear'), dropout_rate=0.0)
  base.update(overrides)
  return DecoderOnlyConfig(**base)


# ------------------------------------------------------------------------------ param tree

def t5x_rule_tree(cfg: DecoderOnlyConfig) -> dict:
  """{path: (shape, axes)} that T5X's decoder-only network builds (mirrored from its code)."""
  e, h, d, m, v = cfg.emb_dim, cfg.num_heads, cfg.head_dim, cfg.mlp_dim, cfg.vocab_size
  tree = {'decoder/token_embedder/embedding': ((v, e), ('vocab', 'embed')),
          'decoder/relpos_bias/rel_embedding': ((h, 32), ('heads', 'relpos_buckets')),
          'decoder/decoder_norm/scale': ((e,), ('embed',))}
  if not cfg.logits_via_embedding:
    tree['decoder/logits_dense/kernel'] = ((e, v), ('embed', 'vocab'))
  wi = ['wi'] if len(cfg.mlp_activations) == 1 else [
      f'wi_{i}' for i in range(len(cfg.mlp_activations))]
  for i in range(cfg.num_layers):
    p = f'decoder/layers_{i}'
    tree[f'{p}/pre_self_attention_layer_norm/scale'] = ((e,), ('embed',))
    tree[f'{p}/pre_mlp_layer_norm/scale'] = ((e,), ('embed',))
    for name in ('query', 'key', 'value'):
      tree[f'{p}/self_attention/{name}/kernel'] = ((e, h * d), ('embed', 'joined_kv'))
    tree[f'{p}/self_attention/out/kernel'] = ((h * d, e), ('joined_kv', 'embed'))
    for name in wi:
      tree[f'{p}/mlp/{name}/kernel'] = ((e, m), ('embed', 'mlp'))
    tree[f'{p}/mlp/wo/kernel'] = ((m, e), ('mlp', 'embed'))
  return tree


def _flat(tree, prefix=''):
  out = {}
  for k, v in tree.items():
    if isinstance(v, dict):
      out.update(_flat(v, f'{prefix}{k}/'))
    else:
      out[f'{prefix}{k}'] = v
  return out


@pytest.mark.parametrize('overrides', [
    {}, {'mlp_activations': ('relu',)}, {'logits_via_embedding': True, 'num_layers': 3}])
def test_param_tree_is_t5x(overrides):
  cfg = tiny_config(**overrides)
  shapes = {k: tuple(v.shape) for k, v in _flat(do.init_params(cfg, jax.random.PRNGKey(0))).items()}
  axes = _flat(do.params_axes(cfg))
  expected = t5x_rule_tree(cfg)
  assert shapes == {k: s for k, (s, _) in expected.items()}
  assert axes == {k: a for k, (_, a) in expected.items()}


def test_param_tree_equals_t5x_module_when_installed():
  network = pytest.importorskip('t5x.examples.decoder_only.network')
  cfg = tiny_config()
  t5x_cfg = network.TransformerConfig(
      vocab_size=cfg.vocab_size, emb_dim=cfg.emb_dim, num_heads=cfg.num_heads,
      num_layers=cfg.num_layers, head_dim=cfg.head_dim, mlp_dim=cfg.mlp_dim,
      mlp_activations=cfg.mlp_activations, dropout_rate=0.0)
  x = jnp.ones((1, 4), jnp.int32)
  theirs = jax.eval_shape(lambda: network.DecoderWrapper(t5x_cfg).init(
      jax.random.PRNGKey(0), x, x, enable_dropout=False))
  ours = jax.eval_shape(lambda: do.init_params(cfg, jax.random.PRNGKey(0)))
  import flax  # pylint: disable=g-import-not-at-top
  assert ({k: v.shape for k, v in _flat(flax.core.unfreeze(theirs['params'])).items()} ==
          {k: v.shape for k, v in _flat(ours).items()})


def test_config_dict_round_trip_names_the_family():
  cfg = tiny_config(dtype=jnp.bfloat16)
  d = to_dict(cfg)
  assert d['family'] == 'decoder_only'
  assert from_dict(d) == cfg
  with pytest.raises(ValueError, match='unknown model family'):
    from_dict({**d, 'family': 'rnn'})
  with pytest.raises(ValueError, match='num_encoder_layers'):
    from_dict({**d, 'num_encoder_layers': 2})


def test_check_params_names_the_mismatch():
  cfg = tiny_config()
  params = do.init_params(cfg, jax.random.PRNGKey(0))
  do.check_params(params, cfg)
  with pytest.raises(ValueError, match='logits_dense'):
    do.check_params(params, cfg.replace(logits_via_embedding=True))
  with pytest.raises(ValueError, match='layers_2'):
    do.check_params(params, cfg.replace(num_layers=3))


def test_prefix_lm_features_are_t5x():
  """The example of T5X's `DecoderOnlyModel.predict_batch_with_aux` docstring."""
  f = data_lib.make_prefix_lm_features([[9, 4, 6, 1]], [[3, 9, 1]], 9)
  np.testing.assert_array_equal(f['decoder_target_tokens'][0], [9, 4, 6, 1, 3, 9, 1, 0, 0])
  np.testing.assert_array_equal(f['decoder_input_tokens'][0], [0, 9, 4, 6, 1, 3, 9, 1, 0])
  np.testing.assert_array_equal(f['decoder_causal_attention'][0], [1, 1, 1, 1, 1, 0, 0, 0, 0])
  np.testing.assert_array_equal(f['decoder_loss_weights'][0], [0, 0, 0, 0, 1, 1, 1, 0, 0])
  assert 'decoder_causal_attention' not in data_lib.make_prefix_lm_features(
      [[9, 1]], [[3, 1]], 6, bidirectional=False)


# ------------------------------------------------------------------------------ prefill

@pytest.fixture(scope='module')
def tiny():
  cfg = tiny_config()
  model = do.DecoderOnlyTransformer(cfg)
  params = do.init_params(cfg, jax.random.PRNGKey(0))
  draft_cfg = cfg.replace(num_layers=1, emb_dim=8, head_dim=4, mlp_dim=16)
  draft = do.DecoderOnlyTransformer(draft_cfg)
  draft_params = do.init_params(draft_cfg, jax.random.PRNGKey(1))
  return model, params, draft, draft_params


PROMPT_LENGTHS = (2, 4, 1)


def _full_and_stepped(model, params, bidirectional, prefill_bidirectional):
  rng = np.random.RandomState(0)
  batch, length = len(PROMPT_LENGTHS), 12
  seqs = np.zeros((batch, length), np.int32)
  for b, m in enumerate(PROMPT_LENGTHS):
    seqs[b, :m + 6] = rng.randint(2, model.config.vocab_size, size=m + 6)
  dec_in = np.concatenate([np.zeros((batch, 1), np.int32), seqs[:, :-1]], axis=1)
  causal = (np.arange(length)[None] <= np.array(PROMPT_LENGTHS)[:, None]).astype(np.int32)
  full = model.apply({'params': params}, dec_in, seqs,
                     decoder_causal_attention=causal if bidirectional else None,
                     enable_dropout=False)
  p_len = max(PROMPT_LENGTHS) + 1
  cache, m = do.prefill_cache(model, params, dec_in[:, :p_len] * causal[:, :p_len], length + 4,
                              causal[:, :p_len], prefill_bidirectional)
  np.testing.assert_array_equal(m, PROMPT_LENGTHS)
  step = do.make_step_fn(model, params)
  padded = np.pad(dec_in, ((0, 0), (0, 4)))
  pos, got, want = np.array(m), [], []
  for _ in range(2):  # two 3-token calls per row from its own position
    toks = np.stack([padded[b, pos[b]:pos[b] + 3] for b in range(batch)])
    logits, cache = step(jnp.asarray(toks), jnp.asarray(pos), cache)
    for b in range(batch):
      got.append(np.asarray(logits[b]))
      want.append(np.asarray(full[b, pos[b]:pos[b] + 3]))
    pos = pos + 3
  return np.stack(got), np.stack(want)


@pytest.mark.parametrize('bidirectional', [False, True])
def test_prefill_then_k_token_steps_equal_the_full_forward(tiny, bidirectional):
  model, params, _, _ = tiny
  got, want = _full_and_stepped(model, params, bidirectional, bidirectional)
  np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-5)


def test_planted_causal_prefill_of_a_prefix_lm_prompt_differs(tiny):
  model, params, _, _ = tiny
  got, want = _full_and_stepped(model, params, True, False)
  assert np.max(np.abs(got - want)) > 1e-3


# ------------------------------------------------------------------------------ greedy

def _prompts(lengths, vocab, seed=0):
  rng = np.random.RandomState(seed)
  out = np.zeros((len(lengths), max(lengths) or 1), np.int32)
  for b, m in enumerate(lengths):
    out[b, :m] = rng.randint(2, vocab, size=m)
  return out


@pytest.mark.parametrize('bidirectional', [False, True])
def test_greedy_baseline_equals_a_loop_of_full_forward_passes(tiny, bidirectional):
  model, params, _, _ = tiny
  lengths = (0, 3, 5)
  prompts = _prompts(lengths, model.config.vocab_size)
  decodes, _ = generate.decoder_only_generate(model, params, prompts, 8, eos_id=1,
                                              inputs_bidirectional_attention=bidirectional)
  for b, m in enumerate(lengths):
    seq, out = list(prompts[b, :m]), []
    for _ in range(8):
      dec_in = np.array([[0] + seq], np.int32)
      causal = np.array([[1] * (m + 1) + [0] * (len(seq) - m)], np.int32)
      logits = model.apply({'params': params}, dec_in, np.ones_like(dec_in),
                           decoder_causal_attention=causal if bidirectional else None,
                           enable_dropout=False)
      token = int(jnp.argmax(logits[0, -1]))
      out.append(token)
      seq.append(token)
      if token == 1:
        break
    np.testing.assert_array_equal(np.asarray(decodes[b, 0]), out + [0] * (8 - len(out)))


GREEDY_CASES = [
    dict(gamma=1), dict(gamma=3), dict(gamma=3, drafter='lookup'),
    dict(gamma=3, drafter='lookup+model'), dict(gamma=3, draft_policy='heuristic'),
    dict(gamma=3, verification='block'), dict(gamma=2, num_decodes=2),
]


@pytest.mark.parametrize('bidirectional', [False, True])
def test_greedy_speculative_equals_the_baseline(tiny, bidirectional):
  model, params, draft, draft_params = tiny
  prompts = _prompts((0, 1, 3, 6, 4), model.config.vocab_size, seed=1)
  base, _ = generate.decoder_only_generate(model, params, prompts, 12, eos_id=1,
                                           inputs_bidirectional_attention=bidirectional)
  for case in GREEDY_CASES:
    case = dict(case)
    nd = case.pop('num_decodes', 1)
    out, _, stats = generate.decoder_only_speculative_generate(
        model, params, draft, draft_params, prompts, 12, eos_id=1, num_decodes=nd,
        inputs_bidirectional_attention=bidirectional, **case)
    for j in range(nd):
      np.testing.assert_array_equal(np.asarray(out[:, j]), np.asarray(base[:, 0]), err_msg=str(case))
    ended = np.asarray(base[:, 0] == 1).any(axis=1)
    lengths = np.where(ended, np.argmax(np.asarray(base[:, 0]) == 1, axis=1) + 1, 12)
    np.testing.assert_array_equal(np.asarray(stats.tokens[:, 0]), lengths)


def test_greedy_bigram_drafter_equals_the_baseline(tiny):
  model, params, _, _ = tiny
  prompts = _prompts((2, 5), model.config.vocab_size, seed=2)
  base, _ = generate.decoder_only_generate(model, params, prompts, 10, eos_id=1)
  v = model.config.vocab_size
  ids = np.tile(np.arange(4, dtype=np.int32)[None] + 2, (v, 1))
  table = (ids, np.log(np.full(ids.shape, 0.25, np.float32)))
  out, _, _ = generate.decoder_only_speculative_generate(
      model, params, None, None, prompts, 10, 3, eos_id=1, drafter='bigram', ngram_table=table)
  np.testing.assert_array_equal(np.asarray(out), np.asarray(base))


def test_bad_prompts_are_refused_before_compiling(tiny):
  model, params, _, _ = tiny
  with pytest.raises(ValueError, match='0 inside a prompt'):
    generate.decoder_only_generate(model, params, np.array([[3, 0, 4]]), 4)
  with pytest.raises(ValueError, match='max_decode_len'):
    generate.decoder_only_generate(model, params, np.array([[3, 4]]), 0)
  with pytest.raises(ValueError, match=r'prompts must be \[batch, P\]'):
    generate.decoder_only_generate(model, params, np.array([3, 4]), 4)
  with pytest.raises(ValueError, match='needs draft_model'):
    generate.decoder_only_speculative_generate(model, params, None, None, np.array([[3]]), 4, 2)


# ------------------------------------------------------------------------------ distribution

V, LENGTH = 6, 3
DIST_PROMPTS = np.array([[3, 4, 5], [2, 0, 0]], np.int32)


@pytest.fixture(scope='module')
def dist_models():
  cfg = tiny_config(vocab_size=V)
  model = do.DecoderOnlyTransformer(cfg)
  params = do.init_params(cfg, jax.random.PRNGKey(10))
  # Sharpen the target so its distributions are far from uniform.
  params['decoder']['logits_dense']['kernel'] = params['decoder']['logits_dense']['kernel'] * 3
  draft_params = do.init_params(cfg, jax.random.PRNGKey(11))
  return model, params, draft_params


def exact_distribution(model, params, prompt, bidirectional, temperature, topk, topp):
  """{output tuple: probability} of one prompt by enumerating all V^LENGTH continuations."""
  m = int(np.sum(prompt != 0))
  seqs = np.array(list(itertools.product(range(V), repeat=LENGTH)), np.int32)
  rows = np.concatenate([np.tile(prompt[:m], (len(seqs), 1)), seqs], axis=1)
  dec_in = np.concatenate([np.zeros((len(seqs), 1), np.int32), rows[:, :-1]], axis=1)
  causal = np.zeros_like(dec_in)
  causal[:, :m + 1] = 1
  logits = model.apply({'params': params}, jnp.asarray(dec_in), jnp.ones_like(dec_in),
                       decoder_causal_attention=jnp.asarray(causal) if bidirectional else None,
                       enable_dropout=False)[:, m:]
  probs = np.asarray(sampling.probs_from_logits(
      sampling.standardize(logits, temperature, topk, topp)), np.float64)
  step_p = np.take_along_axis(probs, seqs[..., None], axis=-1)[..., 0]
  dist, seen = {}, set()
  for seq, p in zip(seqs, step_p):
    stop = int(np.argmax(seq == 1)) + 1 if (seq == 1).any() else LENGTH
    prefix = tuple(int(x) for x in seq[:stop])
    if prefix in seen:
      continue
    seen.add(prefix)
    out = prefix + (0,) * (LENGTH - stop)
    dist[out] = dist.get(out, 0.0) + float(np.prod(p[:stop]))
  return dist


def _samples(dist_models, bidirectional, temperature, topk, topp, gamma=2,
             prefill_bidirectional=None):
  model, params, draft_params = dist_models
  if prefill_bidirectional is None:
    prefill_bidirectional = bidirectional
  out, _, _ = generate.decoder_only_speculative_generate(
      model, params, model, draft_params, DIST_PROMPTS, LENGTH, gamma, eos_id=1,
      temperature=temperature, topk=topk, topp=topp, num_decodes=N,
      decode_rng=jax.random.PRNGKey(0), inputs_bidirectional_attention=prefill_bidirectional)
  return np.asarray(out)


SETTINGS = [(1.0, 0, 0.0), (0.7, 3, 0.0), (1.0, 0, 0.8)]


@pytest.mark.parametrize('temperature, topk, topp', SETTINGS)
@pytest.mark.parametrize('bidirectional', [False, True])
def test_distribution_matches_the_target(dist_models, bidirectional, temperature, topk, topp):
  model, params, _ = dist_models
  samples = _samples(dist_models, bidirectional, temperature, topk, topp)
  for b in range(len(DIST_PROMPTS)):
    dist = exact_distribution(model, params, DIST_PROMPTS[b], bidirectional, temperature,
                              topk, topp)
    pvalue = chi_square_pvalue(samples[b], dist)
    assert pvalue >= P_MIN, f'row {b}: chi-square p={pvalue:.2e}'


def test_per_row_temperatures_with_a_greedy_row(dist_models):
  model, params, _ = dist_models
  samples = _samples(dist_models, True, jnp.array([1.0, 0.0]), 0, 0.0, gamma=3)
  dist = exact_distribution(model, params, DIST_PROMPTS[0], True, 1.0, 0, 0.0)
  assert chi_square_pvalue(samples[0], dist) >= P_MIN
  greedy = exact_distribution(model, params, DIST_PROMPTS[1], True, 0.0, 0, 0.0)
  (only,) = [k for k, v in greedy.items() if v > 0.5]
  assert all(tuple(int(x) for x in row) == only for row in samples[1])


def test_planted_causal_prefill_fails_the_chi_square(dist_models):
  """A prefix-LM target decoded with a causal prefill is not the prefix-LM target."""
  model, params, _ = dist_models
  samples = _samples(dist_models, True, 1.0, 0, 0.0, prefill_bidirectional=False)
  dist = exact_distribution(model, params, DIST_PROMPTS[0], True, 1.0, 0, 0.0)
  assert chi_square_pvalue(samples[0], dist) < P_MIN


def test_baseline_sampling_matches_the_target(dist_models):
  model, params, _ = dist_models
  out, _ = generate.decoder_only_generate(
      model, params, DIST_PROMPTS, LENGTH, eos_id=1, temperature=1.0, num_decodes=N,
      decode_rng=jax.random.PRNGKey(0), inputs_bidirectional_attention=True)
  for b in range(len(DIST_PROMPTS)):
    dist = exact_distribution(model, params, DIST_PROMPTS[b], True, 1.0, 0, 0.0)
    assert chi_square_pvalue(np.asarray(out[b]), dist) >= P_MIN


def test_policies_keep_the_distribution(dist_models):
  model, params, draft_params = dist_models
  out, _, _ = generate.decoder_only_speculative_generate(
      model, params, model, draft_params, DIST_PROMPTS, LENGTH, 3, eos_id=1, temperature=1.0,
      num_decodes=N, decode_rng=jax.random.PRNGKey(0), inputs_bidirectional_attention=True,
      draft_policy=policies.DraftPolicy('heuristic', gamma_init=1))
  dist = exact_distribution(model, params, DIST_PROMPTS[0], True, 1.0, 0, 0.0)
  assert chi_square_pvalue(np.asarray(out[0]), dist) >= P_MIN


# ------------------------------------------------------------------------------ decode job

@pytest.fixture(scope='module')
def decoder_only_pair(tmp_path_factory):
  """A decoder-only pair folder (pair.json with family and prefix LM, T5X checkpoints)."""
  import json
  import shutil
  from specdec_jax import checkpoints
  from specdec_jax.util import paths
  vocab = paths.ASSETS_DIR / 'demo_ende' / 'vocab'
  root = tmp_path_factory.mktemp('decoder_only_pair')
  target = tiny_config(vocab_size=8192)
  draft = target.replace(num_layers=1, emb_dim=8, head_dim=4)
  checkpoints.save_t5x_checkpoint(do.init_params(target, jax.random.PRNGKey(0)),
                                  root / 'target', step=1)
  checkpoints.save_t5x_checkpoint(do.init_params(draft, jax.random.PRNGKey(1)),
                                  root / 'draft', step=1)
  shutil.copytree(vocab, root / 'vocab')
  (root / 'pair.json').write_text(json.dumps({
      'target_config': to_dict(target), 'draft_config': to_dict(draft), 'input_prefix': '',
      'inputs_bidirectional_attention': True}))
  inputs = root / 'inputs.txt'
  inputs.write_text('A dog runs in the park.\nTwo men are talking.\nA girl reads.\n')
  return root, inputs


def test_decode_job_on_a_decoder_only_pair(decoder_only_pair, tmp_path, capsys):
  """Baseline and speculative (model, lookup) predictions are identical at T = 0, and
  equal `decoder_only_generate` on the same prompts (prefix LM from pair.json); with
  `decode.mesh_shape` the speculative rows are unchanged."""
  import json
  from specdec_jax import decode as decode_lib
  from specdec_jax import checkpoints
  from specdec_jax.text import vocabulary
  root, inputs = decoder_only_pair

  def run(out, *bindings):
    return decode_lib.main([
        f"--gin.decode.pair_dir='{root}'", f"--gin.decode.input_path='{inputs}'",
        f"--gin.decode.output_path='{out}'", '--gin.decode.max_input_len=16',
        '--gin.decode.max_decode_len=10', '--gin.decode.batch_size=2',
        '--gin.decode.print_predictions=0', *[f'--gin.{b}' for b in bindings]])

  rows = {}
  for name, bindings in (('base', ["decode.method='baseline'"]), ('model', ['decode.gamma=3']),
                         ('lookup', ["decode.drafter='lookup'", 'decode.gamma=3']),
                         ('mesh', ['decode.gamma=3', 'decode.mesh_shape=(1, 1)'])):
    out = tmp_path / f'{name}.jsonl'
    rc = run(out, *bindings)
    assert rc == 0, capsys.readouterr().err
    rows[name] = [json.loads(x) for x in out.read_text().splitlines()]
  preds = {k: [r['prediction'] for r in v] for k, v in rows.items()}
  assert preds['model'] == preds['base'] == preds['lookup']
  # On a mesh (here the one-device (1, 1) mesh; tests/sharded runs 8 devices): the same
  # rows, the sharded path taken (params placed, batch padded and gathered).
  assert rows['mesh'] == rows['model']
  summary = json.loads((tmp_path / 'mesh.jsonl.summary.json').read_text())
  assert summary['sharding']['mesh_shape'] == {'data': 1, 'model': 1}
  # The job's baseline is decoder_only_generate on the tokenized inputs (prefix LM).
  vocab = vocabulary.load_vocabulary(str(root / 'vocab'))
  cfg = from_dict(json.loads((root / 'pair.json').read_text())['target_config'])
  params = jax.device_put(checkpoints.load_t5x_checkpoint(root / 'target', cfg))
  lines = inputs.read_text().splitlines()
  prompts = data_lib.pad_batch([vocab.encode(x) + [1] for x in lines], 16)
  ref, _ = generate.decoder_only_generate(do.DecoderOnlyTransformer(cfg), params, prompts, 10,
                                          eos_id=1, inputs_bidirectional_attention=True)
  want = [vocab.decode([int(t) for t in row if t > 1]) for row in
          [r[:list(r).index(1)] if 1 in list(r) else r for r in np.asarray(ref[:, 0])]]
  assert preds['base'] == want


def test_readme_decoder_only_example_runs():
  """The README's decoder-only Python block, run as written (random weights)."""
  import pathlib
  import re
  readme = (pathlib.Path(__file__).resolve().parent.parent / 'README.md').read_text()
  section = readme[readme.index("### Decoder-only models"):]
  block = re.search(r'```python\n(.*?)```', section, re.S).group(1)
  exec(compile(block, 'README.md', 'exec'), {})  # pylint: disable=exec-used


def test_benchmark_quick_on_a_decoder_only_pair(decoder_only_pair, tmp_path):
  """The benchmark runs a decoder-only pair (prefill as its 'encoder' cost), identical
  greedy outputs for the model and the lookup drafter."""
  from specdec_jax import decode as decode_lib
  # A decode job run earlier in this process leaves gin's config locked; importing the
  # benchmark registers its configurable all the same (`util.gin_config`).
  from specdec_jax.benchmark import job as bench
  root, inputs = decoder_only_pair
  out = tmp_path / 'bench'
  decode_lib.parse_gin(['configs/runs/benchmark.gin'], [
      'benchmark.quick = True', f"benchmark.pair_dir = '{root}'",
      f"benchmark.output_dir = '{out}'", f"benchmark.datasets = (('tiny', '{inputs}'),)",
      "benchmark.prefix = ''", 'benchmark.max_input_len = 16', 'benchmark.max_decode_len = 12',
      "benchmark.drafters = ('model', 'lookup')"])
  res = bench.benchmark()
  assert res['identical_at_t0'] is True
  assert res['settings_results'] and all(r['identical'] for r in res['drafter_results'])
  costs = next(iter(res['step_costs'].values()))
  assert costs['encoder'] and costs['c'] > 0
  assert res['pair']['target_config']['family'] == 'decoder_only'
