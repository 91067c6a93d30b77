"""Hugging Face T5 (`T5ForConditionalGeneration`) to and from the T5X param tree.

`import_hf_t5` / `load_hf_t5` map an HF folder (safetensors, sharded or not, or a
PyTorch `.bin`) or a state dict to this package's params; `export_hf_t5` writes a
folder `from_pretrained` loads with the same logits; `t5_config_from_hf` and
`hf_config_dict` map the configs. Weights are read and written with the
`safetensors` library (bfloat16 through `ml_dtypes`); torch is needed only for
`.bin` files. The mapping mirrors T5X's `checkpoint_importer` (Mesh-TF → T5X).
"""

from __future__ import annotations

import json
import os
import re
import warnings
from typing import Any, Mapping

import flax
import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy

from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

PyTree = Any

__all__ = ['import_hf_t5', 'load_hf_t5', 'export_hf_t5', 't5_config_from_hf',
           'hf_config_dict']

_HF_ACTS = {  # HF feed_forward_proj -> T5Config.mlp_activations (numerics identical).
    'relu': ('relu',),
    'gated-gelu': ('gelu', 'linear'),  # HF maps gated-gelu to gelu_new (tanh approx.).
    'gated-gelu_new': ('gelu', 'linear'),
    'gelu_new': ('gelu',),
    'gated-relu': ('relu', 'linear'),
    'gated-silu': ('silu', 'linear'),
    'silu': ('silu',),
}
_ACTS_HF = {('relu',): 'relu', ('gelu', 'linear'): 'gated-gelu', ('gelu',): 'gelu_new',
            ('relu', 'linear'): 'gated-relu', ('silu', 'linear'): 'gated-silu',
            ('silu',): 'silu', ('swish', 'linear'): 'gated-silu', ('swish',): 'silu'}


def _hf_config_as_dict(config_json) -> dict:
  if isinstance(config_json, Mapping):
    return dict(config_json)
  if hasattr(config_json, 'to_dict'):
    d = config_json.to_dict()
    # transformers 5.x keeps the untied request as an attribute only.
    if hasattr(config_json, 'scale_decoder_outputs'):
      d['scale_decoder_outputs'] = config_json.scale_decoder_outputs
    return d
  path = os.fspath(config_json)
  if os.path.isdir(path):
    path = os.path.join(path, 'config.json')
  if not os.path.isfile(path):
    raise FileNotFoundError(f'No Hugging Face config at {path!r} (expected config.json).')
  with open(path) as f:
    return json.load(f)


def _hf_tied(cfg: Mapping[str, Any]) -> bool:
  """Whether an HF T5 config ties (and scales) the output layer.

  transformers < 5 writes `tie_word_embeddings: false` for T5 1.1; transformers 5.x
  writes `tie_word_embeddings: true, scale_decoder_outputs: false`.
  """
  if cfg.get('scale_decoder_outputs') is False:
    return False
  return cfg.get('tie_word_embeddings', True) is not False


def t5_config_from_hf(config_json, **overrides) -> T5Config:
  """Maps a Hugging Face `T5Config` to ours (inverse of `hf_config_dict`).

  Args:
    config_json: a dict, a path to `config.json` or to its folder, or a
      `transformers.T5Config`.
    **overrides: T5Config fields to set (e.g. `dtype=jnp.bfloat16`).
  Returns:
    A `T5Config` with vocab_size, emb_dim (d_model), num_heads, head_dim (d_kv),
    mlp_dim (d_ff), num_encoder_layers (num_layers), num_decoder_layers,
    mlp_activations (from feed_forward_proj: 'relu' → ('relu',), 'gated-gelu' →
    ('gelu', 'linear')), logits_via_embedding (tied output layer: T5 1.0),
    dropout_rate and the relative-attention bucket settings.
  Raises:
    FileNotFoundError: no config.json at the path.
    ValueError: an activation or layer-norm epsilon this model cannot reproduce.
  """
  cfg = _hf_config_as_dict(config_json)
  proj = cfg.get('feed_forward_proj', 'relu')
  if proj not in _HF_ACTS:
    raise ValueError(f'feed_forward_proj={proj!r} is not supported (exact-erf gelu differs '
                     f'from T5X\'s tanh gelu); supported: {sorted(_HF_ACTS)}.')
  eps = cfg.get('layer_norm_epsilon', 1e-6)
  if abs(eps - 1e-6) > 1e-12:
    raise ValueError(f'layer_norm_epsilon={eps} but this T5 implementation uses 1e-6.')
  num_layers = cfg.get('num_layers', 6)
  fields = dict(
      vocab_size=int(cfg.get('vocab_size', 32128)), emb_dim=int(cfg.get('d_model', 512)),
      num_heads=int(cfg.get('num_heads', 8)), head_dim=int(cfg.get('d_kv', 64)),
      mlp_dim=int(cfg.get('d_ff', 2048)), num_encoder_layers=int(num_layers),
      num_decoder_layers=int(cfg.get('num_decoder_layers') or num_layers),
      mlp_activations=_HF_ACTS[proj], logits_via_embedding=_hf_tied(cfg),
      dropout_rate=float(cfg.get('dropout_rate', 0.1)),
      relative_attention_num_buckets=int(cfg.get('relative_attention_num_buckets', 32)),
      relative_attention_max_distance=int(cfg.get('relative_attention_max_distance', 128)))
  fields.update(overrides)
  return T5Config(**fields)


