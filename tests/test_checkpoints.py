"""T5X checkpoint reading/writing (legacy msgpack + TensorStore, Orbax) and HF import."""

import gzip
import json
import os
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorstore as ts

from specdec_jax import checkpoints
from specdec_jax.interop.hf import t5 as hf_t5
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config
from specdec_jax.util.paths import data_dir

# T5X testdata `test_t5_tiny.checkpoint_0` (a T5 1.1 model).
TINY = T5Config(vocab_size=32128, emb_dim=8, num_heads=4, head_dim=3, mlp_dim=16,
                num_encoder_layers=2, num_decoder_layers=2, mlp_activations=('gelu', 'linear'),
                logits_via_embedding=False, dropout_rate=0.0)
SMALL = T5Config(vocab_size=40, emb_dim=16, num_heads=2, head_dim=4, mlp_dim=24,
                 num_encoder_layers=2, num_decoder_layers=1, mlp_activations=('gelu', 'linear'),
                 logits_via_embedding=False, dropout_rate=0.0)


@pytest.fixture(scope='module')
def t5x_dir():
  try:
    path = data_dir() / 't5x_checkpoints'
  except FileNotFoundError as e:
    pytest.skip(str(e))
  if not path.is_dir():
    pytest.skip(f'{path} is missing')
  return path


@pytest.fixture(scope='module')
def small_params():
  return t5.init_params(SMALL, jax.random.PRNGKey(0), 4, 4)


def assert_identical(a, b):
  """Same tree, dtypes and bits."""
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    assert np.array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8))


def logits(config, params, enc, dec):
  return np.asarray(t5.Transformer(config).apply({'params': params}, enc, dec,
                                                 enable_dropout=False))


# --- T5X's own fixtures -------------------------------------------------------

def test_t5x_tiny_checkpoint_runs_and_matches_hf(t5x_dir, tmp_path):
  path = t5x_dir / 'test_t5_tiny.checkpoint_0'
  params = checkpoints.load_t5x_checkpoint(path, TINY)
  t5.check_params(params, TINY)
  assert params['decoder']['logits_dense']['kernel'].shape == (8, 32128)
  assert all(x.dtype == np.float32 for x in jax.tree.leaves(params))
  enc = np.array([[5, 9, 200, 31000, 1], [77, 3, 1, 0, 0]], np.int32)
  dec = np.array([[0, 12, 7, 900], [0, 4, 4, 0]], np.int32)
  ours = logits(TINY, params, enc, dec)
  assert ours.shape == (2, 4, 32128) and np.isfinite(ours).all()

  # A checkpoint written by T5X gives HF's logits once exported.
  torch = pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  folder = hf_t5.export_hf_t5(params, TINY, tmp_path / 'hf')
  model = transformers.T5ForConditionalGeneration.from_pretrained(folder).eval()
  with torch.no_grad():
    theirs = model(input_ids=torch.from_numpy(enc).long(),
                   attention_mask=torch.from_numpy(enc != 0).long(),
                   decoder_input_ids=torch.from_numpy(dec).long()).logits.numpy()
  assert np.abs(ours - theirs).max() <= 1e-4

  # Cast and placement.
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  cast = checkpoints.load_t5x_checkpoint(path, TINY, dtype=jnp.bfloat16, shardings=device)
  assert all(isinstance(x, jax.Array) and x.dtype == jnp.bfloat16
             for x in jax.tree.leaves(cast))


def _tiny_t5_expected(folder):
  """tiny_t5/checkpoint_1's arrays read without our code: gzip chunks + TensorStore."""
  spec = {'driver': 'zarr', 'dtype': 'float64',
          'kvstore': {'driver': 'file', 'path': str(folder / 'state.param_states.kernel')},
          'metadata': {'shape': [10, 5], 'chunks': [10, 5], 'compressor': {'id': 'gzip'}}}
  kernel = ts.open(spec, open=True, assume_metadata=True).result().read().result()
  raw = np.frombuffer(gzip.decompress((folder / 'state.param_states.kernel/0.0').read_bytes()),
                      '<f8').reshape(10, 5)
  np.testing.assert_array_equal(kernel, raw)
  bias = np.frombuffer(gzip.decompress((folder / 'state.param_states.bias/0').read_bytes()),
                       '<f4')
  return {'kernel': kernel, 'bias': bias, 'step': np.int32(1)}


