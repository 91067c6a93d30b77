"""T5 model: T5X param tree, and k-token cached calls equal to k single-token calls."""

from __future__ import annotations

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax.util import paths
from specdec_jax.models import config as config_lib
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

from conftest import small_config

TINY_T5X = T5Config(vocab_size=32128, emb_dim=8, num_heads=4, num_encoder_layers=2,
                    num_decoder_layers=2, head_dim=3, mlp_dim=16,
                    mlp_activations=('gelu', 'linear'), logits_via_embedding=False,
                    dropout_rate=0.0)


def _t5x_fixture_params():
  path = paths.data_dir() / 't5x_checkpoints' / 'test_t5_tiny.checkpoint_0'
  return flax.serialization.msgpack_restore(path.read_bytes())['optimizer']['target']


def test_t5x_checkpoint_loads_unchanged_and_runs():
  params = _t5x_fixture_params()
  t5.check_params(params, TINY_T5X)  # exactly the same tree and shapes
  model = t5.Transformer(TINY_T5X)
  enc = jnp.array([[5, 6, 7, 1, 0], [8, 1, 0, 0, 0]])
  dec_in = jnp.array([[0, 3, 4], [0, 6, 7]])
  logits = model.apply({'params': params}, enc, dec_in, jnp.ones_like(dec_in),
                       enable_dropout=False)
  assert logits.shape == (2, 3, 32128)
  assert np.isfinite(np.asarray(logits)).all()
  # Same tree as a fresh init (no renaming, no reshaping).
  fresh = jax.eval_shape(lambda: t5.init_params(TINY_T5X, jax.random.PRNGKey(0)))
  assert jax.tree_util.tree_structure(fresh) == jax.tree_util.tree_structure(params)


def test_logical_axis_names_are_t5x():
  axes = t5.params_axes(small_config())
  assert axes['token_embedder']['embedding'] == ('vocab', 'embed')
  assert axes['encoder']['layers_0']['attention']['query']['kernel'] == ('embed', 'joined_kv')
  assert axes['encoder']['layers_0']['attention']['out']['kernel'] == ('joined_kv', 'embed')
  assert axes['decoder']['layers_1']['mlp']['wi_0']['kernel'] == ('embed', 'mlp')
  assert axes['decoder']['layers_1']['mlp']['wo']['kernel'] == ('mlp', 'embed')
  assert axes['decoder']['logits_dense']['kernel'] == ('embed', 'vocab')
  assert axes['decoder']['relpos_bias']['rel_embedding'] == ('heads', 'relpos_buckets')
  assert axes['encoder']['encoder_norm']['scale'] == ('embed',)


def test_t5_1_0_tree_has_no_logits_dense_and_single_wi():
  cfg = small_config(mlp_activations=('relu',), logits_via_embedding=True)
  shapes = t5.param_shapes(cfg)
  assert not any('logits_dense' in k for k in shapes)
  assert "['encoder']['layers_0']['mlp']['wi']['kernel']" in shapes


def test_presets_cover_public_sizes():
  for name in ['t5_1_0_small', 't5_1_0_base', 't5_1_0_large', 't5_1_0_3B', 't5_1_0_11B',
               't5_1_1_small', 't5_1_1_base', 't5_1_1_large', 't5_1_1_xl', 't5_1_1_xxl']:
    assert name in config_lib.PRESETS
  assert config_lib.preset('t5_1_1_xxl').emb_dim == 4096
  assert config_lib.preset('mt5_small').vocab_size == 250112
  assert config_lib.preset('byt5_small').vocab_size == 384
  with pytest.raises(KeyError, match='Unknown T5 preset'):
    config_lib.preset('t5_huge')


@pytest.fixture(scope='module')
def model_and_step(pair):
  step = jax.jit(t5.make_step_fn(pair.model, pair.params))
  return pair, step