def hf_config_dict(config: T5Config) -> dict:
  """The HF `config.json` dict of a `T5ForConditionalGeneration` equal to `config`.

  Raises:
    ValueError: `config.mlp_activations` has no HF equivalent.
  """
  acts = tuple(config.mlp_activations)
  if acts not in _ACTS_HF:
    raise ValueError(f'mlp_activations={acts} has no Hugging Face T5 equivalent; '
                     f'supported: {sorted(_ACTS_HF)}.')
  tied = bool(config.logits_via_embedding)
  return {
      'architectures': ['T5ForConditionalGeneration'], 'model_type': 't5',
      'vocab_size': config.vocab_size, 'd_model': config.emb_dim, 'd_kv': config.head_dim,
      'd_ff': config.mlp_dim, 'num_layers': config.num_encoder_layers,
      'num_decoder_layers': config.num_decoder_layers, 'num_heads': config.num_heads,
      'relative_attention_num_buckets': config.relative_attention_num_buckets,
      'relative_attention_max_distance': config.relative_attention_max_distance,
      'dropout_rate': float(config.dropout_rate), 'layer_norm_epsilon': 1e-6,
      'initializer_factor': 1.0, 'feed_forward_proj': _ACTS_HF[acts],
      'is_encoder_decoder': True, 'use_cache': True, 'pad_token_id': 0,
      'eos_token_id': 1, 'decoder_start_token_id': 0,
      # transformers < 5 reads tie_word_embeddings; 5.x reads both (see NOTES).
      'tie_word_embeddings': tied, 'scale_decoder_outputs': tied,
  }


def _load_torch_bin(path: str) -> dict[str, np.ndarray]:
  import torch
  state = torch.load(path, map_location='cpu', weights_only=True)
  return {k: _to_numpy(v) for k, v in state.items()}


def _to_numpy(v) -> np.ndarray:
  if hasattr(v, 'detach'):  # torch.Tensor
    v = v.detach().cpu()
    if v.is_floating_point():
      v = v.float()
    return v.numpy()
  return np.asarray(v)


def _load_hf_folder(folder: str) -> dict[str, np.ndarray]:
  candidates = ('model.safetensors', 'model.safetensors.index.json', 'pytorch_model.bin',
                'pytorch_model.bin.index.json')
  for name in candidates:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
      continue
    if name.endswith('.index.json'):
      with open(path) as f:
        files = sorted(set(json.load(f)['weight_map'].values()))
      state = {}
      for shard in files:
        shard_path = os.path.join(folder, shard)
        state.update(safetensors.numpy.load_file(shard_path) if shard.endswith('.safetensors')
                     else _load_torch_bin(shard_path))
      return state
    return (safetensors.numpy.load_file(path) if name.endswith('.safetensors')
            else _load_torch_bin(path))
  raise FileNotFoundError(f'No Hugging Face weights in {folder!r}; expected one of '
                          f'{list(candidates)}.')


def _infer_config(state: Mapping[str, np.ndarray]) -> T5Config:
  """A T5Config from HF weight shapes alone (T5 1.0 if `wi`, T5 1.1 if `wi_0`/`wi_1`)."""
  shared = state['shared.weight']
  vocab, d_model = shared.shape
  rel = state['encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight']
  buckets, heads = rel.shape
  q = state['encoder.block.0.layer.0.SelfAttention.q.weight']
  count = lambda stack: 1 + max(int(k.split('.')[2]) for k in state
                                if k.startswith(f'{stack}.block.'))
  gated = 'encoder.block.0.layer.1.DenseReluDense.wi_0.weight' in state
  wi = state['encoder.block.0.layer.1.DenseReluDense.' + ('wi_0' if gated else 'wi') + '.weight']
  lm_head = state.get('lm_head.weight')
  tied = lm_head is None or np.array_equal(np.asarray(lm_head), np.asarray(shared))
  return T5Config(vocab_size=vocab, emb_dim=d_model, num_heads=heads, head_dim=q.shape[0] // heads,
                  mlp_dim=wi.shape[0], num_encoder_layers=count('encoder'),
                  num_decoder_layers=count('decoder'),
                  mlp_activations=('gelu', 'linear') if gated else ('relu',),
                  logits_via_embedding=tied, relative_attention_num_buckets=buckets)