def test_tensorstore_fixture(t5x_dir):
  folder = t5x_dir / 'tiny_t5' / 'checkpoint_1'
  expected = _tiny_t5_expected(folder)
  for where in (t5x_dir / 'tiny_t5', folder, folder / 'checkpoint', f'file://{folder}'):
    state = checkpoints.read_t5x_arrays(where, 'state')
    assert state['step'] == 1
    got = state['param_states']
    assert got['kernel'].shape == (10, 5) and got['kernel'].dtype == np.float64
    assert got['bias'].shape == (5,) and got['bias'].dtype == np.float32
    assert got['step'].shape == () and got['step'].dtype == np.int32
    for name in expected:
      np.testing.assert_array_equal(got[name], expected[name])
  # It holds no params: the target is empty.
  assert checkpoints.load_t5x_checkpoint(t5x_dir / 'tiny_t5') == {}


def test_early_orbax_fixture(t5x_dir):
  folder = t5x_dir / 'tiny_orbax' / '1'
  with pytest.raises(ValueError, match=r'\.zarray is missing'):
    checkpoints.read_t5x_arrays(folder, 'state')
  # Its zarr folders lack .zarray: give shapes/dtypes (those of the same arrays in tiny_t5).
  hint = {'_optimizer.state.param_states.kernel': {'shape': (10, 5), 'dtype': 'float64'},
          '_optimizer.state.param_states.bias': {'shape': (5,), 'dtype': 'float32'},
          '_optimizer.state.param_states.step': {'shape': (), 'dtype': 'int32'},
          '_optimizer.state.step': jax.ShapeDtypeStruct((), np.int32)}
  state = checkpoints.read_t5x_arrays(folder, 'state', array_metadata=hint)
  assert_identical(state, checkpoints.read_t5x_arrays(folder.parent, 'state',
                                                      array_metadata=hint))
  expected = _tiny_t5_expected(t5x_dir / 'tiny_t5' / 'checkpoint_1')
  for name in expected:
    np.testing.assert_array_equal(state['param_states'][name], expected[name])
    assert state['param_states'][name].dtype == np.asarray(expected[name]).dtype
  assert state['step'] == 1


# --- round trips ----------------------------------------------------------------

@pytest.mark.parametrize('use_tensorstore', [True, False])
def test_legacy_round_trip(small_params, tmp_path, use_tensorstore):
  out = checkpoints.save_t5x_checkpoint(small_params, tmp_path, step=7,
                                        use_tensorstore=use_tensorstore)
  assert out == str(tmp_path / 'checkpoint_7')
  assert sorted(os.listdir(tmp_path)) == ['checkpoint_7']  # No temporary left behind.
  assert_identical(checkpoints.load_t5x_checkpoint(tmp_path, SMALL), small_params)
  state = checkpoints.read_t5x_arrays(tmp_path, 'state')
  assert state == {'step': 7}  # No optimizer state: no (empty) param_states node.
  assert state['step'].dtype == np.int32
  with pytest.raises(FileExistsError):
    checkpoints.save_t5x_checkpoint(small_params, tmp_path, step=7)
  # bfloat16 storage reads back bit-identical too.
  bf16 = jax.tree.map(lambda x: np.asarray(x).astype(jnp.bfloat16), small_params)
  checkpoints.save_t5x_checkpoint(small_params, tmp_path, step=8, dtype=jnp.bfloat16,
                                  use_tensorstore=use_tensorstore)
  assert_identical(checkpoints.load_t5x_checkpoint(tmp_path, SMALL), bf16)  # Latest step.
  assert_identical(checkpoints.load_t5x_checkpoint(tmp_path, restore_step=7), small_params)


