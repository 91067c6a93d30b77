"""Hugging Face T5 (`T5ForConditionalGeneration`) to and from the T5X param tree.

`import_hf_t5` / `load_hf_t5` map an HF folder (safetensors, sharded or not, or a
PyTorch `.bin`) or a state dict to this package's params; `export_hf_t5` writes a
folder `from_pretrained` loads with the same logits; `t5_config_from_hf` and
`hf_config_dict` map the configs. Both directions account for every tensor and
every param (`specdec_jax.interop.hf.accounting`): nothing is silently dropped, filled
or invented. The mapping mirrors T5X's `checkpoint_importer` (Mesh-TF → T5X).
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy

from specdec_jax import checkpoints
from specdec_jax.util import atomic
from specdec_jax.interop.hf import accounting
from specdec_jax.interop.hf.accounting import HFImportAccounting
from specdec_jax.interop.hf.config import (hf_config_as_dict, hf_config_dict, hf_ties_weights,
                                   t5_config_from_hf)
from specdec_jax.interop.hf.files import load_folder, to_numpy
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

PyTree = Any

__all__ = ['import_hf_t5', 'load_hf_t5', 'export_hf_t5', 't5_config_from_hf',
           'hf_config_dict', 'HFImportAccounting']


def _infer_config(state) -> T5Config:
  """A T5Config from HF weight shapes alone (T5 1.0 if `wi`, T5 1.1 if `wi_0`/`wi_1`)."""
  embedding = next((k for k in accounting.EMBEDDING_KEYS if k in state), None)
  rel_key = 'encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight'
  q_key = 'encoder.block.0.layer.0.SelfAttention.q.weight'
  gated = 'encoder.block.0.layer.1.DenseReluDense.wi_0.weight' in state
  wi_key = 'encoder.block.0.layer.1.DenseReluDense.' + ('wi_0' if gated else 'wi') + '.weight'
  absent = [k for k in (rel_key, q_key, wi_key) if k not in state]
  if embedding is None or absent:
    raise ValueError(
        'No config given and none beside the weights, and the weights lack '
        f'{absent[0] if absent else " / ".join(accounting.EMBEDDING_KEYS)} to infer one from; '
        'pass config= (a T5Config or the HF config.json).')
  vocab, d_model = np.shape(state[embedding])
  buckets, heads = np.shape(state[rel_key])
  count = lambda stack: 1 + max(int(k.split('.')[2]) for k in state
                                if k.startswith(f'{stack}.block.') and k.split('.')[2].isdigit())
  lm_head = state.get(accounting.HEAD_KEY)
  tied = lm_head is None or np.array_equal(np.asarray(lm_head), np.asarray(state[embedding]))
  return T5Config(vocab_size=vocab, emb_dim=d_model, num_heads=heads,
                  head_dim=np.shape(state[q_key])[0] // heads, mlp_dim=np.shape(state[wi_key])[0],
                  num_encoder_layers=count('encoder'), num_decoder_layers=count('decoder'),
                  mlp_activations=('gelu', 'linear') if gated else ('relu',),
                  logits_via_embedding=tied, relative_attention_num_buckets=buckets)


def import_hf_t5(path_or_state_dict, config=None, dtype=jnp.float32, *,
                 with_accounting: bool = False):
  """Maps a Hugging Face T5 checkpoint to this package's (T5X's) param tree.

  The inverse of `export_hf_t5` (cf. T5X's `checkpoint_importer`): Linear weights
  `[out, in]` become kernels `[in, out]`; `relative_attention_bias [buckets,
  heads]` (block 0 of each stack) becomes `relpos_bias/rel_embedding [heads,
  buckets]`; the token embedding is `token_embedder/embedding`; for an untied
  model (T5 1.1) `lm_head [vocab, d_model]` becomes `decoder/logits_dense/kernel
  [d_model, vocab]`.

  Every tensor is accounted for, by the keys present. The token embedding may be
  stored as `shared.weight` and/or `encoder.embed_tokens.weight` /
  `decoder.embed_tokens.weight` (and, for a tied T5 1.0 config, `lm_head.weight`):
  copies must be identical, since T5X's tree holds one table. The only tensor
  not imported is the one transformers also ignores
  (`decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight`;
  warned). The only param not filled from its own tensor is an untied config's
  `decoder/logits_dense` when the file has no `lm_head.weight` and the HF config
  says `tie_word_embeddings: true` (what transformers 5.x saves for a T5 1.1 whose
  head it tied): it is the embedding, as transformers computes (warned).

  Args:
    path_or_state_dict: an HF model folder (`model.safetensors`, sharded
      safetensors with `model.safetensors.index.json`, `pytorch_model.bin` or
      sharded `.bin`; `config.json` beside it), or a state dict name → torch
      tensor / array.
    config: our `T5Config`, or an HF config (dict, `transformers.T5Config`, path
      to config.json). Default: the folder's config.json, else inferred from the
      weight shapes (gated → gated-gelu, tied iff `lm_head` is absent or equals
      the embedding).
    dtype: dtype of the returned arrays (float32 by default).
    with_accounting: also return the `HFImportAccounting` (where each tensor
      went, which were duplicates or ignored, which param was filled how).
  Returns:
    Params (nested dict of numpy arrays) that `t5.check_params(params, config)`
    accepts, or `(params, accounting)` with `with_accounting`.
  Raises:
    FileNotFoundError: a folder without weights or config.
    ValueError: the file does not map onto the config; the message lists every
      unknown tensor, every missing param (with the HF key that would fill it),
      every shape mismatch, and every pair of tensors T5X's tree cannot hold
      together (e.g. `encoder.embed_tokens.weight` and
      `decoder.embed_tokens.weight` that differ, or an `lm_head.weight` that
      differs from the embedding under a tied config), naming both keys and what
      differs; `checkpoints.NonFiniteParams` when a tensor holds NaN or Inf.
  """
  folder = None
  if isinstance(path_or_state_dict, (str, os.PathLike)):
    folder = os.fspath(path_or_state_dict)
    if not os.path.isdir(folder):
      raise FileNotFoundError(f'No Hugging Face T5 folder at {folder!r} (expected a folder '
                              'with model.safetensors or pytorch_model.bin and config.json).')
    state = load_folder(folder)
  else:
    state = {k: to_numpy(v) for k, v in dict(path_or_state_dict).items()}

  hf_cfg = None
  if config is not None and not isinstance(config, T5Config):
    hf_cfg = hf_config_as_dict(config)
  elif folder is not None and os.path.isfile(os.path.join(folder, 'config.json')):
    hf_cfg = hf_config_as_dict(folder)
  if not isinstance(config, T5Config):
    config = t5_config_from_hf(hf_cfg) if hf_cfg is not None else _infer_config(state)
  head_tied = hf_ties_weights(hf_cfg) if hf_cfg is not None else None

  acc, items = accounting.account_import(state, config, head_tied=head_tied)
  for key, why in acc.ignored.items():
    warnings.warn(f'Not imported: {key} ({why}).', stacklevel=2)
  for path, how in acc.filled.items():
    warnings.warn(f'{path} filled from {how}.', stacklevel=2)
  flat = {}
  for path, value, transpose in items:
    value = np.asarray(value)
    flat[path] = np.ascontiguousarray((value.T if transpose else value).astype(dtype))
  params = flax.traverse_util.unflatten_dict(flat)
  t5.check_params(params, config)
  checkpoints.check_finite(params, f'The Hugging Face checkpoint {folder or "(state dict)"!r}')
  return (params, acc) if with_accounting else params


def load_hf_t5(folder: str | os.PathLike, dtype=jnp.float32, **config_overrides
               ) -> tuple[PyTree, T5Config]:
  """`(params, config)` of an HF T5 folder (`import_hf_t5` + `t5_config_from_hf`).

  Raises: as `import_hf_t5` and `t5_config_from_hf`.
  """
  config = t5_config_from_hf(folder, **config_overrides)
  return import_hf_t5(folder, config, dtype=dtype), config


def _write_json(obj):
  def write(path):
    with open(path, 'w') as f:
      json.dump(obj, f, indent=2, sort_keys=True)
  return write


def export_hf_t5(params: PyTree, config: T5Config, out_dir: str | os.PathLike,
                 dtype=np.float32) -> str:
  """Writes params as a folder `T5ForConditionalGeneration.from_pretrained` loads.

  Inverse of `import_hf_t5`: `model.safetensors` holds every param exactly once
  under its HF name (Linear weights `[out, in]`, the embedding as `shared.weight`,
  plus `lm_head.weight` for untied configs) and nothing else; `config.json` is
  `hf_config_dict(config)` and `generation_config.json` sets
  `decoder_start_token_id` 0. The HF model's logits equal `Transformer(config)`'s.
  Each file is written under a temporary name and renamed.

  Args:
    params: params of `Transformer(config)`.
    config: their config.
    out_dir: folder to write (created; existing files of the same names replaced).
    dtype: dtype of the stored weights (float32 default; `jnp.bfloat16` works).
  Returns:
    `out_dir` as a string.
  Raises:
    ValueError: before writing anything: every param missing, without an HF key,
      not an array or of another shape than `config`'s (all named), or
      activations HF lacks; `checkpoints.NonFiniteParams` for NaN / Inf params.
  """
  hf_cfg = hf_config_dict(config)
  flat = {tuple(str(getattr(k, 'key', k)) for k in p): v
          for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}
  layout = accounting.account_export(flat, config)
  checkpoints.check_finite(params, 'The params given to export_hf_t5')  # before writing
  tensors = {}
  for hf_name, path, transpose in layout:
    value = np.asarray(jax.device_get(flat[path]))
    tensors[hf_name] = np.ascontiguousarray((value.T if transpose else value).astype(dtype))
  out_dir = os.fspath(out_dir)
  os.makedirs(out_dir, exist_ok=True)
  hf_cfg['torch_dtype'] = hf_cfg['dtype'] = jnp.dtype(dtype).name
  atomic.write_with(os.path.join(out_dir, 'model.safetensors'),
                lambda p: safetensors.numpy.save_file(tensors, p, metadata={'format': 'pt'}))
  atomic.write_with(os.path.join(out_dir, 'config.json'), _write_json(hf_cfg))
  atomic.write_with(os.path.join(out_dir, 'generation_config.json'), _write_json(
      {'decoder_start_token_id': 0, 'eos_token_id': 1, 'pad_token_id': 0}))
  return out_dir