def _hf_layout(config: T5Config):
  """[(hf name, our path tuple, transpose)] for every param of `config`."""
  gated = len(config.mlp_activations) > 1
  wis = ([('wi_0', 'wi_0'), ('wi_1', 'wi_1')] if gated else [('wi', 'wi')]) + [('wo', 'wo')]
  out = [('shared.weight', ('token_embedder', 'embedding'), False)]
  for stack, n, ours in (('encoder', config.num_encoder_layers, 'encoder'),
                         ('decoder', config.num_decoder_layers, 'decoder')):
    out.append((f'{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight',
                (ours, 'relpos_bias', 'rel_embedding'), True))
    out.append((f'{stack}.final_layer_norm.weight', (ours, f'{ours}_norm', 'scale'), False))
    for i in range(n):
      hf = f'{stack}.block.{i}.layer'
      me = (ours, f'layers_{i}')
      if stack == 'encoder':
        blocks = [('0', 'SelfAttention', 'attention', 'pre_attention_layer_norm')]
        mlp_idx, mlp_norm = '1', 'pre_mlp_layer_norm'
      else:
        blocks = [('0', 'SelfAttention', 'self_attention', 'pre_self_attention_layer_norm'),
                  ('1', 'EncDecAttention', 'encoder_decoder_attention',
                   'pre_cross_attention_layer_norm')]
        mlp_idx, mlp_norm = '2', 'pre_mlp_layer_norm'
      for idx, hf_attn, attn, norm in blocks:
        for proj, our_proj in (('q', 'query'), ('k', 'key'), ('v', 'value'), ('o', 'out')):
          out.append((f'{hf}.{idx}.{hf_attn}.{proj}.weight', me + (attn, our_proj, 'kernel'),
                      True))
        out.append((f'{hf}.{idx}.layer_norm.weight', me + (norm, 'scale'), False))
      for hf_w, our_w in wis:
        out.append((f'{hf}.{mlp_idx}.DenseReluDense.{hf_w}.weight',
                    me + ('mlp', our_w, 'kernel'), True))
      out.append((f'{hf}.{mlp_idx}.layer_norm.weight', me + (mlp_norm, 'scale'), False))
  if not config.logits_via_embedding:
    out.append(('lm_head.weight', ('decoder', 'logits_dense', 'kernel'), True))
  return out


_HF_IGNORED = re.compile(r'(encoder|decoder)\.embed_tokens\.weight|'
                         r'decoder\.block\.0\.layer\.1\.EncDecAttention\.relative_attention_bias'
                         r'\.weight')