def test_legacy_layout_is_t5x_like(small_params, tmp_path):
  from flax import serialization
  folder = pathlib.Path(checkpoints.save_t5x_checkpoint(small_params, tmp_path, step=3))
  contents = serialization.msgpack_restore((folder / 'checkpoint').read_bytes())
  assert contents['version'] == 3
  assert set(contents['optimizer']) == {'target', 'state'}
  spec = contents['optimizer']['target']['encoder']['layers_0']['attention']['query']['kernel']
  assert spec['driver'] == 'zarr' and spec['dtype'] == 'float32'
  assert spec['kvstore'] == {'driver': 'file',
                             'path': 'target.encoder.layers_0.attention.query.kernel'}
  assert list(spec['metadata']['shape']) == [16, 8]
  zarray = json.loads((folder / spec['kvstore']['path'] / '.zarray').read_text())
  assert zarray['shape'] == [16, 8] and zarray['compressor']['id'] == 'gzip'


@pytest.mark.parametrize('use_ocdbt', [True, False])
def test_orbax_round_trip(small_params, tmp_path, use_ocdbt):
  out = checkpoints.save_orbax_checkpoint(small_params, tmp_path, step=2, use_ocdbt=use_ocdbt)
  assert os.path.isdir(os.path.join(out, 'state'))
  for where in (tmp_path, out, os.path.join(out, 'state')):
    assert_identical(checkpoints.load_t5x_checkpoint(where, SMALL), small_params)
  assert checkpoints.read_t5x_arrays(tmp_path, 'state')['step'] == 2
  # A later legacy checkpoint in the same directory is picked as the latest.
  other = jax.tree.map(lambda x: x + 1, small_params)
  checkpoints.save_t5x_checkpoint(other, tmp_path, step=5)
  assert_identical(checkpoints.load_t5x_checkpoint(tmp_path, SMALL),
                   jax.tree.map(np.asarray, other))
  assert_identical(checkpoints.load_t5x_checkpoint(tmp_path, SMALL, restore_step=2),
                   small_params)
  cast = checkpoints.load_t5x_checkpoint(tmp_path, SMALL, dtype=jnp.bfloat16, restore_step=2,
                                         shardings=jax.sharding.SingleDeviceSharding(
                                             jax.devices()[0]))
  assert all(isinstance(x, jax.Array) and x.dtype == jnp.bfloat16
             for x in jax.tree.leaves(cast))


# --- the target is read without touching optimizer state -----------------------

def _optimizer_state(params):
  return jax.tree.map(lambda x: {'v': np.full(x.shape, 3.0, np.float32)}, params)


def test_legacy_target_ignores_broken_optimizer_state(small_params, tmp_path):
  folder = pathlib.Path(checkpoints.save_t5x_checkpoint(
      small_params, tmp_path, param_states=_optimizer_state(small_params)))
  broken = [p for p in folder.iterdir() if p.name.startswith('state.param_states.')]
  assert len(broken) == len(jax.tree.leaves(small_params))
  for p in broken:  # No metadata, garbage chunks.
    (p / '.zarray').unlink()
    for chunk in p.iterdir():
      chunk.write_bytes(b'not a zarr chunk')
  assert_identical(checkpoints.load_t5x_checkpoint(tmp_path, SMALL), small_params)
  with pytest.raises(Exception):
    checkpoints.read_t5x_arrays(tmp_path, 'state/param_states')


def test_orbax_target_ignores_optimizer_state(small_params, tmp_path, monkeypatch):
  # One folder per array: delete the optimizer state's folders outright.
  out = checkpoints.save_orbax_checkpoint(small_params, tmp_path / 'zarr', use_ocdbt=False,
                                          optimizer_state=_optimizer_state(small_params))
  state_dir = pathlib.Path(out) / 'state'
  removed = [p for p in state_dir.iterdir() if p.name.startswith('state.param_states.')]
  assert removed
  for p in removed:
    shutil.rmtree(p)
  assert_identical(checkpoints.load_t5x_checkpoint(tmp_path / 'zarr', SMALL), small_params)

  # OCDBT packs arrays together: record which arrays TensorStore is asked to open.
  checkpoints.save_orbax_checkpoint(small_params, tmp_path / 'ocdbt',
                                    optimizer_state=_optimizer_state(small_params))
  opened = []
  real_open = ts.open

  def spy(spec, *args, **kwargs):
    opened.append(json.dumps(spec.to_json() if hasattr(spec, 'to_json') else spec,
                             default=str))
    return real_open(spec, *args, **kwargs)

  monkeypatch.setattr(ts, 'open', spy)
  assert_identical(checkpoints.load_t5x_checkpoint(tmp_path / 'ocdbt', SMALL), small_params)
  assert any('target.' in s for s in opened)
  assert not any('param_states' in s for s in opened)


