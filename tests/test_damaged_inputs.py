"""Issue #43: damaged inputs never become quiet wrong answers.

One test (or a few) per class, each building its faulty input in the test:
1. damaged checkpoints (missing chunks or array folders, a cut data file, a truncated
   msgpack, a newest step that did not finish) — `checkpoints.integrity`;
2. settings that make nonsense: token ids outside the vocabulary, a draft with a smaller
   vocabulary, seeds out of range — `generate.common.check_token_ids`,
   `sampling.check_seed`;
3. output paths: symlinks written through, folders and special files refused —
   `util.atomic.destination`;
5. training resume: at least one state kept, a damaged newest state skipped, no empty run
   folder after a failed start — `train.run_files`, `train.job`;
6. determinism: the baseline with one key per row (a row's output independent of its batch).
The decode job's, distillation's and the benchmark's up-front checks are in
tests/test_decode_job.py and below (class 4).
"""

from __future__ import annotations

import glob
import os
import pathlib
import shutil
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specdec_jax import checkpoints
from specdec_jax import generate
from specdec_jax.checkpoints import integrity
from specdec_jax.decoding import sampling
from specdec_jax.util import atomic

PARAMS = {'encoder': {'a': {'kernel': np.arange(24, dtype=np.float32).reshape(4, 6)},
                      'b': {'scale': np.zeros((6,), np.float32)}}}
ENC = np.array([[5, 6, 7, 8, 9, 1], [10, 11, 12, 1, 0, 0], [13, 1, 0, 0, 0, 0]], np.int32)


def _load(path, **kw):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    out = checkpoints.load_t5x_checkpoint(path, **kw)
  return out, [str(w.message) for w in caught]


# --- 1. damaged checkpoints ------------------------------------------------------------

def _params(step):
  return jax.tree.map(lambda x: x + (step - 1), PARAMS)


def _legacy(tmp_path, steps=(1,)):
  for step in steps:
    checkpoints.save_t5x_checkpoint(_params(step), tmp_path / 'lg', step=step)
  return tmp_path / 'lg'


def test_a_deleted_chunk_or_array_folder_is_named_not_read_as_zeros(tmp_path):
  root = _legacy(tmp_path)
  kernel = root / 'checkpoint_1' / 'target.encoder.a.kernel'
  (kernel / '0.0').unlink()
  with pytest.raises(checkpoints.MissingChunks, match='encoder/a/kernel'):
    checkpoints.load_t5x_checkpoint(root)
  shutil.rmtree(kernel)
  with pytest.raises(checkpoints.MissingChunks, match='encoder/a/kernel.*folder'):
    checkpoints.load_t5x_checkpoint(root)
  # Planted: the check is what catches it: without it the array reads as zeros.
  assert integrity.expected_chunks((4, 6), (4, 6)) == 1


def test_one_missing_chunk_of_many_is_counted(tmp_path):
  import tensorstore as ts
  root = _legacy(tmp_path)
  folder = root / 'checkpoint_1' / 'target.encoder.a.kernel'
  shutil.rmtree(folder)  # rewritten as T5X writes a big array: one row per chunk
  store = ts.open({'driver': 'zarr', 'kvstore': {'driver': 'file', 'path': str(folder)},
                   'dtype': 'float32',
                   'metadata': {'shape': [4, 6], 'chunks': [1, 6]}}, create=True).result()
  store.write(PARAMS['encoder']['a']['kernel']).result()
  np.testing.assert_array_equal(checkpoints.load_t5x_checkpoint(root)['encoder']['a']['kernel'],
                                PARAMS['encoder']['a']['kernel'])
  chunks = sorted(p for p in folder.iterdir() if not p.name.startswith('.'))
  assert len(chunks) == 4
  chunks[-1].unlink()
  with pytest.raises(checkpoints.MissingChunks, match=f'1 of its {len(chunks)} chunk files'):
    checkpoints.load_t5x_checkpoint(root)


