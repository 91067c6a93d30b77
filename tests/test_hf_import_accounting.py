"""Hugging Face import/export account for every tensor and every param.

Tiny random `T5ForConditionalGeneration`s (vocab 64, d_model 16, 2+2 layers) built
here, saved as safetensors or as a PyTorch `.bin`; the imported arrays are checked
bit for bit against the file's tensors and the accounting against the keys.
"""

import json
import os

import jax
import numpy as np
import pytest
import safetensors.numpy

torch = pytest.importorskip('torch')
transformers = pytest.importorskip('transformers')

from specdec_jax.interop.hf import t5 as hf_t5  # noqa: E402
from specdec_jax.models import t5  # noqa: E402
from specdec_jax.models.config import T5Config  # noqa: E402

VOCAB, D = 64, 16
EMB = 'token_embedder/embedding'
HEAD = 'decoder/logits_dense/kernel'


def hf_model(kind):
  """T5 1.0 (relu, tied, scaled) or T5 1.1 (gated-gelu, untied by hand: NOTES.md)."""
  torch.manual_seed(0 if kind == '1.0' else 1)
  cfg = transformers.T5Config(vocab_size=VOCAB, d_model=D, d_kv=4, d_ff=24, num_layers=2,
                              num_decoder_layers=2, num_heads=2, dropout_rate=0.0,
                              feed_forward_proj='relu' if kind == '1.0' else 'gated-gelu',
                              tie_word_embeddings=(kind == '1.0'))
  model = transformers.T5ForConditionalGeneration(cfg)
  if kind == '1.1':
    model.lm_head.weight = torch.nn.Parameter(torch.randn(VOCAB, D))
    model.config.scale_decoder_outputs = False
  return model


@pytest.fixture(scope='module')
def models():
  return {kind: hf_model(kind) for kind in ('1.0', '1.1')}


def state_of(model) -> dict:
  return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def write_folder(folder, state, fmt, config_json):
  """An HF folder: `config.json` plus the tensors as safetensors or `.bin`."""
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, 'config.json'), 'w') as f:
    json.dump(config_json, f)
  if fmt == 'safetensors':
    safetensors.numpy.save_file(state, os.path.join(folder, 'model.safetensors'))
  else:
    torch.save({k: torch.from_numpy(v.copy()) for k, v in state.items()},
               os.path.join(folder, 'pytorch_model.bin'))
  return folder


def config_json(model):
  d = model.config.to_dict()
  d['scale_decoder_outputs'] = model.config.scale_decoder_outputs
  return d


def expected_params(state, tied):
  """The T5X tree the file's tensors must give, built independently of the importer."""
  out = {EMB: state.get('shared.weight', state.get('encoder.embed_tokens.weight'))}
  for key, value in state.items():
    parts = key.split('.')
    if parts[0] not in ('encoder', 'decoder') or parts[1] != 'block':
      continue
    stack, i, layer, sub, leaf = parts[0], int(parts[2]), parts[4], parts[5], parts[-2]
    if leaf == 'relative_attention_bias':
      out[f'{stack}/relpos_bias/rel_embedding'] = value.T
    elif sub == 'layer_norm':
      norm = {('encoder', '0'): 'pre_attention_layer_norm', ('encoder', '1'): 'pre_mlp_layer_norm',
              ('decoder', '0'): 'pre_self_attention_layer_norm',
              ('decoder', '1'): 'pre_cross_attention_layer_norm',
              ('decoder', '2'): 'pre_mlp_layer_norm'}[stack, layer]
      out[f'{stack}/layers_{i}/{norm}/scale'] = value
    elif sub == 'DenseReluDense':
      out[f'{stack}/layers_{i}/mlp/{leaf}/kernel'] = value.T
    else:
      attn = {'SelfAttention': 'attention' if stack == 'encoder' else 'self_attention',
              'EncDecAttention': 'encoder_decoder_attention'}[sub]
      proj = {'q': 'query', 'k': 'key', 'v': 'value', 'o': 'out'}[leaf]
      out[f'{stack}/layers_{i}/{attn}/{proj}/kernel'] = value.T
  for stack in ('encoder', 'decoder'):
    out[f'{stack}/{stack}_norm/scale'] = state[f'{stack}.final_layer_norm.weight']
  if not tied:
    out[HEAD] = state['lm_head.weight'].T
  return out


def flat(params):
  return {'/'.join(str(k.key) for k in p): np.asarray(v)
          for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}


