"""Accounting of a checkpoint's params against a model config: every array is named.

`check_against_config` compares the arrays found under a checkpoint's `target`
with the tree `Transformer(config)` expects and, unlike a first-error check,
lists *every* missing, unexpected and mis-shaped array (T5X names, '/'-joined as
T5X's `state_utils.flatten_state_dict(sep='/')` writes them), with a hint on the
config field that explains them.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable

from specdec_jax.models import family

_SHOWN = 20  # Items listed per category before "... and N more".
_KEYSTR_PART = re.compile(r"\['([^']*)'\]")


@functools.lru_cache(maxsize=32)
def expected_shapes(config) -> dict[tuple[str, ...], tuple[int, ...]]:
  """`{path tuple: shape}` of every param the config's model has (either family)."""
  return {tuple(_KEYSTR_PART.findall(k)): tuple(v)
          for k, v in family.param_shapes(config).items()}


ARRAY_OF_UNKNOWN_SHAPE = object()  # A leaf known to be an array whose shape is not read yet.


def leaf_info(leaf) -> tuple[int, ...] | str | None:
  """The shape of an array-like leaf, None if unknown yet, else what the leaf is."""
  if leaf is ARRAY_OF_UNKNOWN_SHAPE:
    return None
  if isinstance(leaf, dict) and not leaf:
    return 'an empty node'
  if hasattr(leaf, 'shape') and hasattr(leaf, 'dtype'):
    return tuple(int(d) for d in leaf.shape)
  return f'a {type(leaf).__name__}, not an array'


def name(path: Iterable[str]) -> str:
  return '/'.join(str(p) for p in path)


def listed(label: str, lines: list[str]) -> list[str]:
  """`  label (N):` and up to `_SHOWN` indented lines, then `... and M more` (error lists)."""
  if not lines:
    return []
  out = [f'  {label} ({len(lines)}):'] + [f'    {line}' for line in lines[:_SHOWN]]
  if len(lines) > _SHOWN:
    out.append(f'    ... and {len(lines) - _SHOWN} more')
  return out


def _hints(missing, unexpected, got) -> list[str]:
  hints = []
  head = ('decoder', 'logits_dense', 'kernel')
  if head in unexpected:
    hints.append('the checkpoint has a separate output layer decoder/logits_dense (T5 1.1): '
                 'use logits_via_embedding=False')
  if head in missing:
    hints.append('the checkpoint has no decoder/logits_dense: it ties the output layer to the '
                 'embedding (T5 1.0), use logits_via_embedding=True')
  present_layers = {p[:2] for p in got}
  wis = ('wi', 'wi_0', 'wi_1')
  if any(len(p) >= 3 and p[-3] == 'mlp' and p[-2] in wis for p in unexpected) or any(
      len(p) >= 3 and p[-3] == 'mlp' and p[-2] in wis and p[:2] in present_layers
      for p in missing):
    hints.append("the MLP differs: 'wi' is a one-activation MLP (mlp_activations=('relu',)), "
                 "'wi_0'/'wi_1' a gated one (e.g. ('gelu', 'linear'))")
  layers = {p[0] for p in list(missing) + list(unexpected)
            if len(p) >= 2 and p[1].startswith('layers_')}
  if layers:
    hints.append('the number of layers differs (num_encoder_layers / num_decoder_layers)')
  return hints


def check_against_config(found: Iterable[tuple[tuple[str, ...], Any]], config,
                         where: str) -> None:
  """Checks a checkpoint's `target` leaves against `Transformer(config)`'s params.

  Args:
    found: `(path tuple, leaf)` for every leaf under `target`; a leaf is an array,
      anything with `.shape`/`.dtype` (e.g. `jax.ShapeDtypeStruct`),
      `ARRAY_OF_UNKNOWN_SHAPE` (only its presence is checked), or another object
      (reported as not an array). An empty root (`((), {})`) means no params.
    config: the model config the params must fit.
    where: the checkpoint location, for the message.
  Raises:
    ValueError: listing every missing param (with the expected shape), every
      unexpected array (with its shape), every non-array leaf, and every shape
      mismatch as 'has shape <in checkpoint> but the T5Config expects <shape>',
      followed by hints on the config fields that explain them.
  """
  expected = expected_shapes(config)
  got = {tuple(path): leaf_info(leaf) for path, leaf in found
         if path or not (isinstance(leaf, dict) and not leaf)}
  missing = sorted(p for p in expected if p not in got)
  unexpected = sorted(p for p in got if p not in expected)
  not_arrays = sorted(p for p in got if p in expected and isinstance(got[p], str))
  mismatched = sorted(p for p in got if p in expected and isinstance(got[p], tuple)
                      and got[p] != expected[p])
  if not (missing or unexpected or not_arrays or mismatched):
    return
  count = len(missing) + len(unexpected) + len(not_arrays) + len(mismatched)
  kind = type(config).__name__  # T5Config or DecoderOnlyConfig
  lines = [f'The params (`target`) of the checkpoint at {where!r} do not match the {kind} '
           f'({count} problem{"s" * (count != 1)}):']
  lines += listed('missing', [f'{name(p)} (expected shape {expected[p]})' for p in missing])
  lines += listed('unexpected', [
      f'{name(p)} ({got[p]})' if isinstance(got[p], str) else
      f'{name(p)} (shape {got[p]})' if got[p] is not None else name(p) for p in unexpected])
  lines += listed('not arrays', [f'{name(p)} is {got[p]}' for p in not_arrays])
  lines += listed('shape', [f'{name(p)} has shape {got[p]} but the {kind} expects '
                             f'{expected[p]}' for p in mismatched])
  hints = _hints(set(missing), set(unexpected), got)
  if mismatched:
    hints.append('load it with the config it was trained with (vocab_size, emb_dim, '
                 'num_heads, head_dim, mlp_dim)')
  lines += [f'Hint: {h}.' for h in hints]
  raise ValueError('\n'.join(lines))