# --- errors --------------------------------------------------------------------

def test_errors(t5x_dir, small_params, tmp_path):
  missing = tmp_path / 'nowhere'
  with pytest.raises(FileNotFoundError, match='nowhere.*checkpoint_<step>'):
    checkpoints.load_t5x_checkpoint(missing)
  with pytest.raises(FileNotFoundError, match='No T5X checkpoint'):
    checkpoints.load_t5x_checkpoint(tmp_path)
  checkpoints.save_t5x_checkpoint(small_params, tmp_path, step=1)
  with pytest.raises(FileNotFoundError, match=r'checkpoint_4.*\[1\]'):
    checkpoints.load_t5x_checkpoint(tmp_path, restore_step=4)

  wrong = TINY.replace(mlp_dim=32)
  with pytest.raises(ValueError) as e:
    checkpoints.load_t5x_checkpoint(t5x_dir / 'test_t5_tiny.checkpoint_0', wrong)
  assert ('decoder/layers_0/mlp/wi_0/kernel has shape (8, 16) but the T5Config expects '
          '(8, 32)') in str(e.value)
  # Every mismatching array is named, not just the first: wi_0, wi_1, wo in 2+2 layers.
  assert '(12)' in str(e.value) and 'encoder/layers_1/mlp/wo/kernel has shape (16, 8)' in str(
      e.value)
  for saver in (checkpoints.save_t5x_checkpoint, checkpoints.save_orbax_checkpoint):
    folder = tmp_path / saver.__name__
    saver(small_params, folder)
    with pytest.raises(ValueError, match=r"decoder/logits_dense/kernel has shape \(16, 40\)"
                                         r" but the T5Config expects \(16, 41\)"):
      checkpoints.load_t5x_checkpoint(folder, SMALL.replace(vocab_size=41))


@pytest.mark.parametrize('saver', ['save_t5x_checkpoint', 'save_orbax_checkpoint'])
def test_config_accounting_names_every_array(small_params, tmp_path, saver):
  save = getattr(checkpoints, saver)
  bad = jax.tree.map(np.asarray, small_params)  # A copy.
  del bad['encoder']['layers_1']
  bad['decoder']['extra'] = {'kernel': np.zeros((2, 3), np.float32)}
  save(bad, tmp_path / 'bad')
  with pytest.raises(ValueError) as e:
    checkpoints.load_t5x_checkpoint(tmp_path / 'bad', SMALL)
  msg = str(e.value)
  assert '(10 problems)' in msg and 'missing (9):' in msg
  for name in ('attention/query/kernel', 'attention/out/kernel', 'mlp/wi_1/kernel',
               'pre_attention_layer_norm/scale', 'pre_mlp_layer_norm/scale'):
    assert f'encoder/layers_1/{name} (expected shape' in msg
  # Legacy: shapes from the specs; Orbax: names before any array is read.
  extra = ('decoder/extra/kernel (shape (2, 3))' if saver == 'save_t5x_checkpoint'
           else 'decoder/extra/kernel\n')
  assert f'unexpected (1):\n    {extra}' in msg
  assert 'the number of layers differs' in msg and 'the MLP differs' not in msg
  # An untied (T5 1.1) checkpoint read with a tied config: the head is named, with the fix.
  save(small_params, tmp_path / 'good')
  with pytest.raises(ValueError, match=r'unexpected \(1\):\n    decoder/logits_dense/kernel'
                                       r'(?s:.*)use logits_via_embedding=False'):
    checkpoints.load_t5x_checkpoint(tmp_path / 'good', SMALL.replace(logits_via_embedding=True))


# --- Hugging Face folder import ---------------------------------------------------