def test_orbax_missing_chunk_and_cut_data_file(tmp_path):
  checkpoints.save_orbax_checkpoint(PARAMS, tmp_path / 'zarr', step=1, use_ocdbt=False)
  for f in glob.glob(str(tmp_path / 'zarr/checkpoint_1/state/target.encoder.a.kernel/0*')):
    os.remove(f)
  with pytest.raises(checkpoints.MissingChunks, match='encoder/a/kernel'):
    checkpoints.load_t5x_checkpoint(tmp_path / 'zarr')
  big = {'encoder': {'a': {'kernel': np.random.RandomState(0).rand(256, 256)
                           .astype(np.float32)}}}
  checkpoints.save_orbax_checkpoint(big, tmp_path / 'ocdbt', step=1)
  data = max(glob.glob(str(tmp_path / 'ocdbt/checkpoint_1/state/**/d/*'), recursive=True),
             key=os.path.getsize)
  os.remove(data)
  with pytest.raises(checkpoints.DamagedCheckpoint, match='damaged'):
    checkpoints.load_t5x_checkpoint(tmp_path / 'ocdbt')


def test_a_truncated_msgpack_is_named_truncated(tmp_path):
  root = _legacy(tmp_path)
  msgpack = root / 'checkpoint_1' / 'checkpoint'
  msgpack.write_bytes(msgpack.read_bytes()[:100])
  with pytest.raises(checkpoints.TruncatedCheckpoint, match='truncated'):
    checkpoints.load_t5x_checkpoint(root / 'checkpoint_1')
  msgpack.write_bytes(b'')
  with pytest.raises(checkpoints.TruncatedCheckpoint, match='0 bytes'):
    checkpoints.load_t5x_checkpoint(msgpack)


@pytest.mark.parametrize('damage', ['truncated msgpack', 'empty folder', 'orbax no _METADATA',
                                    'orbax no manifest'])
def test_the_newest_complete_step_is_loaded_with_a_warning(tmp_path, damage):
  if damage.startswith('orbax'):
    root = tmp_path / 'ob'
    checkpoints.save_orbax_checkpoint(_params(1), root, step=1)
    checkpoints.save_orbax_checkpoint(_params(2), root, step=2)
    state = root / 'checkpoint_2' / 'state'
    (state / ('_METADATA' if 'METADATA' in damage else 'manifest.ocdbt')).unlink()
  else:
    root = _legacy(tmp_path, steps=(1, 2))
    if damage == 'empty folder':
      (root / 'checkpoint_3').mkdir()
    else:
      msgpack = root / 'checkpoint_2' / 'checkpoint'
      msgpack.write_bytes(msgpack.read_bytes()[:50])
  params, warned = _load(root)
  want = 2 if damage == 'empty folder' else 1  # the newest complete step
  np.testing.assert_array_equal(params['encoder']['a']['kernel'],
                                _params(want)['encoder']['a']['kernel'])
  assert len(warned) == 1 and 'skipped' in warned[0], warned
  assert f'Loading checkpoint_{want}' in warned[0], warned
  # An explicit step is not replaced by another: the damage is named instead.
  if damage == 'truncated msgpack':
    with pytest.raises(checkpoints.TruncatedCheckpoint):
      checkpoints.load_t5x_checkpoint(root, restore_step=2)


def test_whole_checkpoints_load_without_warnings(tmp_path):
  root = _legacy(tmp_path, steps=(1, 2))
  checkpoints.save_orbax_checkpoint(PARAMS, tmp_path / 'ob', step=4)
  for path, step in ((root, 2), (tmp_path / 'ob', 1)):
    params, warned = _load(path)
    assert warned == []
    np.testing.assert_array_equal(params['encoder']['b']['scale'], step - 1)  # 0: all zeros


# --- 2. settings that make nonsense ------------------------------------------------------

def test_token_ids_outside_the_vocabulary_are_refused_before_compiling(pair):
  bad = ENC.copy()
  bad[0, 0] = pair.config.vocab_size  # one past the table
  with pytest.raises(ValueError, match=r'encoder_input_tokens holds token ids in \[0, 64\]'):
    generate.t5_generate(pair.model, pair.params, bad, 4)
  with pytest.raises(ValueError, match='encoder_input_tokens'):
    generate.t5_speculative_generate(pair.model, pair.params, pair.draft_model,
                                     pair.draft_params, -ENC, 4, 2)
  prompt = np.zeros((3, 4), np.int32)
  prompt[1, 0] = 999
  with pytest.raises(ValueError, match='decoder_prompt'):
    generate.t5_generate(pair.model, pair.params, ENC, 4, decoder_prompt=prompt)
  with pytest.raises(ValueError, match='integer token ids'):
    generate.t5_generate(pair.model, pair.params, ENC.astype(np.float32), 4)


