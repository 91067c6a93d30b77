"""The T5X restore hook that puts the draft's params into `params['draft']`.

T5X calls a `RestoreStateTransformationFn` as `fn(state_dict, target_state_dict)`:
`state_dict` is the checkpoint's (`{'target': params, 'state': {...}}`, NumPy leaves
for arrays stored in the msgpack), `target_state_dict` the model's train state dict
of global shapes (`jax.ShapeDtypeStruct` leaves). Here both are built as T5X builds
them, the latter from the model class's own `get_initial_variables`.
"""

from __future__ import annotations

from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import checkpoints
from specdec_jax.interop.t5x import restore as t5x_restore
from specdec_jax.models import t5
from specdec_jax.interop.t5x.model import SpeculativeEncoderDecoderModel

SHAPES = {'encoder_input_tokens': (2, 6), 'decoder_input_tokens': (2, 5)}


class Vocab:
  vocab_size, eos_id = 60, 1


def _model(pair):
  return SpeculativeEncoderDecoderModel(pair.model, Vocab(), Vocab(), None,
                                        draft_module=pair.draft_model)


def _train_state_dict(model, with_param_states=True):
  """What T5X passes as `target_state_dict`: the train state's global shapes."""
  variables = jax.eval_shape(lambda rng: model.get_initial_variables(rng, SHAPES),
                             jax.random.PRNGKey(0))
  params = variables['params']
  state = {'step': jax.ShapeDtypeStruct((), jnp.int32)}
  if with_param_states:  # a momentum-like optimizer state per param
    state['param_states'] = jax.tree_util.tree_map(
        lambda x: {'m': jax.ShapeDtypeStruct(x.shape, jnp.float32)}, params)
  return {'target': params, 'state': state}


def _ckpt_state_dict(pair):
  """The target's checkpoint as T5X reads it (no draft, target param_states only)."""
  params = jax.tree_util.tree_map(np.asarray, pair.params)
  return {'target': params, 'state': {
      'step': np.asarray(7, np.int32),
      'param_states': jax.tree_util.tree_map(lambda x: {'m': np.ones_like(x)}, params)}}


def test_adds_draft_params_and_zero_states(pair, tmp_path):
  model = _model(pair)
  draft_dir = checkpoints.save_t5x_checkpoint(pair.draft_params, tmp_path / 'draft', step=3,
                                              dtype=jnp.bfloat16)
  target_sd = _train_state_dict(model)
  ckpt = _ckpt_state_dict(pair)
  out = t5x_restore.add_draft_params(ckpt, target_sd, draft_checkpoint=str(draft_dir))

  # The target's params and states are passed through untouched.
  for key in ('token_embedder', 'encoder', 'decoder'):
    assert out['target'][key] is ckpt['target'][key]
    assert out['state']['param_states'][key] is ckpt['state']['param_states'][key]
  assert out['state']['step'] is ckpt['state']['step']
  # The draft: every param, shaped and typed as the train state expects (float32,
  # from a bfloat16-stored checkpoint), equal to the draft's params up to bf16 storage.
  draft = out['target']['draft']
  t5.check_params(draft, pair.draft_config)
  flat = traverse_util.flatten_dict(draft, sep='/')
  want = traverse_util.flatten_dict(pair.draft_params, sep='/')
  assert set(flat) == set(want)
  for k, v in flat.items():
    assert isinstance(v, np.ndarray) and v.dtype == np.float32
    np.testing.assert_array_equal(v, np.asarray(jnp.asarray(want[k], jnp.bfloat16),
                                                np.float32))
  # Its optimizer state: zeros of the train state's shapes (a fresh optimizer state).
  states = traverse_util.flatten_dict(out['state']['param_states']['draft'], sep='/')
  spec = traverse_util.flatten_dict(target_sd['state']['param_states']['draft'], sep='/')
  assert set(states) == set(spec)
  for k, v in states.items():
    assert v.shape == spec[k].shape and not v.any()
  # T5X's structure check: the restored tree has exactly the train state's params.
  assert (set(traverse_util.flatten_dict(out['target'], sep='/')) ==
          set(traverse_util.flatten_dict(target_sd['target'], sep='/')))


def test_keeps_a_checkpointed_draft_and_draftless_models(pair, tmp_path):
  model = _model(pair)
  target_sd = _train_state_dict(model, with_param_states=False)
  ckpt = _ckpt_state_dict(pair)
  ckpt['target'] = {**ckpt['target'], 'draft': 'already there'}
  out = t5x_restore.add_draft_params(ckpt, target_sd, draft_checkpoint=str(tmp_path / 'none'),
                                     is_resuming=True)
  assert out['target']['draft'] == 'already there'
  # A train state without a draft (T5X's own EncoderDecoderModel): nothing to do.
  plain = {'target': jax.eval_shape(lambda: pair.params), 'state': {}}
  ckpt = _ckpt_state_dict(pair)
  out = t5x_restore.add_draft_params(ckpt, plain)
  assert 'draft' not in out['target'] and out['target'] is ckpt['target']


def test_errors_name_the_fix(pair, tmp_path):
  model = _model(pair)
  target_sd = _train_state_dict(model)
  with pytest.raises(ValueError, match='draft_checkpoint = %DRAFT_CHECKPOINT'):
    t5x_restore.add_draft_params(_ckpt_state_dict(pair), target_sd)
  with pytest.raises(FileNotFoundError):
    t5x_restore.add_draft_params(_ckpt_state_dict(pair), target_sd,
                                 draft_checkpoint=str(tmp_path / 'missing'))
  # A checkpoint of another network (the target's) is not the draft_module's.
  wrong = checkpoints.save_t5x_checkpoint(pair.params, tmp_path / 'wrong', step=0)
  with pytest.raises(ValueError, match='DRAFT_MODULE') as err:
    t5x_restore.add_draft_params(_ckpt_state_dict(pair), target_sd,
                                 draft_checkpoint=str(wrong))
  assert 'encoder/layers_1' in str(err.value)  # the draft has one encoder layer