def assert_tree_is(params, expected):
  got = flat(params)
  assert sorted(got) == sorted(expected)
  for k in got:
    assert got[k].dtype == np.float32 and got[k].shape == expected[k].shape, k
    np.testing.assert_array_equal(got[k], expected[k], err_msg=k)


# --- T5 1.0 tied and T5 1.1 untied files, safetensors and .bin -------------------

@pytest.mark.parametrize('fmt', ['safetensors', 'bin'])
@pytest.mark.parametrize('kind', ['1.0', '1.1'])
def test_tied_and_untied_files(models, tmp_path, kind, fmt):
  model = models[kind]
  full = state_of(model)  # shared, encoder/decoder.embed_tokens, lm_head (tied: all equal).
  if fmt == 'safetensors':
    model.save_pretrained(tmp_path / 'hf')  # transformers' own file: tied copies dropped.
    folder = tmp_path / 'hf'
  else:
    folder = write_folder(tmp_path / 'hf', full, 'bin', config_json(model))
  keys = (set(safetensors.numpy.load_file(folder / 'model.safetensors'))
          if fmt == 'safetensors' else set(full))
  params, config = hf_t5.load_hf_t5(folder, dropout_rate=0.0)
  _, acc = hf_t5.import_hf_t5(folder, with_accounting=True)
  tied = kind == '1.0'
  assert config.logits_via_embedding == tied
  assert config.mlp_activations == (('relu',) if tied else ('gelu', 'linear'))
  assert_tree_is(params, expected_params(full, tied))
  # Every tensor of the file is placed or an identical duplicate; every param filled.
  assert set(acc.placed) | set(acc.duplicates) == keys
  assert not acc.ignored and not acc.filled
  assert sorted(acc.placed.values()) == sorted(flat(params))
  assert acc.placed['shared.weight'] == EMB
  copies = {k for k in ('encoder.embed_tokens.weight', 'decoder.embed_tokens.weight')
            if k in keys} | ({'lm_head.weight'} & keys if tied else set())
  assert acc.duplicates == {k: 'shared.weight' for k in copies}
  if fmt == 'bin':
    assert len(copies) == (3 if tied else 2)
  if not tied:
    assert acc.placed['lm_head.weight'] == HEAD


# --- split embeddings (no shared.weight) -------------------------------------------

@pytest.mark.parametrize('fmt', ['safetensors', 'bin'])
def test_split_embeddings_equal_tables_load(models, tmp_path, fmt):
  model = models['1.1']
  state = state_of(model)
  del state['shared.weight']
  folder = write_folder(tmp_path / 'hf', state, fmt, config_json(model))
  params, acc = hf_t5.import_hf_t5(folder, with_accounting=True)
  assert_tree_is(params, expected_params(state, tied=False))
  np.testing.assert_array_equal(params['token_embedder']['embedding'],
                                model.shared.weight.detach().numpy())
  assert acc.placed['encoder.embed_tokens.weight'] == EMB
  assert acc.duplicates == {'decoder.embed_tokens.weight': 'encoder.embed_tokens.weight'}


@pytest.mark.parametrize('fmt', ['safetensors', 'bin'])
def test_split_embeddings_different_tables_refused(models, tmp_path, fmt):
  """The issue's reproduction: the decoder's table replaced by another random one."""
  model = models['1.1']
  state = state_of(model)
  del state['shared.weight']
  state['decoder.embed_tokens.weight'] = np.random.default_rng(0).standard_normal(
      (VOCAB, D)).astype(np.float32)
  folder = write_folder(tmp_path / 'hf', state, fmt, config_json(model))
  with pytest.raises(ValueError) as e:
    hf_t5.load_hf_t5(folder)
  msg = str(e.value)
  assert ('encoder.embed_tokens.weight and decoder.embed_tokens.weight differ (same shape '
          f'({VOCAB}, {D}), {VOCAB} of {VOCAB} rows differ (first: row 0)') in msg
  assert 'one token embedding (token_embedder/embedding)' in msg
  assert '(1 problem)' in msg  # Nothing else is wrong with the file.
  # Tables of different sizes: both shapes named.
  state['decoder.embed_tokens.weight'] = state['encoder.embed_tokens.weight'][:60]
  with pytest.raises(ValueError, match=r'encoder\.embed_tokens\.weight and decoder\.embed_tokens'
                                       r'\.weight differ \(shapes \(64, 16\) and \(60, 16\)\)'):
    hf_t5.import_hf_t5(state, model.config)


