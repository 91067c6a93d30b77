"""Checkpoints we write read back under T5X's own loading rules (legacy and Orbax).

`t5x` is not installable here, so the readers below follow, step by step, what
google-research/t5x (snapshot cc342d4) does with the nodes it finds:

* legacy: `t5x.checkpoints.load_t5x_checkpoint` — `find_checkpoint` (a directory
  means its `checkpoint` file), `msgpack_restore`, version ≥ 2 → `['optimizer']`,
  `state_utils.flatten_state_dict(keep_empty_nodes=True)` (a dict is a leaf when
  its keys include `driver`, `kvstore`, `metadata`), `ts.Spec(v)` for dict
  leaves, `fake_param_info` (shape from the spec), `LazyAwaitableArray.from_*`
  (`.dtype`/`.shape` of inline leaves, the spec's `dtype`), and `_read_ts`
  (deletes `metadata.chunks`/`metadata.compressor`, joins `kvstore.path` to the
  checkpoint directory, opens, reads).
* Orbax: `OrbaxCheckpointManagerInterface.restore` — `checkpoint_<step>/state`,
  the structure from `PyTreeCheckpointHandler._get_internal_metadata`,
  `intersect_state` with the train state's `state_dict()`, then an orbax
  `CheckpointManager` restore of item `state`.
"""

import os
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import tensorstore as ts
from flax import serialization
from flax import traverse_util

from specdec_jax import checkpoints
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

SMALL = T5Config(vocab_size=40, emb_dim=16, num_heads=2, head_dim=4, mlp_dim=24,
                 num_encoder_layers=1, num_decoder_layers=1, mlp_activations=('gelu', 'linear'),
                 logits_via_embedding=False, dropout_rate=0.0)


@pytest.fixture(scope='module')
def params():
  return jax.tree.map(np.asarray, t5.init_params(SMALL, jax.random.PRNGKey(0), 4, 4))


def _tensorstore_leaf(value) -> bool:  # t5x.state_utils.tensorstore_leaf
  return set(value.keys()) >= {'driver', 'kvstore', 'metadata'}


def t5x_load_t5x_checkpoint(path):
  """The state dict `t5x.checkpoints.load_t5x_checkpoint(path)` returns."""
  path = os.fspath(path)
  if os.path.isdir(path):
    path = os.path.join(path, 'checkpoint')
  if not os.path.isfile(path):
    raise ValueError(f'Path is not a valid checkpoint: {path}')
  contents = serialization.msgpack_restore(pathlib.Path(path).read_bytes())
  version = contents.get('version', 0)
  if version < 2 and version != 0:
    raise ValueError(f'Checkpoint versions earlier than 2 are not supported: {version}')
  state = contents if version == 0 else contents['optimizer']
  flat = traverse_util.flatten_dict(state, keep_empty_nodes=True,
                                    is_leaf=lambda _, v: _tensorstore_leaf(v), sep='/')
  out = {}
  for name, leaf in flat.items():
    if isinstance(leaf, dict):  # A TensorStore spec.
      spec = ts.Spec(leaf).to_json()
      shape = tuple(spec['metadata']['shape'])
      dtype = jnp.dtype(spec['dtype'])
      del spec['metadata']['chunks']
      del spec['metadata']['compressor']
      spec['kvstore']['path'] = os.path.join(os.path.dirname(path), spec['kvstore']['path'])
      arr = ts.open(spec, open=True).result().read().result()
      assert tuple(arr.shape) == shape, name
      out[name] = arr.astype(dtype) if arr.dtype != dtype else arr
    elif leaf is None:  # States no optimizer touches: fake_param_info gives None.
      out[name] = None
    else:
      if leaf is traverse_util.empty_node:
        leaf = {}  # What T5X's unflatten_dict puts in the state tree for an empty node.
      dtype, _ = leaf.dtype, leaf.shape  # LazyAwaitableArray.from_array
      out[name] = leaf if leaf.dtype == dtype else leaf.astype(dtype)
  return traverse_util.unflatten_dict(out, sep='/')


