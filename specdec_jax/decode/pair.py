"""The decode job's model pair: a pair folder and/or explicit bindings → `PairSpec`.

A pair folder holds `pair.json` (both model configs: T5Configs, or decoder-only configs
with `"family": "decoder_only"`, then also `inputs_bidirectional_attention`), `target/` and `draft/` T5X
checkpoints and `vocab/*.model`; explicit `decode.*` bindings win over it. (A T5X
model gin is the other way to describe the pair: `specdec_jax.decode.t5x_gin`.)
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Optional

from specdec_jax.util import flags
from specdec_jax.util import paths
from specdec_jax.models import config as config_lib
from specdec_jax.models.config import T5Config

DEMO_PAIR = 'demo_ende'

resolve_path = flags.resolve_path
_is_url = flags._is_url  # pylint: disable=protected-access


class DemoPairMissing(FileNotFoundError):
  """The default demo pair (specdec_jax/assets/demo_ende) is not shipped / trained yet."""


@dataclasses.dataclass(frozen=True)
class PairSpec:
  """What the job needs to know about the model pair (all paths resolved).

  `vocabulary` / `input_vocabulary` are set when the description already holds the
  vocabulary objects (a T5X model gin); else the job loads `vocab_path`.
  `draft_dtype`: a dtype to cast the draft's params to at load (T5X's
  `draft_params_dtype`), overriding `decode.checkpoint_dtype` for the draft.
  """
  name: str
  target_config: Optional[T5Config]
  draft_config: Optional[T5Config]
  target_checkpoint: Optional[str]
  draft_checkpoint: Optional[str]
  vocab_path: Optional[str]
  vocabulary: Any = None
  input_vocabulary: Any = None
  eos_id: Optional[int] = None
  draft_dtype: Any = None
  input_prefix: Optional[str] = None  # pair.json's `input_prefix` (the task prefix)
  folder: Optional[str] = None  # the pair folder (n-gram tables: `bigram.npz`, ...)
  # Decoder-only pairs: prefix LM (pair.json's `inputs_bidirectional_attention`, T5X's
  # `DecoderOnlyModel` argument); None for an encoder–decoder pair or when unset.
  inputs_bidirectional_attention: Optional[bool] = None
  # Ids neither model may emit (pair.json's `suppress_ids`; `decode.suppress_ids='pair'`).
  suppress_ids: tuple = ()


def parse_suppress_ids(value, where: str) -> tuple[int, ...]:
  """Token ids from a list of ints and inclusive `[first, last]` ranges, as pair.json and
  `decode.suppress_ids` write them (`[2, [8000, 8191]]`: the unknown piece, the sentinels
  and the padding rows of the demo vocabulary).

  Returns:
    the ids, sorted and distinct, as a tuple.
  Raises:
    ValueError: naming `where`, for anything else (a negative id, a range whose first id
      is above its last, a non-integer).
  """
  if value is None:
    return ()
  if isinstance(value, (str, bytes, int)) or not hasattr(value, '__iter__'):
    raise ValueError(f'{where} must be a list of token ids and [first, last] ranges, e.g. '
                     f'[2, [8000, 8191]], got {value!r}.')
  ids = set()
  for item in value:
    if isinstance(item, (list, tuple)):
      ok = (len(item) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                   and x >= 0 for x in item) and item[0] <= item[1])
      if not ok:
        raise ValueError(f'{where}: {item!r} is not a range [first, last] of ids with '
                         '0 <= first <= last.')
      ids.update(range(item[0], item[1] + 1))
    elif isinstance(item, int) and not isinstance(item, bool) and item >= 0:
      ids.add(item)
    else:
      raise ValueError(f'{where}: {item!r} is not a token id (an int >= 0) or a '
                       '[first, last] range.')
  return tuple(sorted(ids))


def compact_ids(ids) -> list:
  """`ids` (sorted) as pair.json writes them: runs of 3 or more as `[first, last]`."""
  out, ids = [], list(ids)
  i = 0
  while i < len(ids):
    j = i
    while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
      j += 1
    out.extend([[ids[i], ids[j]]] if j - i >= 2 else ids[i:j + 1])
    i = j + 1
  return out


def _as_config(value, what: str):
  if value is None or isinstance(value, (T5Config, config_lib.DecoderOnlyConfig)):
    return value
  if isinstance(value, str):
    try:
      return config_lib.preset(value)
    except KeyError as e:
      raise ValueError(f'{what}: {e.args[0]}') from None
  if isinstance(value, dict):
    return _config_from_dict(value, what)
  raise ValueError(f'{what} must be a T5Config (e.g. @target/network.T5Config()), a preset '
                   f'name or None, got {value!r}.')


_config_from_dict = config_lib.from_dict


def _pair_json_config(pair: dict, role: str, where: str) -> Optional[T5Config]:
  """The T5Config of `role` ('target' / 'draft') in a pair.json, whatever its nesting."""
  candidates = [pair.get(role), pair.get(f'{role}_config'),
                (pair.get('configs') or {}).get(role)]
  for c in candidates:
    if isinstance(c, dict):
      for key in ('config', 't5_config'):
        if isinstance(c.get(key), dict):
          c = c[key]
      if 'emb_dim' in c:
        return _config_from_dict(c, f'{where} [{role}]')
  return None


def _pair_dir_location(pair_dir: str) -> pathlib.Path:
  p = pathlib.Path(pair_dir).expanduser()
  for cand in (p, paths.REPO_ROOT / p, paths.ASSETS_DIR / p):
    if cand.is_dir():
      return cand
  return paths.ASSETS_DIR / p if not p.is_absolute() and len(p.parts) == 1 else p


def resolve_pair(pair_dir: Optional[str], *, target_config=None, draft_config=None,
                 target_checkpoint=None, draft_checkpoint=None, vocab_path=None,
                 need_draft: bool = True) -> PairSpec:
  """Merges a pair folder (`pair.json`, `target/`, `draft/`, `vocab/`) with explicit bindings.

  Explicit values win. A pair folder that is missing or lacks pieces the bindings
  do not supply raises `DemoPairMissing` (for the shipped demo pair) or
  `FileNotFoundError`.
  """
  target_config = _as_config(target_config, 'decode.target_config')
  draft_config = _as_config(draft_config, 'decode.draft_config')
  name = 'custom'
  input_prefix = folder = bidirectional = None
  suppress_ids = ()
  if pair_dir:
    loc = _pair_dir_location(pair_dir)
    name = loc.name
    is_demo = loc.resolve() == (paths.ASSETS_DIR / DEMO_PAIR).resolve()
    pair_json = loc / 'pair.json'
    pair = {}
    missing = []
    if pair_json.is_file():
      try:
        pair = json.loads(pair_json.read_text())
      except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f'Cannot read {pair_json}: {e}') from e
    needs = {'pair.json': target_config is None or (need_draft and draft_config is None),
             'target/': target_checkpoint is None,
             'draft/': need_draft and draft_checkpoint is None,
             'vocab/*.model': vocab_path is None}
    if needs['pair.json'] and not pair_json.is_file():
      missing.append('pair.json')
    if needs['target/'] and not (loc / 'target').is_dir():
      missing.append('target/')
    if needs['draft/'] and not (loc / 'draft').is_dir():
      missing.append('draft/')
    if needs['vocab/*.model'] and not list((loc / 'vocab').glob('*.model')):
      missing.append('vocab/*.model')
    if missing:
      what = (f'The demo model pair is not available: {loc} lacks {", ".join(missing)}. '
              'It ships with the package once trained (see the project README); until then '
              'run with another pair, e.g. --gin_file=configs/pairs/t5_1_1_small_to_xxl.gin '
              "--gin.decode.target_checkpoint=\"'...'\" --gin.decode.draft_checkpoint=\"'...'\""
              if is_demo else
              f'Model pair folder {str(loc)!r} (decode.pair_dir) lacks {", ".join(missing)}.')
      raise (DemoPairMissing if is_demo else FileNotFoundError)(what)
    if target_config is None:
      target_config = _pair_json_config(pair, 'target', str(pair_json))
    if draft_config is None:
      draft_config = _pair_json_config(pair, 'draft', str(pair_json))
    if target_config is None or (need_draft and draft_config is None):
      raise ValueError(f'{pair_json} does not hold a T5Config for the '
                       f'{"target" if target_config is None else "draft"} model '
                       '(expected {"target": {...T5Config fields...}, "draft": {...}}).')
    if target_checkpoint is None:
      target_checkpoint = str(loc / 'target')
    if draft_checkpoint is None and need_draft:
      draft_checkpoint = str(loc / 'draft')
    if vocab_path is None:
      vocab_path = str(loc / 'vocab')
    input_prefix = pair.get('input_prefix')
    bidirectional = pair.get('inputs_bidirectional_attention')
    if bidirectional is not None and not isinstance(bidirectional, bool):
      raise ValueError(f'{pair_json}: inputs_bidirectional_attention must be true or false, '
                       f'got {bidirectional!r}.')
    folder = str(loc)
    suppress_ids = parse_suppress_ids(pair.get('suppress_ids'), f'{pair_json}: suppress_ids')
  return PairSpec(name, target_config, draft_config, resolve_path(target_checkpoint),
                  resolve_path(draft_checkpoint), resolve_path(vocab_path),
                  input_prefix=input_prefix, folder=folder,
                  inputs_bidirectional_attention=bidirectional, suppress_ids=suppress_ids)


def load_vocabulary(path: Optional[str], extra_ids: int = 100):
  """`vocabulary.load_vocabulary` with errors naming `decode.vocab_path`."""
  from specdec_jax.text import vocabulary  # pylint: disable=g-import-not-at-top
  return vocabulary.load_vocabulary(path, extra_ids, binding='decode.vocab_path')


def check_checkpoint(path: Optional[str], role: str, binding: Optional[str] = None) -> None:
  """Raises a clear error unless `path` names a T5X checkpoint (nothing is read yet).

  Args:
    path: the checkpoint path.
    role: 'target' / 'draft'.
    binding: what the user binds to set it (default `decode.<role>_checkpoint`).
  """
  binding = binding or f'decode.{role}_checkpoint'
  if path is None:
    raise ValueError(f"No {role} checkpoint: bind {binding}='/path/to/"
                     "checkpoint_<step>' (a T5X checkpoint folder, or a model folder holding "
                     'checkpoint_<step>/ folders; gs:// paths work for the T5X layouts).')
  import warnings  # pylint: disable=g-import-not-at-top
  from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
  try:
    with warnings.catch_warnings():  # a skipped step is warned about once, at load
      warnings.simplefilter('ignore')
      checkpoints.find_checkpoint(path)
  except FileNotFoundError as e:
    raise FileNotFoundError(f'{binding}: {e}') from e
  except ValueError as e:
    raise ValueError(f'{binding}: {e}') from e


_check_checkpoint = check_checkpoint


PARAM_DTYPES = ('float32', 'bfloat16', 'float16', 'float64')


def _dtype(name, what: str = 'decode.checkpoint_dtype'):
  """`jnp.dtype(name)`, None for None; ValueError naming `what` for an unknown or
  non-floating dtype."""
  if name is None:
    return None
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  try:
    dtype = jnp.dtype(name)
  except TypeError as e:
    raise ValueError(f'{what}: unknown dtype {name!r}.') from e
  if not jnp.issubdtype(dtype, jnp.floating) or dtype.name not in PARAM_DTYPES:
    # int8 params decode to empty strings; float8 casts lose most of every weight
    raise ValueError(f"{what} must be one of {PARAM_DTYPES}, got {name!r}: params cast to it "
                     'would not be the model any more.')
  return dtype