def import_hf_t5(path_or_state_dict, config=None, dtype=jnp.float32) -> PyTree:
  """Maps a Hugging Face T5 checkpoint to this package's (T5X's) param tree.

  The inverse of `export_hf_t5` (cf. T5X's `checkpoint_importer`, which maps
  Mesh-TF checkpoints the same way): Linear weights `[out, in]` become kernels
  `[in, out]`; `relative_attention_bias [buckets, heads]` (HF keeps it in block 0
  of each stack) becomes `relpos_bias/rel_embedding [heads, buckets]`;
  `shared` is `token_embedder/embedding`; for an untied model (T5 1.1)
  `lm_head [vocab, d_model]` becomes `decoder/logits_dense/kernel [d_model, vocab]`.

  Args:
    path_or_state_dict: an HF model folder (`model.safetensors`, sharded
      safetensors with `model.safetensors.index.json`, or `pytorch_model.bin`;
      `config.json` beside it), or a state dict name → torch tensor / array.
    config: our `T5Config`, or an HF config (dict, `transformers.T5Config`, path
      to config.json). Default: the folder's config.json, else inferred from the
      weight shapes (gated → gated-gelu, tied iff `lm_head` is absent or equals
      `shared`).
    dtype: dtype of the returned arrays (float32 by default; params are float32
      in this package).
  Returns:
    Params (nested dict of numpy arrays) that `t5.check_params(params, config)`
    accepts.
  Raises:
    FileNotFoundError: a folder without weights or config.
    ValueError: a missing or unused weight, a shape the config does not expect,
      or an `lm_head` that differs from `shared` under a tied config.
  Note:
    An untied config with no `lm_head` weight (what transformers 5.x saves when
    it tied the head of a T5 1.1 built from a config) maps `shared` to
    `logits_dense`, reproducing what transformers computes (unscaled, tied).
  """
  folder = None
  if isinstance(path_or_state_dict, (str, os.PathLike)):
    folder = os.fspath(path_or_state_dict)
    if not os.path.isdir(folder):
      raise FileNotFoundError(f'No Hugging Face T5 folder at {folder!r} (expected a folder '
                              'with model.safetensors or pytorch_model.bin and config.json).')
    state = _load_hf_folder(folder)
  else:
    state = {k: _to_numpy(v) for k, v in dict(path_or_state_dict).items()}
  if 'shared.weight' not in state and 'encoder.embed_tokens.weight' in state:
    state['shared.weight'] = state['encoder.embed_tokens.weight']

  if config is None:
    config = (t5_config_from_hf(folder) if folder is not None
              and os.path.isfile(os.path.join(folder, 'config.json')) else _infer_config(state))
  elif not isinstance(config, T5Config):
    config = t5_config_from_hf(config)

  if 'lm_head.weight' not in state and not config.logits_via_embedding:
    warnings.warn('Untied T5 config but the checkpoint has no lm_head.weight: using the '
                  'shared embedding as decoder/logits_dense (what transformers 5.x does).')
    state['lm_head.weight'] = state['shared.weight']
  if config.logits_via_embedding and 'lm_head.weight' in state and not np.array_equal(
      np.asarray(state['lm_head.weight']), np.asarray(state['shared.weight'])):
    raise ValueError('The config ties the output layer (T5 1.0, logits_via_embedding=True) but '
                     'the checkpoint has an lm_head.weight that differs from shared.weight; '
                     'use an untied (T5 1.1) config.')

  used = {'lm_head.weight'}
  items = []
  for hf_name, path, transpose in _hf_layout(config):
    if hf_name not in state:
      raise ValueError(f'The Hugging Face checkpoint lacks {hf_name} (needed for '
                       f'{"/".join(path)}); does the config match the weights?')
    used.add(hf_name)
    value = np.asarray(state[hf_name])
    if transpose:
      value = value.T
    items.append((path, np.ascontiguousarray(value.astype(dtype))))
  unused = sorted(k for k in state if k not in used and not _HF_IGNORED.fullmatch(k))
  if unused:
    raise ValueError(f'The Hugging Face checkpoint has weights this T5Config does not use, '
                     f'e.g. {unused[0]} {tuple(np.shape(state[unused[0]]))}; check '
                     'num_layers / feed_forward_proj.')
  params = flax.traverse_util.unflatten_dict(dict(items))
  t5.check_params(params, config)
  return params


def load_hf_t5(folder: str | os.PathLike, dtype=jnp.float32, **config_overrides
               ) -> tuple[PyTree, T5Config]:
  """`(params, config)` of an HF T5 folder (`import_hf_t5` + `t5_config_from_hf`)."""
  config = t5_config_from_hf(folder, **config_overrides)
  return import_hf_t5(folder, config, dtype=dtype), config


def export_hf_t5(params: PyTree, config: T5Config, out_dir: str | os.PathLike,
                 dtype=np.float32) -> str:
  """Writes params as a folder `T5ForConditionalGeneration.from_pretrained` loads.

  Inverse of `import_hf_t5`: `model.safetensors` (HF names, Linear weights
  `[out, in]`, `shared.weight`, plus `lm_head.weight` for untied configs) and
  `config.json` (`hf_config_dict(config)`, with `decoder_start_token_id` 0 for
  generation). The HF model's logits equal `Transformer(config)`'s.

  Args:
    params: params of `Transformer(config)`.
    config: their config.
    out_dir: folder to write (created; existing files of the same names replaced).
    dtype: dtype of the stored weights (float32 default; `jnp.bfloat16` works).
  Returns:
    `out_dir` as a string.
  Raises:
    ValueError: params do not match `config`, or activations HF lacks.
  """
  t5.check_params(params, config)
  hf_cfg = hf_config_dict(config)
  flat = {tuple(str(getattr(k, 'key', k)) for k in p): v
          for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}
  tensors = {}
  for hf_name, path, transpose in _hf_layout(config):
    value = np.asarray(jax.device_get(flat[path]))
    if transpose:
      value = value.T
    tensors[hf_name] = np.ascontiguousarray(value.astype(dtype))
  out_dir = os.fspath(out_dir)
  os.makedirs(out_dir, exist_ok=True)
  hf_cfg['torch_dtype'] = hf_cfg['dtype'] = jnp.dtype(dtype).name
  safetensors.numpy.save_file(tensors, os.path.join(out_dir, 'model.safetensors'),
                              metadata={'format': 'pt'})  # transformers expects 'pt'
  with open(os.path.join(out_dir, 'config.json'), 'w') as f:
    json.dump(hf_cfg, f, indent=2, sort_keys=True)
  with open(os.path.join(out_dir, 'generation_config.json'), 'w') as f:
    json.dump({'decoder_start_token_id': 0, 'eos_token_id': 1, 'pad_token_id': 0}, f, indent=2)
  return out_dir