def t5x_orbax_restore(directory, step, train_state_dict):
  """The state dict `OrbaxCheckpointManagerInterface.restore(step)` gives a train state."""
  import orbax.checkpoint as ocp
  from etils import epath
  from orbax.checkpoint._src.metadata.value_metadata_entry import ValueMetadataEntry
  state_dir = epath.Path(directory) / f'checkpoint_{step}' / 'state'
  assert state_dir.is_dir(), state_dir
  handler = ocp.PyTreeCheckpointHandler(use_ocdbt=True)
  structure, _ = handler._get_internal_metadata(state_dir)  # pylint: disable=protected-access
  flat = traverse_util.flatten_dict(structure, keep_empty_nodes=True, sep='/')
  for name, entry in flat.items():  # Every node T5X restores is an array.
    assert isinstance(entry, ValueMetadataEntry), (name, entry)
    assert not entry.skip_deserialize and entry.value_type in ('np.ndarray', 'jax.Array',
                                                               'scalar'), (name, entry)
  wanted = traverse_util.flatten_dict(train_state_dict, sep='/')
  # intersect_state drops what the checkpoint lacks; restore_state then needs it.
  assert not set(wanted) - set(flat), sorted(set(wanted) - set(flat))
  manager = ocp.CheckpointManager(
      epath.Path(directory), item_handlers={'state': handler},
      options=ocp.CheckpointManagerOptions(step_prefix='checkpoint'))
  try:
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray),
                                train_state_dict)
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.PyTreeRestore(train_state_dict, restore_args=restore_args)))
  finally:
    manager.close()
  return restored['state']