def test_tied_config_refuses_a_different_lm_head(models):
  state = state_of(models['1.0'])
  state['lm_head.weight'] = state['lm_head.weight'] + 1.0
  with pytest.raises(ValueError, match=r'shared\.weight and lm_head\.weight differ .*'
                                       r'max \|difference\| 1(?s:.*)logits_via_embedding=True'):
    hf_t5.import_hf_t5(state, models['1.0'].config)


# --- unknown and missing tensors ------------------------------------------------------

def test_extra_unknown_tensors_are_named(models):
  state = state_of(models['1.1'])
  state['encoder.block.0.layer.0.SelfAttention.extra.weight'] = np.zeros((3, 5), np.float32)
  state['decoder.block.2.layer.0.SelfAttention.q.weight'] = np.zeros((8, D), np.float32)
  with pytest.raises(ValueError) as e:
    hf_t5.import_hf_t5(state, models['1.1'].config)
  msg = str(e.value)
  assert 'unknown (no place in the T5X tree) (2):' in msg
  assert 'encoder.block.0.layer.0.SelfAttention.extra.weight (shape (3, 5))' in msg
  assert 'decoder.block.2.layer.0.SelfAttention.q.weight (shape (8, 16))' in msg
  assert 'the file has 2 encoder and 3 decoder blocks, the config 2 and 2' in msg
  assert '(2 problems)' in msg


def test_the_tensor_transformers_ignores_is_reported(models):
  state = state_of(models['1.1'])
  key = 'decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight'
  state[key] = np.ones((32, 2), np.float32)
  with pytest.warns(UserWarning, match=f'Not imported: {key}'):
    params, acc = hf_t5.import_hf_t5(state, models['1.1'].config, with_accounting=True)
  assert list(acc.ignored) == [key]
  assert_tree_is(params, expected_params(state_of(models['1.1']), tied=False))


def test_missing_tensors_are_named(models):
  state = state_of(models['1.1'])
  del state['decoder.block.1.layer.2.DenseReluDense.wi_1.weight']
  del state['encoder.final_layer_norm.weight']
  with pytest.raises(ValueError) as e:
    hf_t5.import_hf_t5(state, models['1.1'].config)
  msg = str(e.value)
  assert 'missing (2):' in msg
  assert ('decoder/layers_1/mlp/wi_1/kernel (from '
          'decoder.block.1.layer.2.DenseReluDense.wi_1.weight)') in msg
  assert 'encoder/encoder_norm/scale (from encoder.final_layer_norm.weight)' in msg


def test_missing_lm_head_filled_only_when_the_config_ties_it(models, tmp_path):
  model = models['1.1']
  state = state_of(model)
  del state['lm_head.weight']
  # transformers < 5's T5 1.1 config (tie_word_embeddings: false): the head is missing.
  ours = hf_t5.t5_config_from_hf(model.config)
  folder = write_folder(tmp_path / 'v4', state, 'safetensors', hf_t5.hf_config_dict(ours))
  with pytest.raises(ValueError, match=r'missing \(1\):\n    decoder/logits_dense/kernel \(from '
                                       r'lm_head\.weight\)'):
    hf_t5.import_hf_t5(folder)
  with pytest.raises(ValueError, match='logits_dense/kernel'):
    hf_t5.import_hf_t5(state, ours)  # Our config alone does not say the head is tied.
  # transformers 5.x's config (tie_word_embeddings: true): the head is the embedding.
  folder = write_folder(tmp_path / 'v5', state, 'safetensors', config_json(model))
  with pytest.warns(UserWarning, match='decoder/logits_dense/kernel filled from shared.weight'):
    params, acc = hf_t5.import_hf_t5(folder, with_accounting=True)
  assert list(acc.filled) == [HEAD]
  np.testing.assert_array_equal(params['decoder']['logits_dense']['kernel'],
                                state['shared.weight'].T)


