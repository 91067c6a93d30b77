"""The Hugging Face T5 key ↔ T5X param mapping, accounting for every tensor and param.

Import (`account_import`): each tensor of the file is placed in the T5X tree, is
an identical duplicate of one that is, or is one transformers itself ignores
(reported); each param of the tree is filled from a tensor of the file, or (only
where transformers does the same, and reported) from another param. Anything
else is an error that names every key concerned: tensors the tree has no place
for, params the file lacks, shapes that differ from the config's, and tensors
the tree cannot hold together (T5X has one token embedding: two different
tables, e.g. `encoder.embed_tokens.weight` ≠ `decoder.embed_tokens.weight`, are
refused, with what differs).

Export (`account_export`): every param is written under exactly one HF key and
nothing else is written.

The mapping mirrors T5X's `checkpoint_importer` (Mesh-TF → T5X): Linear weights
`[out, in]` are kernels `[in, out]`; `relative_attention_bias [buckets, heads]`
(block 0 of each stack) is `relpos_bias/rel_embedding [heads, buckets]`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from specdec_jax.checkpoints.config_check import expected_shapes, listed
from specdec_jax.models.config import T5Config

Path = tuple  # A T5X param path, e.g. ('decoder', 'logits_dense', 'kernel').

EMBEDDING = ('token_embedder', 'embedding')
HEAD = ('decoder', 'logits_dense', 'kernel')
EMBEDDING_KEYS = ('shared.weight', 'encoder.embed_tokens.weight', 'decoder.embed_tokens.weight')
HEAD_KEY = 'lm_head.weight'
# Tensors transformers' T5ForConditionalGeneration itself drops on load
# (`_keys_to_ignore_on_load_unexpected`); T5X has no place for them either.
HF_IGNORED = {
    'decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight':
        "unused: transformers' T5 ignores it on load and T5X's cross-attention has no "
        'position bias',
}


def name(path: Path) -> str:
  return '/'.join(path)


def block_layout(config: T5Config) -> list[tuple[str, Path, bool]]:
  """[(HF key, T5X path, transpose)] of every param but the embedding and the head."""
  gated = len(config.mlp_activations) > 1
  wis = ([('wi_0', 'wi_0'), ('wi_1', 'wi_1')] if gated else [('wi', 'wi')]) + [('wo', 'wo')]
  out = []
  for stack, n in (('encoder', config.num_encoder_layers), ('decoder', config.num_decoder_layers)):
    out.append((f'{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight',
                (stack, 'relpos_bias', 'rel_embedding'), True))
    out.append((f'{stack}.final_layer_norm.weight', (stack, f'{stack}_norm', 'scale'), False))
    for i in range(n):
      hf, me = f'{stack}.block.{i}.layer', (stack, f'layers_{i}')
      if stack == 'encoder':
        blocks = [('0', 'SelfAttention', 'attention', 'pre_attention_layer_norm')]
        mlp_idx = '1'
      else:
        blocks = [('0', 'SelfAttention', 'self_attention', 'pre_self_attention_layer_norm'),
                  ('1', 'EncDecAttention', 'encoder_decoder_attention',
                   'pre_cross_attention_layer_norm')]
        mlp_idx = '2'
      for idx, hf_attn, attn, norm in blocks:
        for proj, ours in (('q', 'query'), ('k', 'key'), ('v', 'value'), ('o', 'out')):
          out.append((f'{hf}.{idx}.{hf_attn}.{proj}.weight', me + (attn, ours, 'kernel'), True))
        out.append((f'{hf}.{idx}.layer_norm.weight', me + (norm, 'scale'), False))
      for hf_w, our_w in wis:
        out.append((f'{hf}.{mlp_idx}.DenseReluDense.{hf_w}.weight', me + ('mlp', our_w, 'kernel'),
                    True))
      out.append((f'{hf}.{mlp_idx}.layer_norm.weight', me + ('pre_mlp_layer_norm', 'scale'),
                  False))
  return out


def export_layout(config: T5Config) -> list[tuple[str, Path, bool]]:
  """[(HF key, T5X path, transpose)] of every param, as `export_hf_t5` writes them."""
  out = [('shared.weight', EMBEDDING, False)] + block_layout(config)
  if not config.logits_via_embedding:
    out.append((HEAD_KEY, HEAD, True))
  return out


@dataclasses.dataclass
class HFImportAccounting:
  """Where every tensor of an HF checkpoint went, and where every param came from.

  Attributes:
    placed: HF key → the T5X param ('/'-joined path) it fills.
    duplicates: HF key → the placed HF key it is identical to (e.g. the
      `encoder.embed_tokens.weight` copy of `shared.weight` in a `.bin`).
    ignored: HF key → why it is not imported (only tensors transformers ignores).
    filled: T5X param → how it was filled when no tensor of its own was in the
      file (only `decoder/logits_dense/kernel` from the embedding when the HF
      config ties them, as transformers does).
  """
  placed: dict[str, str] = dataclasses.field(default_factory=dict)
  duplicates: dict[str, str] = dataclasses.field(default_factory=dict)
  ignored: dict[str, str] = dataclasses.field(default_factory=dict)
  filled: dict[str, str] = dataclasses.field(default_factory=dict)


def _equal(a, b) -> bool:
  return np.array_equal(np.asarray(a, np.float64), np.asarray(b, np.float64), equal_nan=True)


def _difference(a, b) -> str:
  """What differs between two tensors, in words."""
  if np.shape(a) != np.shape(b):
    return f'shapes {tuple(np.shape(a))} and {tuple(np.shape(b))}'
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.ndim >= 2:
    rows = np.flatnonzero(np.any(a != b, axis=tuple(range(1, a.ndim))))
    where = f'{rows.size} of {a.shape[0]} rows differ (first: row {rows[0]})'
  else:
    where = f'{int(np.sum(a != b))} of {a.size} values differ'
  return f'same shape {a.shape}, {where}, max |difference| {np.max(np.abs(a - b)):.4g}'


def _shape(x) -> tuple[int, ...]:
  return tuple(int(d) for d in np.shape(x))


class _Problems:
  """Collects every error of a mapping, raised together."""

  def __init__(self):
    self.sections: dict[str, list[str]] = {}
    self.hints: list[str] = []

  def add(self, section: str, line: str):
    self.sections.setdefault(section, []).append(line)

  def raise_if_any(self, title: str):
    if not self.sections:
      return
    count = sum(len(v) for v in self.sections.values())
    lines = [f'{title} ({count} problem{"s" * (count != 1)}):']
    for section, items in self.sections.items():
      lines += listed(section, items)
    lines += [f'Hint: {h}.' for h in dict.fromkeys(self.hints)]
    raise ValueError('\n'.join(lines))


def _layer_hint(config: T5Config, keys) -> str | None:
  counts = {}
  for stack in ('encoder', 'decoder'):
    blocks = {int(k.split('.')[2]) for k in keys if k.startswith(f'{stack}.block.')
              and k.split('.')[2].isdigit()}
    counts[stack] = 1 + max(blocks) if blocks else 0
  if (counts['encoder'], counts['decoder']) != (config.num_encoder_layers,
                                                config.num_decoder_layers):
    return (f'the file has {counts["encoder"]} encoder and {counts["decoder"]} decoder blocks, '
            f'the config {config.num_encoder_layers} and {config.num_decoder_layers} '
            '(num_layers / num_decoder_layers)')
  return None


def account_import(tensors: Mapping[str, Any], config: T5Config, *,
                   head_tied: bool | None = None
                   ) -> tuple[HFImportAccounting, list[tuple[Path, Any, bool]]]:
  """Maps HF tensors onto the T5X tree of `config`, accounting for every one.

  Args:
    tensors: HF key → array (any array type `np.asarray` takes).
    config: the T5Config the tree must fit.
    head_tied: whether the HF config ties `lm_head` to the embedding
      (`tie_word_embeddings`); None when unknown. Only consulted for an untied
      (T5 1.1) config whose file has no `lm_head.weight`: True fills
      `decoder/logits_dense` from the embedding (what transformers computes),
      otherwise the missing head is an error.
  Returns:
    `(accounting, [(T5X path, HF array, transpose)])` with one entry per param.
  Raises:
    ValueError: listing every unknown tensor (key and shape), every missing
      param (T5X path and the HF key(s) that would fill it), every shape that
      differs from the config's, and every pair of tensors the tree cannot hold
      together (both keys and what differs), with hints.
  """
  shapes = expected_shapes(config)
  acc, items, problems = HFImportAccounting(), [], _Problems()
  reported: set[str] = set()  # T5X params reported missing.
  conflicting: set[str] = set()  # HF keys reported as not holdable with another.

  def missing(path: Path, source: str):
    reported.add(name(path))
    problems.add('missing', f'{name(path)} (from {source})')

  def place(key: str, path: Path, transpose: bool):
    value = tensors[key]
    want = shapes[path][::-1] if transpose else shapes[path]
    if _shape(value) != want:
      problems.add('shape', f'{key} has shape {_shape(value)} but the T5Config expects '
                            f'{want} (for {name(path)})')
      problems.hints.append('load it with the config it was saved with (vocab_size, d_model, '
                            'num_heads, d_kv, d_ff)')
    acc.placed[key] = name(path)
    items.append((path, value, transpose))

  # The one token embedding: shared / encoder / decoder tables (and, for a tied
  # T5 1.0 config, lm_head) must agree.
  group = EMBEDDING_KEYS + ((HEAD_KEY,) if config.logits_via_embedding else ())
  present = [k for k in group if k in tensors]
  if not present:
    missing(EMBEDDING, ' or '.join(EMBEDDING_KEYS))
  else:
    first = present[0]
    place(first, EMBEDDING, False)
    for key in present[1:]:
      if _equal(tensors[key], tensors[first]):
        acc.duplicates[key] = first
        continue
      problems.add('cannot be held together',
                   f'{first} and {key} differ ({_difference(tensors[first], tensors[key])})')
      conflicting.add(key)
      if key == HEAD_KEY:
        problems.hints.append('the config ties the output layer to the embedding (T5 1.0, '
                              'logits_via_embedding=True) but the file has its own lm_head: '
                              'use an untied (T5 1.1) config')
      else:
        problems.hints.append(
            f"T5X's tree has one token embedding ({name(EMBEDDING)}) for the encoder and the "
            'decoder; a checkpoint with two different tables is a model this T5 cannot '
            'represent, and importing either table alone would silently change it')

  # The separate output layer of an untied (T5 1.1) config.
  if not config.logits_via_embedding and HEAD_KEY in tensors:
    place(HEAD_KEY, HEAD, True)
  elif not config.logits_via_embedding and head_tied and present:
    acc.filled[name(HEAD)] = (f'{present[0]} (transposed): the HF config has '
                              'tie_word_embeddings=true, so transformers uses the embedding as '
                              'lm_head')
    items.append((HEAD, tensors[present[0]], True))
  elif not config.logits_via_embedding:
    missing(HEAD, HEAD_KEY)
    problems.hints.append('an untied (T5 1.1) config needs lm_head.weight; if the head is the '
                          'embedding, the HF config says so with tie_word_embeddings: true')

  # Everything else, one key per param.
  for key, path, transpose in block_layout(config):
    if key in tensors:
      place(key, path, transpose)
    else:
      missing(path, key)

  covered = set(acc.placed.values()) | set(acc.filled) | reported
  for path in sorted(p for p in shapes if name(p) not in covered):  # Layout gaps, if any.
    missing(path, 'no Hugging Face key maps to it')

  accounted = set(acc.placed) | set(acc.duplicates) | conflicting
  for key in sorted(k for k in tensors if k not in accounted):
    if key in HF_IGNORED:
      acc.ignored[key] = HF_IGNORED[key]
    else:
      problems.add('unknown (no place in the T5X tree)', f'{key} (shape {_shape(tensors[key])})')

  if 'missing' in problems.sections or 'unknown (no place in the T5X tree)' in problems.sections:
    hint = _layer_hint(config, tensors)
    if hint:
      problems.hints.append(hint)
    gated = any('.wi_0.' in k or '.wi_1.' in k for k in tensors)
    if gated != (len(config.mlp_activations) > 1):
      kind = 'gated (wi_0/wi_1)' if gated else 'not gated (wi)'
      problems.hints.append(f"the file's MLP is {kind} but the config has "
                            f'mlp_activations={config.mlp_activations} (feed_forward_proj)')
  problems.raise_if_any('The Hugging Face T5 checkpoint does not map onto this T5Config')
  return acc, items


def account_export(flat_params: Mapping[Path, Any], config: T5Config
                   ) -> list[tuple[str, Path, bool]]:
  """The (HF key, param path, transpose) to write: every param once, nothing else.

  Raises:
    ValueError: listing every param the config has but `flat_params` lacks (with
      its HF key), every param no HF key holds, every non-array leaf and every
      shape that differs from the config's.
  """
  shapes, problems = expected_shapes(config), _Problems()
  layout = export_layout(config)
  by_path = {path: key for key, path, _ in layout}
  assert set(by_path) == set(shapes), sorted(set(by_path) ^ set(shapes))
  for key, path, _ in layout:
    if path not in flat_params:
      problems.add('missing', f'{name(path)} (for {key})')
  for path in sorted(flat_params):
    value = flat_params[path]
    if not hasattr(value, 'shape'):
      problems.add('not arrays', f'{name(path)} is a {type(value).__name__}')
    elif path not in by_path:
      problems.add('unexpected (no Hugging Face key)', f'{name(path)} (shape {_shape(value)})')
    elif _shape(value) != shapes[path]:
      problems.add('shape', f'{name(path)} has shape {_shape(value)} but the T5Config expects '
                            f'{shapes[path]}')
  if problems.sections:
    problems.hints.append('export params with the T5Config they were trained with')
  problems.raise_if_any('The params do not map onto a Hugging Face T5 of this T5Config')
  return layout