def test_decoder_only_prompt_ids_outside_the_vocabulary_are_refused():
  from specdec_jax.models import decoder_only
  from specdec_jax.models.config import DecoderOnlyConfig
  config = DecoderOnlyConfig(vocab_size=40, emb_dim=16, num_heads=2, num_layers=1,
                             head_dim=8, mlp_dim=32, dropout_rate=0.0)
  model = decoder_only.DecoderOnlyTransformer(config)
  params = decoder_only.init_params(config, jax.random.PRNGKey(0))
  prompts = np.array([[3, 4, 41]], np.int32)
  with pytest.raises(ValueError, match=r'prompts holds token ids in \[3, 41\]'):
    generate.decoder_only_generate(model, params, prompts, 4)
  with pytest.raises(ValueError, match='prompts holds token ids'):
    generate.decoder_only_speculative_generate(model, params, model, params, prompts, 4, 2)


def test_a_draft_with_a_smaller_vocabulary_is_refused(pair):
  from conftest import small_config
  from specdec_jax.models import t5
  cfg = small_config(vocab_size=48, emb_dim=16, num_decoder_layers=1, num_encoder_layers=1)
  draft = t5.Transformer(cfg)
  params = t5.init_params(cfg, jax.random.PRNGKey(3))
  with pytest.raises(ValueError, match='draft_model has vocab_size 48 < target_model'):
    generate.t5_speculative_generate(pair.model, pair.params, draft, params, ENC, 4, 2)
  # With the ids both share named, the draft's rows cover them: allowed.
  decodes, _, _ = generate.t5_speculative_generate(pair.model, pair.params, draft, params,
                                                   ENC, 4, 2, real_vocab_size=48)
  assert decodes.shape == (3, 1, 4)


@pytest.mark.parametrize('seed', [-1, 2**32, 2**70, 1.5, True, '0'])
def test_seeds_out_of_range_are_one_error(seed):
  with pytest.raises(ValueError, match=r'decode.seed must be an int in \[0, 2\*\*32\)'):
    sampling.check_seed('decode.seed', seed)
  assert sampling.check_seed('s', np.int64(2**32 - 1)) == 2**32 - 1


# --- 3. output paths ---------------------------------------------------------------------

def test_a_symlinked_output_is_written_through(tmp_path):
  target = tmp_path / 'real' / 'predictions.jsonl'
  target.parent.mkdir()
  target.write_text('old\n')
  link = tmp_path / 'link.jsonl'
  link.symlink_to(target)
  atomic.write_text(link, 'new\n')
  assert link.is_symlink() and target.read_text() == 'new\n'
  # A dangling link: its target is created.
  dangling = tmp_path / 'dangling.jsonl'
  dangling.symlink_to(tmp_path / 'real' / 'later.jsonl')
  atomic.write_text(dangling, 'x\n')
  assert dangling.is_symlink() and (tmp_path / 'real' / 'later.jsonl').read_text() == 'x\n'


def test_folders_and_special_files_are_refused_as_destinations(tmp_path):
  (tmp_path / 'dir.jsonl').mkdir()
  with pytest.raises(ValueError, match="decode.output_path .*dir.jsonl.* is a folder"):
    atomic.destination(tmp_path / 'dir.jsonl', 'decode.output_path')
  fifo = tmp_path / 'fifo.jsonl'
  os.mkfifo(fifo)
  with pytest.raises(ValueError, match='not a regular file'):
    atomic.write_text(fifo, 'x')
  assert not list(tmp_path.glob('.*tmp*'))  # nothing half-written left behind
  link = tmp_path / 'to_dir'
  link.symlink_to(tmp_path / 'dir.jsonl')
  with pytest.raises(ValueError, match='is a folder'):
    atomic.destination(link)


# --- 5. training resume ------------------------------------------------------------------

def _train_state(step):
  from specdec_jax.train.step import TrainState
  params = {'w': jnp.full((3,), float(step))}
  return TrainState(step=jnp.array(step, jnp.int32), params=params, opt_state={'m': params})


def test_at_least_one_train_state_is_kept(tmp_path):
  from specdec_jax.train import run_files
  for step in (100, 200):
    run_files.save_train_state(tmp_path, _train_state(step), {'epoch': 0, 'batch': step}, 0)
  assert [p.name for p in tmp_path.glob('train_state_*')] == ['train_state_200.msgpack']