@pytest.mark.parametrize('k', [1, 2, 5, 8])
def test_k_token_call_equals_k_single_calls(model_and_step, k):
  pair, step = model_and_step
  rng = np.random.default_rng(k)
  batch, max_len = 3, 24
  enc = jnp.asarray(rng.integers(2, 64, (batch, 6)))
  enc = enc.at[1, 4:].set(0).at[2, 2:].set(0)
  cache0 = t5.encode_and_init_cache(pair.model, pair.params, enc, max_len)
  tokens = jnp.asarray(rng.integers(2, 64, (batch, 16)), jnp.int32).at[:, 0].set(0)
  # Rows at different positions: fill row b with `start[b]` tokens one at a time.
  start = np.array([0, 3, 7])
  cache = cache0
  for t in range(start.max()):
    lengths = jnp.asarray(np.minimum(t, start), jnp.int32)
    tok = jnp.take_along_axis(tokens, lengths[:, None], axis=1)
    # Rows already at their start write a stale slot at `start` (overwritten below).
    _, cache = step(tok, lengths, cache)
  lengths = jnp.asarray(start, jnp.int32)
  block = jnp.stack([tokens[b, start[b]:start[b] + k] for b in range(batch)])
  multi, _ = step(block, lengths, cache)
  singles = []
  c = cache
  for i in range(k):
    out, c = step(block[:, i:i + 1], lengths + i, c)
    singles.append(out)
  np.testing.assert_allclose(np.asarray(multi), np.asarray(jnp.concatenate(singles, 1)),
                             atol=1e-5, rtol=0)
  # And against the full-sequence forward pass (no cache at all).
  for b in range(batch):
    seq = tokens[b:b + 1, :start[b] + k]
    full = pair.model.apply({'params': pair.params}, enc[b:b + 1], seq, jnp.ones_like(seq),
                            enable_dropout=False)
    np.testing.assert_allclose(np.asarray(multi[b]), np.asarray(full[0, start[b]:]),
                               atol=1e-5, rtol=0)


def test_rollback_overwrites_stale_slots(model_and_step):
  """Write junk beyond a row's length, 'roll back', then rewrite: junk never leaks."""
  pair, step = model_and_step
  enc = jnp.array([[5, 6, 7, 8], [9, 10, 0, 0]])
  cache = t5.encode_and_init_cache(pair.model, pair.params, enc, 16)
  good = jnp.array([[0, 11, 12, 13, 14, 15], [0, 21, 22, 23, 24, 25]], jnp.int32)
  junk = jnp.array([[40, 41, 42, 43, 44], [50, 51, 52, 53, 54]], jnp.int32)
  lengths = jnp.zeros(2, jnp.int32)
  _, cache = step(good[:, :2], lengths, cache)  # positions 0, 1
  _, cache = step(junk, jnp.array([2, 2], jnp.int32), cache)  # rejected drafts at 2..6
  # Roll back (lengths stays 2) and consume the real tokens at 2..5 in one call.
  after, cache = step(good[:, 2:], jnp.array([2, 2], jnp.int32), cache)
  fresh = t5.encode_and_init_cache(pair.model, pair.params, enc, 16)
  ref, _ = step(good, jnp.zeros(2, jnp.int32), fresh)
  np.testing.assert_allclose(np.asarray(after), np.asarray(ref[:, 2:]), atol=1e-5, rtol=0)
  # Roll rows back to different lengths (3 and 4) over valid-but-stale slots.
  after2, _ = step(jnp.array([[13], [24]], jnp.int32), jnp.array([3, 4], jnp.int32), cache)
  np.testing.assert_allclose(np.asarray(after2[:, 0]), np.asarray(ref[[0, 1], [3, 4]]),
                             atol=1e-5, rtol=0)


def test_bad_inputs_raise_clear_errors(pair):
  with pytest.raises(ValueError, match=r"logits_dense.*has shape \(32, 64\) but the T5Config expects \(32, 65\)"):
    t5.check_params(pair.params, pair.config.replace(vocab_size=65))  # first: decoder logits_dense
  with pytest.raises(ValueError, match='params lack'):
    t5.check_params(pair.params, pair.config.replace(num_decoder_layers=3))
  cache = t5.encode_and_init_cache(pair.model, pair.params, jnp.ones((1, 3), jnp.int32), 4)
  step = t5.make_step_fn(pair.model, pair.params)
  with pytest.raises(ValueError, match='beyond the remaining cache'):
    step(jnp.ones((1, 3), jnp.int32), jnp.array([2], jnp.int32), cache)
  with pytest.raises(ValueError, match='cache holds only'):
    step(jnp.ones((1, 5), jnp.int32), jnp.array([0], jnp.int32), cache)
  with pytest.raises(ValueError, match='dropout_rate'):
    small_config(dropout_rate=1.5)