def test_shards_disagreeing_on_a_key_are_refused(models, tmp_path):
  state = state_of(models['1.1'])
  keys = sorted(state)
  a = {k: state[k] for k in keys[:10]}
  b = {k: state[k] for k in keys[9:]}
  b[keys[9]] = b[keys[9]] + 1.0
  os.makedirs(tmp_path / 'hf')
  safetensors.numpy.save_file(a, str(tmp_path / 'hf' / 'a.safetensors'))
  safetensors.numpy.save_file(b, str(tmp_path / 'hf' / 'b.safetensors'))
  weight_map = {**{k: 'a.safetensors' for k in a}, **{k: 'b.safetensors' for k in b}}
  (tmp_path / 'hf' / 'model.safetensors.index.json').write_text(
      json.dumps({'weight_map': weight_map}))
  (tmp_path / 'hf' / 'config.json').write_text(json.dumps(config_json(models['1.1'])))
  with pytest.raises(ValueError, match=f'{keys[9]} is stored twice with different values, in '
                                       'a.safetensors and b.safetensors'):
    hf_t5.import_hf_t5(tmp_path / 'hf')
  b[keys[9]] = state[keys[9]]  # Identical copies in two shards are fine.
  safetensors.numpy.save_file(b, str(tmp_path / 'hf' / 'b.safetensors'))
  assert_tree_is(hf_t5.import_hf_t5(tmp_path / 'hf'), expected_params(state, tied=False))


# --- export: every param written, nothing invented --------------------------------

CONFIGS = {
    '1.0': T5Config(vocab_size=VOCAB, emb_dim=D, num_heads=2, head_dim=4, mlp_dim=24,
                    num_encoder_layers=2, num_decoder_layers=2, mlp_activations=('relu',),
                    logits_via_embedding=True, dropout_rate=0.0),
    '1.1': T5Config(vocab_size=VOCAB, emb_dim=D, num_heads=2, head_dim=4, mlp_dim=24,
                    num_encoder_layers=2, num_decoder_layers=2,
                    mlp_activations=('gelu', 'linear'), logits_via_embedding=False,
                    dropout_rate=0.0),
}


@pytest.mark.parametrize('kind', ['1.0', '1.1'])
def test_export_writes_every_param_once_and_nothing_else(tmp_path, kind):
  config = CONFIGS[kind]
  leaves, treedef = jax.tree.flatten(t5.init_params(config, jax.random.PRNGKey(3), 2, 2))
  rng = np.random.default_rng(0)  # Distinct values everywhere (norm scales start as ones).
  params = jax.tree.unflatten(treedef, [rng.standard_normal(x.shape).astype(np.float32)
                                        for x in leaves])
  folder = hf_t5.export_hf_t5(params, config, tmp_path / 'hf')
  written = safetensors.numpy.load_file(os.path.join(folder, 'model.safetensors'))
  ours = flat(params)
  assert len(written) == len(ours)  # One tensor per param.
  # Each written tensor is exactly one param (transposed for Linear weights).
  remaining = dict(ours)
  for key, value in written.items():
    match = [p for p, x in remaining.items()
             if x.shape in (value.shape, value.shape[::-1])
             and (np.array_equal(x, value) or np.array_equal(x.T, value))]
    assert len(match) == 1, key
    del remaining[match[0]]
  assert not remaining
  assert ('lm_head.weight' in written) == (kind == '1.1')
  assert not {'encoder.embed_tokens.weight', 'decoder.embed_tokens.weight'} & set(written)
  # And the exported folder imports back to the same params, every key placed.
  again, acc = hf_t5.import_hf_t5(folder, with_accounting=True)
  assert_tree_is(again, ours)
  assert set(acc.placed) == set(written) and not acc.duplicates


def test_export_names_missing_and_unexpected_params(tmp_path):
  config = CONFIGS['1.1']
  params = jax.tree.map(np.asarray, t5.init_params(config, jax.random.PRNGKey(3), 2, 2))
  bad = jax.tree.map(lambda x: x, params)
  del bad['decoder']['logits_dense']
  bad['decoder']['extra'] = {'kernel': np.zeros((2, 3), np.float32)}
  bad['encoder']['layers_0']['mlp']['wo']['kernel'] = np.zeros((5, 16), np.float32)
  with pytest.raises(ValueError) as e:
    hf_t5.export_hf_t5(bad, config, tmp_path / 'hf')
  msg = str(e.value)
  assert 'decoder/logits_dense/kernel (for lm_head.weight)' in msg
  assert 'unexpected (no Hugging Face key) (1):\n    decoder/extra/kernel (shape (2, 3))' in msg
  assert ('encoder/layers_0/mlp/wo/kernel has shape (5, 16) but the T5Config expects '
          '(24, 16)') in msg
  assert '(3 problems)' in msg
  assert not (tmp_path / 'hf').exists()  # Nothing written.