def test_a_damaged_newest_train_state_is_skipped_for_the_one_before(tmp_path):
  from specdec_jax.train import run_files
  for step in (100, 200):
    run_files.save_train_state(tmp_path, _train_state(step), {'epoch': 0, 'batch': step}, 2)
  newest = tmp_path / 'train_state_200.msgpack'
  newest.write_bytes(newest.read_bytes()[:40])
  with pytest.warns(UserWarning, match='skipped damaged train state.*train_state_200.*step 100'):
    state, position = run_files.restore_train_state(tmp_path, _train_state(0))
  assert int(state.step) == 100 and position == {'epoch': 0, 'batch': 100}
  assert newest.exists()  # left for the user to look at
  (tmp_path / 'train_state_100.msgpack').write_bytes(b'\x00')
  with pytest.raises(ValueError, match='no train state can be read'):
    run_files.restore_train_state(tmp_path, _train_state(0))


def test_a_failed_start_leaves_no_run_folder(tmp_path):
  from conftest import small_config
  from specdec_jax.train import job
  run_dir = tmp_path / 'runs' / 'new'
  with pytest.raises(FileNotFoundError, match='missing.model'):
    job.train(run_dir=str(run_dir), model_config=small_config(),
              vocab_path=str(tmp_path / 'missing.model'))
  assert not run_dir.exists()
  with pytest.raises(ValueError, match='keep_checkpoints'):
    job.train(run_dir=str(run_dir), model_config=small_config(), keep_checkpoints=0)
  with pytest.raises(ValueError, match='train.seed'):
    job.train(run_dir=str(run_dir), model_config=small_config(), seed=-3)
  assert not run_dir.exists()


# --- 6. determinism ----------------------------------------------------------------------

@pytest.mark.parametrize('sampler', ['gumbel', 'inverse_cdf'])
def test_baseline_rows_with_their_own_keys_do_not_depend_on_the_batch(pair, sampler):
  """Row r decoded with key k_r gives the same tokens alone, first, or last in a batch."""
  keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.PRNGKey(5), i))(jnp.arange(3))
  kw = dict(temperature=1.0, sampler=sampler, num_decodes=2)
  full, _ = generate.t5_generate(pair.model, pair.params, ENC, 8, decode_rng=keys, **kw)
  alone, _ = generate.t5_generate(pair.model, pair.params, ENC[1:2], 8, decode_rng=keys[1:2],
                                  **kw)
  moved, _ = generate.t5_generate(pair.model, pair.params, ENC[::-1], 8,
                                  decode_rng=keys[::-1], **kw)
  np.testing.assert_array_equal(alone[0], full[1])
  np.testing.assert_array_equal(np.asarray(moved)[::-1], full)
  # Planted: one key for the batch (T5X's scheme) ties a row to its batch.
  one_full, _ = generate.t5_generate(pair.model, pair.params, ENC, 8,
                                     decode_rng=jax.random.PRNGKey(5), **kw)
  one_moved, _ = generate.t5_generate(pair.model, pair.params, ENC[::-1], 8,
                                      decode_rng=jax.random.PRNGKey(5), **kw)
  assert not np.array_equal(np.asarray(one_moved)[::-1], one_full)


def test_hf_export_and_import_refuse_non_finite_params(pair, tmp_path):
  from specdec_jax.interop.hf import t5 as hf_t5
  bad = jax.tree.map(np.asarray, pair.params)
  bad['decoder']['decoder_norm']['scale'] = bad['decoder']['decoder_norm']['scale'].copy()
  bad['decoder']['decoder_norm']['scale'][3] = np.nan
  with pytest.raises(checkpoints.NonFiniteParams, match='decoder/decoder_norm/scale'):
    hf_t5.export_hf_t5(bad, pair.config, tmp_path / 'hf')
  assert not (tmp_path / 'hf' / 'model.safetensors').exists()  # refused before writing
  hf_t5.export_hf_t5(pair.params, pair.config, tmp_path / 'hf')
  from safetensors.numpy import load_file, save_file
  tensors = load_file(str(tmp_path / 'hf' / 'model.safetensors'))
  tensors['shared.weight'][0, 0] = np.inf
  save_file(tensors, str(tmp_path / 'hf' / 'model.safetensors'))
  with pytest.raises(checkpoints.NonFiniteParams, match='token_embedder/embedding'):
    hf_t5.import_hf_t5(tmp_path / 'hf', pair.config)