def assert_same(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    x, y = np.asarray(x), np.asarray(y)
    assert x.dtype == y.dtype and x.shape == y.shape
    np.testing.assert_array_equal(x, y)


def _states(params):
  return {'target': jax.tree.map(lambda x: {'v': np.full(x.shape, 2.0, np.float32)}, params),
          'untouched': None}


# --- legacy layout -----------------------------------------------------------------

@pytest.mark.parametrize('use_tensorstore', [True, False])
def test_legacy_reads_under_t5x_rules(params, tmp_path, use_tensorstore):
  folder = checkpoints.save_t5x_checkpoint(params, tmp_path, step=7,
                                           use_tensorstore=use_tensorstore)
  state = t5x_load_t5x_checkpoint(tmp_path / 'checkpoint_7')
  assert set(state) == {'target', 'state'} and set(state['state']) == {'step'}
  assert_same(state['target'], params)
  assert state['state']['step'] == 7 and state['state']['step'].dtype == np.int32
  # bfloat16 storage: T5X reads the spec's dtype back.
  checkpoints.save_t5x_checkpoint(params, tmp_path, step=8, dtype=jnp.bfloat16,
                                  use_tensorstore=use_tensorstore)
  bf16 = t5x_load_t5x_checkpoint(tmp_path / 'checkpoint_8')['target']
  assert_same(bf16, jax.tree.map(lambda x: x.astype(jnp.bfloat16), params))
  assert os.path.isdir(folder)


def test_legacy_optimizer_state_reads_under_t5x_rules(params, tmp_path):
  states = _states(params)
  checkpoints.save_t5x_checkpoint(params, tmp_path, step=3, param_states=states)
  state = t5x_load_t5x_checkpoint(tmp_path / 'checkpoint_3')
  assert state['state']['param_states']['untouched'] is None
  assert_same(state['state']['param_states']['target'], states['target'])
  assert_same(state['target'], params)
  # Our reader agrees.
  ours = checkpoints.read_t5x_arrays(tmp_path, 'state/param_states')
  assert_same(ours['target'], states['target'])
  assert ours['untouched'] is None


def test_the_rules_reader_fails_on_an_empty_node(params, tmp_path):
  """The layout written before (an empty `param_states`) fails as T5X fails on it."""
  folder = pathlib.Path(checkpoints.save_t5x_checkpoint(params, tmp_path, step=1))
  contents = serialization.msgpack_restore((folder / 'checkpoint').read_bytes())
  contents['optimizer']['state']['param_states'] = {}
  (folder / 'checkpoint').write_bytes(serialization.msgpack_serialize(contents))
  with pytest.raises(AttributeError, match="'dict' object has no attribute 'dtype'"):
    t5x_load_t5x_checkpoint(folder)
  assert_same(checkpoints.load_t5x_checkpoint(folder, SMALL), params)  # We still read it.


@pytest.mark.parametrize('saver', ['save_t5x_checkpoint', 'save_orbax_checkpoint'])
def test_writers_refuse_empty_nodes_before_writing(params, tmp_path, saver):
  save = getattr(checkpoints, saver)
  states_arg = 'param_states' if saver == 'save_t5x_checkpoint' else 'optimizer_state'
  with pytest.raises(ValueError, match=f'{states_arg}/target/encoder is an empty dict'):
    save(params, tmp_path, **{states_arg: {'target': {'encoder': {}}}})
  bad = dict(params, extra={})
  with pytest.raises(ValueError, match='params/extra is an empty dict'):
    save(bad, tmp_path)
  with pytest.raises(ValueError, match='params/decoder/odd is a str, not an array'):
    save(dict(params, decoder=dict(params['decoder'], odd='x')), tmp_path)
  assert not os.listdir(tmp_path)  # Nothing half-written.
  # `{}` means no optimizer state: omitted, as None.
  save(params, tmp_path, **{states_arg: {}})
  assert checkpoints.read_t5x_arrays(tmp_path, 'state') == {'step': 0}


@pytest.mark.parametrize('model', ['target', 'draft'])
def test_shipped_demo_pair_reads_under_t5x_rules(model):
  """The shipped demo checkpoints (bfloat16, no `param_states`) read as T5X reads them.

  (With T5X's own `load_t5x_checkpoint` from a t5x checkout:
  `scripts/check_t5x_loader.py`; on cc342d4 it read the same arrays and values.)
  """
  import json
  from specdec_jax.util import paths
  from specdec_jax.train import job as train
  demo = paths.ASSETS_DIR / 'demo_ende'
  if not (demo / model).is_dir():
    pytest.skip('demo pair not shipped')
  pair = json.loads((demo / 'pair.json').read_text())
  state = t5x_load_t5x_checkpoint(next((demo / model).glob('checkpoint_*')))
  assert set(state) == {'target', 'state'} and set(state['state']) == {'step'}
  ours = checkpoints.load_t5x_checkpoint(demo / model,
                                         train.config_from_dict(pair[f'{model}_config']))
  t5x_params = jax.tree.map(np.asarray, state['target'])
  assert {x.dtype for x in jax.tree.leaves(t5x_params)} == {np.dtype(jnp.bfloat16)}
  assert_same(t5x_params, jax.tree.map(np.asarray, ours))


# --- Orbax layout ------------------------------------------------------------------

@pytest.mark.parametrize('use_ocdbt', [True, False])
def test_orbax_reads_under_t5x_rules(params, tmp_path, use_ocdbt):
  checkpoints.save_orbax_checkpoint(params, tmp_path, step=4, use_ocdbt=use_ocdbt)
  # An InferenceState's state_dict(): what t5x.infer restores.
  template = {'target': jax.tree.map(np.zeros_like, params),
              'state': {'step': np.zeros((), np.int32)}}
  restored = t5x_orbax_restore(tmp_path, 4, template)
  assert_same(restored['target'], params)
  assert restored['state']['step'] == 4 and set(restored['state']) == {'step'}


def test_orbax_optimizer_state_reads_under_t5x_rules(params, tmp_path):
  states = {'target': _states(params)['target']}
  checkpoints.save_orbax_checkpoint(params, tmp_path, step=2, optimizer_state=states)
  template = {'target': jax.tree.map(np.zeros_like, params),
              'state': {'step': np.zeros((), np.int32),
                        'param_states': jax.tree.map(np.zeros_like, states)}}
  restored = t5x_orbax_restore(tmp_path, 2, template)
  assert_same(restored['state']['param_states'], states)
  assert_same(restored['target'], params)


def test_the_orbax_rules_reader_fails_on_an_empty_node(params, tmp_path):
  import orbax.checkpoint as ocp
  manager = ocp.CheckpointManager(
      tmp_path, item_handlers={'state': ocp.PyTreeCheckpointHandler(use_ocdbt=True)},
      options=ocp.CheckpointManagerOptions(step_prefix='checkpoint', create=True))
  old = {'target': params, 'state': {'step': np.int32(1), 'param_states': {}}}
  manager.save(1, args=ocp.args.Composite(state=ocp.args.PyTreeSave(old)), force=True)
  manager.wait_until_finished()
  manager.close()
  with pytest.raises(AssertionError, match='param_states'):
    t5x_orbax_restore(tmp_path, 1, {'target': params, 'state': {'step': np.int32(0)}})