def test_import_hf_folder_t5_1_1(tmp_path):
  torch = pytest.importorskip('torch')
  transformers = pytest.importorskip('transformers')
  torch.manual_seed(0)
  cfg = transformers.T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=24, num_layers=2,
                              num_decoder_layers=1, num_heads=2, dropout_rate=0.0,
                              feed_forward_proj='gated-gelu', tie_word_embeddings=False)
  model = transformers.T5ForConditionalGeneration(cfg)
  model.lm_head.weight = torch.nn.Parameter(torch.randn(64, 16))  # See NOTES.md.
  model.config.scale_decoder_outputs = False
  model.save_pretrained(tmp_path / 'hf')
  model = model.eval()

  params, config = hf_t5.load_hf_t5(tmp_path / 'hf', dropout_rate=0.0)
  assert config == T5Config(vocab_size=64, emb_dim=16, num_heads=2, head_dim=4, mlp_dim=24,
                            num_encoder_layers=2, num_decoder_layers=1,
                            mlp_activations=('gelu', 'linear'), logits_via_embedding=False,
                            dropout_rate=0.0)
  np.testing.assert_array_equal(params['decoder']['logits_dense']['kernel'],
                                model.lm_head.weight.detach().numpy().T)
  enc = np.array([[5, 9, 20, 31, 1], [7, 3, 1, 0, 0]], np.int32)
  dec = np.array([[0, 12, 7, 9], [0, 4, 4, 6]], np.int32)
  with torch.no_grad():
    theirs = model(input_ids=torch.from_numpy(enc).long(),
                   attention_mask=torch.from_numpy(enc != 0).long(),
                   decoder_input_ids=torch.from_numpy(dec).long()).logits.numpy()
  assert np.abs(logits(config, params, enc, dec) - theirs).max() <= 1e-4


@pytest.mark.parametrize('saver', ['save_t5x_checkpoint', 'save_orbax_checkpoint'])
def test_target_and_draft_from_one_t5x_saved_checkpoint(small_params, tmp_path, saver):
  """T5X saves our model classes' params with the draft under `target/draft`: the target
  loads without it (`exclude`), the draft from `subtree='target/draft'`, each checked
  against its own config; a checkpoint without a draft names what it holds."""
  draft_cfg = SMALL.replace(num_encoder_layers=1, num_decoder_layers=1)
  draft = t5.init_params(draft_cfg, jax.random.PRNGKey(1), 4, 4)
  out = getattr(checkpoints, saver)({**small_params, 'draft': draft}, tmp_path / 'both', step=5)
  target = checkpoints.load_t5x_checkpoint(out, SMALL, exclude=('draft',))
  assert_identical(target, jax.tree.map(np.asarray, small_params))
  got = checkpoints.load_t5x_checkpoint(out, draft_cfg, subtree='target/draft')
  assert_identical(got, jax.tree.map(np.asarray, draft))
  with pytest.raises(ValueError, match='unexpected'):  # the draft is not the target's
    checkpoints.load_t5x_checkpoint(out, SMALL)
  alone = getattr(checkpoints, saver)(small_params, tmp_path / 'alone', step=5)
  with pytest.raises(ValueError, match="holds no params .`target/draft`.*no 'target/draft'"):
    checkpoints.load_t5x_checkpoint(alone, draft_cfg, subtree='target/draft')


@pytest.mark.parametrize('saver', ['save_t5x_checkpoint', 'save_orbax_checkpoint'])
def test_non_finite_params_are_refused_at_load(small_params, tmp_path, saver):
  """A NaN or Inf param is found once at load, named, and refused (it decoded to empty
  outputs with exit status 0 before)."""
  params = jax.tree.map(np.array, small_params)
  params['decoder']['layers_0']['mlp']['wo']['kernel'][3, 1] = np.nan
  params['encoder']['encoder_norm']['scale'][0] = np.inf
  out = getattr(checkpoints, saver)(params, tmp_path / 'bad', step=1)
  with pytest.raises(ValueError, match=r'NaN or Inf values in 2 param\(s\): '
                     r'decoder/layers_0/mlp/wo/kernel, encoder/encoder_norm/scale'):
    checkpoints.load_t5x_checkpoint(out, SMALL)
  with pytest.raises(ValueError, match='NaN or Inf'):  # restored into shardings as well
    checkpoints.load_t5x_checkpoint(out, SMALL, shardings=jax.sharding.SingleDeviceSharding(
        jax.devices()[0]))