# --- found by the fault try (issue #43's note) -------------------------------------------

def test_a_garbage_chunk_or_edited_zarray_is_damaged_not_a_misfit(tmp_path):
  root = _legacy(tmp_path)
  folder = root / 'checkpoint_1' / 'target.encoder.a.kernel'
  chunk = folder / '0.0'
  chunk.write_bytes(b'\0' * chunk.stat().st_size)  # same size, garbage
  with pytest.raises(checkpoints.DamagedCheckpoint, match='encoder/a/kernel cannot be read'):
    checkpoints.load_t5x_checkpoint(root)
  # The same when each shard is read on its own (`shardings=`, the mesh path).
  one_device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  with pytest.raises(checkpoints.DamagedCheckpoint, match='encoder/a/kernel cannot be read'):
    checkpoints.load_t5x_checkpoint(root, shardings=one_device)
  root2 = _legacy(tmp_path / 'b')
  zarray = root2 / 'checkpoint_1' / 'target.encoder.a.kernel' / '.zarray'
  zarray.write_text(zarray.read_text().replace('[4,6]', '[4,5]', 1))
  with pytest.raises(checkpoints.DamagedCheckpoint, match='encoder/a/kernel'):
    checkpoints.load_t5x_checkpoint(root2)


def test_an_overflowing_cast_is_named_as_the_cast(tmp_path):
  big = jax.tree.map(lambda x: x + 1e6, PARAMS)
  checkpoints.save_t5x_checkpoint(big, tmp_path / 'big', step=1)
  assert np.isfinite(checkpoints.load_t5x_checkpoint(tmp_path / 'big')['encoder']['a']
                     ['kernel']).all()
  with pytest.raises(checkpoints.NonFiniteParams, match='cast to float16 at load'):
    checkpoints.load_t5x_checkpoint(tmp_path / 'big', dtype=np.float16)


def test_empty_batches_eos_and_suppressed_eos_are_refused(pair):
  with pytest.raises(ValueError, match='batch >= 1'):
    generate.t5_generate(pair.model, pair.params, np.zeros((0, 4), np.int32), 4)
  with pytest.raises(ValueError, match='enc_len >= 1'):
    generate.t5_generate(pair.model, pair.params, np.zeros((2, 0), np.int32), 4)
  with pytest.raises(ValueError, match='suppress_ids holds the EOS id 1'):
    generate.t5_generate(pair.model, pair.params, ENC, 4, suppress_ids=(1, 5))
  with pytest.raises(ValueError, match='eos_id=999 is outside the vocabulary'):
    generate.t5_speculative_generate(pair.model, pair.params, pair.draft_model,
                                     pair.draft_params, ENC, 4, 2, eos_id=999)


def test_outputs_that_would_overwrite_what_the_job_reads_are_refused(tmp_path):
  ckpt = tmp_path / 'pair' / 'target' / 'checkpoint_1'
  ckpt.mkdir(parents=True)
  (ckpt / 'checkpoint').write_bytes(b'x')
  vocab = tmp_path / 'v.model'
  vocab.write_bytes(b'y')
  reads = {'the pair folder': tmp_path / 'pair', 'the vocabulary': vocab, 'unset': None}
  for out in (ckpt / 'checkpoint', tmp_path / 'pair' / 'pair.json', vocab):
    with pytest.raises(ValueError, match='would overwrite what'):
      atomic.check_not_reading(out, 'decode.output_path', reads)
  link = tmp_path / 'sneaky.jsonl'
  link.symlink_to(vocab)
  with pytest.raises(ValueError, match='the vocabulary'):
    atomic.check_not_reading(link, 'decode.output_path', reads)
  atomic.check_not_reading(tmp_path / 'out.jsonl', 'decode.output_path', reads)  # fine


@pytest.mark.skipif(not os.path.isdir('/proc/self'), reason='needs /proc (Linux)')
def test_an_unwritable_output_folder_is_found_before_the_work():
  with pytest.raises(ValueError, match='is not writable'):
    atomic.check_writable('/proc/self/out.jsonl', 'decode.output_path')
