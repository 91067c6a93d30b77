"""A T5X model gin as the decode job's model description; every binding must be used.

**T5X model gin.** When the gin config defines the macro `MODEL` (as T5X's model
gins and `specdec_jax/configs/t5x/speculative_model.gin` do), the job builds `MODEL`
exactly as `t5x.infer` would and takes from it:

| from | the job's |
|---|---|
| `MODEL.module.config`, `MODEL.draft_module.config` (`DRAFT_MODULE`) | target / draft configs |
| `CHECKPOINT_PATH` (as passed to `t5x.infer`) | target checkpoint |
| `MODEL.draft_params` (`DRAFT_CHECKPOINT`), a checkpoint path | draft checkpoint |
| `MODEL.draft_params_dtype` | the draft params' dtype at load |
| `MODEL.input_vocabulary` / `output_vocabulary` (`VOCABULARY`) | tokenizer / detokenizer |
| `MODEL.gamma` (`GAMMA`), `temperature` (`TEMPERATURE`), `topk`, `topp`, `eos_id`, `verification` | decoding |
| `MODEL.decode_fn` (below) | `decode.method` |
| `MODEL.inputs_bidirectional_attention` (decoder-only) | the prompt's mask (prefix LM) |

`MODEL` is `models.SpeculativeEncoderDecoderModel` (T5) or
`models.SpeculativeDecoderOnlyModel` (T5X's decoder-only family: each input is the
prompt, prefilled in one call, as with a decoder-only pair folder).

`decode_fn` unset or `@specdec_jax.t5x_decoding.speculative_sample` is speculative
decoding, `@specdec_jax.t5x_decoding.temperature_sample` the target alone (baseline).

`optimizer_def`, `z_loss`, `label_smoothing` and `loss_normalizing_factor` are
training settings; decoding does not use them (nor does `t5x.infer`), so they are
accepted, and so are the bindings of T5X's own machinery the model gin includes
(`T5X_MACHINERY`: T5X's optimizer and `utils.RestoreCheckpointConfig`, skipped when
t5x is not installed — `OPTIMIZER` is then None —, and the restore hook
`t5x_restore.add_draft_params`, which gets `DRAFT_CHECKPOINT` as the job does).
Anything else the job cannot honour is an error (exit 2): a `MODEL` that is neither
of our two model classes, a `decode_fn` other than the two above
(or a `functools.partial` of one), a draft given as a params tree instead of a
path, `default_decoder_params`, `rescale_log_probs` or `feature_converter_cls` bound
(the job writes no scores and tokenizes itself), and `decode.*` bindings that
describe the pair or the decoding a second time (`decode.pair_dir`,
`decode.target_checkpoint`, `decode.gamma`, ...; `configs/runs/decode.gin` names the
demo pair, so do not combine it with a T5X model gin — bind the macros instead:
`--gin.GAMMA=5`).

**Unused bindings.** After the model description is resolved (before any
checkpoint is read), every binding in the gin config must have been used by a
configurable the job called (`gin`'s operative config) or read by the job itself
(`CHECKPOINT_PATH`): e.g. `--gin.CHECKPOINT_PATH=...` without a T5X model gin, or
`target/network.T5Config.emb_dim = 16` when `decode.target_config` does not
reference it, is an error naming the binding, not silently ignored.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Iterable, Optional

import gin

from specdec_jax.decode import pair as pair_lib

MODEL_SELECTOR = 'models.SpeculativeEncoderDecoderModel'
DECODER_ONLY_SELECTOR = 'models.SpeculativeDecoderOnlyModel'
MODEL_SELECTORS = (MODEL_SELECTOR, DECODER_ONLY_SELECTOR)
# Configurables of T5X itself that the T5X model gins bind (T5X's optimizer and restore
# config, `specdec_jax/configs/t5x/{adafactor,restore_draft}.gin`): skipped when t5x is
# not installed (gin's skip_unknown); they serve t5x.train / t5x.infer, not decoding.
T5X_ONLY = ('adafactor.Adafactor', 'adafactor.standard_logical_factor_rules',
            'utils.RestoreCheckpointConfig')
# Bindings for T5X's machinery that the job accepts with a T5X model gin: T5X's
# restore hook gets DRAFT_CHECKPOINT, which the job reads itself.
T5X_MACHINERY = ('t5x_restore.add_draft_params',) + T5X_ONLY
# MODEL's parameters the job reads.
HONOURED = frozenset({'module', 'draft_module', 'input_vocabulary', 'output_vocabulary',
                      'draft_params', 'draft_checkpoint', 'draft_params_dtype', 'gamma',
                      'temperature', 'topk', 'topp', 'eos_id', 'decode_fn',
                      'draft_vocabulary', 'verification'})
# SpeculativeDecoderOnlyModel's own: the prefix-LM flag (the pair's prompt mask).
HONOURED_DECODER_ONLY = HONOURED | {'inputs_bidirectional_attention', 'vocabulary'}
# MODEL's training settings: decoding does not use them (nor does t5x.infer).
NOT_FOR_DECODING = frozenset({'optimizer_def', 'z_loss', 'label_smoothing',
                              'loss_normalizing_factor'})
# decode.* parameters a T5X model gin describes instead.
DESCRIBED_BY_MODEL = ('pair_dir', 'target_config', 'draft_config', 'target_checkpoint',
                      'draft_checkpoint', 'vocab_path', 'extra_ids', 'gamma', 'temperature',
                      'topk', 'topp', 'verification')
_MACRO_FOR = {'target_checkpoint': 'CHECKPOINT_PATH', 'draft_checkpoint': 'DRAFT_CHECKPOINT',
              'gamma': 'GAMMA', 'temperature': 'TEMPERATURE'}
# T5X macros and the decode.* parameter to bind instead without a T5X model gin.
MACRO_HINTS = {'CHECKPOINT_PATH': 'decode.target_checkpoint',
               'DRAFT_CHECKPOINT': 'decode.draft_checkpoint', 'GAMMA': 'decode.gamma',
               'TEMPERATURE': 'decode.temperature', 'DRAFT_MODULE': 'decode.draft_config'}

_MISSING = object()


@dataclasses.dataclass(frozen=True)
class ModelGin:
  """What the job takes from a T5X model gin (see the module docstring)."""
  pair: pair_lib.PairSpec
  gamma: int
  temperature: float
  topk: int
  topp: float
  method: str
  model: Any
  verification: str = 'token'


def t5x_available() -> bool:
  import importlib.util  # pylint: disable=g-import-not-at-top
  return importlib.util.find_spec('t5x') is not None


def drop_unavailable_optimizer() -> None:
  """`OPTIMIZER = None` when it refers to a T5X optimizer gin skipped (t5x not installed).

  Call between parsing (with `finalize_config=False`) and `gin.finalize()`. The
  optimizer is `MODEL.optimizer_def`, which only T5X's trainer uses.
  """
  value = macro('OPTIMIZER', None)
  if type(value).__name__ == '_UnknownConfigurableReference' and (
      getattr(value, 'selector', None) in T5X_ONLY):
    gin.bind_parameter('OPTIMIZER/gin.macro.value', None)


def macro(name: str, default=_MISSING):
  """The value bound to the gin macro `name` (unevaluated), or `default`."""
  try:
    return gin.query_parameter(f'{name}/gin.macro.value')
  except ValueError:
    if default is _MISSING:
      raise
    return default


def has_model_gin() -> bool:
  """True when the parsed gin config defines the macro `MODEL` (a T5X model gin)."""
  return macro('MODEL', None) is not None


def _resolve(value):
  """Follows macro (`%X`) and constant (`%module.NAME`) references to their value."""
  for _ in range(32):
    if not isinstance(value, gin.config.ConfigurableReference) or not value.evaluate:
      return value
    selector = value.configurable.selector
    if selector == 'gin.macro':
      value = gin.query_parameter('/'.join(value.scopes) + '/gin.macro.value')
    elif selector == 'gin.constant':
      value = gin.query_parameter('/'.join(value.scopes))
    else:
      return value
  return value


def _decode_bound() -> dict:
  try:
    return dict(gin.get_bindings('decode', resolve_references=False))
  except ValueError:
    return {}


def read_model_gin(decode_bindings: Optional[dict] = None) -> ModelGin:
  """Builds `MODEL` from the gin config and returns the job's view of it.

  Args:
    decode_bindings: the `decode.*` bindings (default: read from gin).
  Raises:
    ValueError: anything the job cannot honour (module docstring), naming the
      binding and the fix; `CHECKPOINT_PATH` not bound.
  """
  bound = _decode_bound() if decode_bindings is None else decode_bindings
  ref = macro('MODEL')
  if not (isinstance(ref, gin.config.ConfigurableReference) and ref.evaluate
          and ref.configurable.selector in MODEL_SELECTORS):
    raise ValueError(f'MODEL = {ref!r} cannot be run by the decode job: it decodes with '
                     f'{MODEL_SELECTOR} (MODEL = @{MODEL_SELECTOR}(), e.g. '
                     'specdec_jax/configs/t5x/speculative_model.gin) or '
                     f'{DECODER_ONLY_SELECTOR} (specdec_jax/configs/t5x/'
                     'speculative_decoder_only.gin), or a pair folder / decode.* bindings '
                     '(configs/runs/decode.gin).')
  selector = ref.configurable.selector
  decoder_only = selector == DECODER_ONLY_SELECTOR
  twice = [k for k in DESCRIBED_BY_MODEL if k in bound]
  if twice:
    alt = ', '.join(f'decode.{k} → {_MACRO_FOR[k]}' if k in _MACRO_FOR else
                    f'decode.{k} → --gin.{selector}.{k}=...' for k in twice)
    raise ValueError(
        'The T5X model gin (MODEL) describes the model pair and its decoding, but '
        f'{", ".join("decode." + k for k in twice)} {"is" if len(twice) == 1 else "are"} '
        'bound too (configs/runs/decode.gin and configs/pairs/*.gin bind them): drop '
        'those bindings / files and set the T5X macros (or MODEL\'s parameters) instead'
        + (f' ({alt})' if alt else '') + '.')
  params = dict(gin.get_bindings(ref.scoped_selector, resolve_references=False))
  honoured = HONOURED_DECODER_ONLY if decoder_only else HONOURED
  unknown = sorted(set(params) - honoured - NOT_FOR_DECODING)
  if unknown:
    raise ValueError(
        f'{", ".join(f"{selector}.{k}" for k in unknown)}: bound in the T5X model gin '
        'but not used by the decode job (it writes no scores and tokenizes its inputs '
        'itself); remove the binding(s) or run t5x.infer.')
  target_checkpoint = _resolve(macro('CHECKPOINT_PATH', None))
  if not isinstance(target_checkpoint, (str, os.PathLike)):
    raise ValueError(
        'No target checkpoint: with a T5X model gin, bind the target\'s T5X checkpoint as '
        "for t5x.infer: --gin.CHECKPOINT_PATH=\"'/path/to/checkpoint_<step>'\""
        + ('' if target_checkpoint is None else f' (got {target_checkpoint!r})') + '.')
  draft = _resolve(params.get('draft_checkpoint', params.get('draft_params')))
  if draft is None:
    draft = _resolve(macro('DRAFT_CHECKPOINT', None))
  if not isinstance(draft, (str, os.PathLike)):
    raise ValueError(
        f'{selector}.draft_params (DRAFT_CHECKPOINT) must be the draft\'s T5X '
        f'checkpoint path for the decode job, got {draft!r}; bind '
        "--gin.DRAFT_CHECKPOINT=\"'/path/to/draft/checkpoint_<step>'\".")
  draft_dtype = pair_lib._dtype(  # pylint: disable=protected-access
      _resolve(params.get('draft_params_dtype')), f'{selector}.draft_params_dtype')
  from specdec_jax.text import vocabulary  # pylint: disable=g-import-not-at-top
  vocabulary.import_seqio()  # Before gin builds the vocabulary: TensorFlow's start-up noise.
  try:
    model = gin.get_configurable('MODEL/gin.macro')()
  except (ValueError, TypeError, FileNotFoundError, KeyError) as e:
    from specdec_jax.util import flags  # pylint: disable=g-import-not-at-top
    raise ValueError(f'The T5X model gin (MODEL = @{selector}()) cannot be built: '
                     f'{flags.clean_message(e)}') from e
  method = _method(model, bound.get('method'))
  vocab = model.output_vocabulary
  pair = pair_lib.PairSpec(
      name='t5x_model_gin', target_config=model.module.config,
      draft_config=model.draft_module.config,
      target_checkpoint=pair_lib.resolve_path(target_checkpoint),
      draft_checkpoint=pair_lib.resolve_path(draft),
      vocab_path=str(getattr(vocab, 'sentencepiece_model_file', None) or vocab),
      vocabulary=vocab, input_vocabulary=model.input_vocabulary,
      eos_id=int(getattr(model, 'eos_id', vocab.eos_id)), draft_dtype=draft_dtype,
      inputs_bidirectional_attention=(bool(model.inputs_bidirectional_attention)
                                      if decoder_only else None))
  return ModelGin(pair=pair, gamma=model.gamma, temperature=model.temperature,
                  topk=getattr(model, 'topk', 0), topp=getattr(model, 'topp', 0.0),
                  method=method, model=model,
                  verification=getattr(model, 'verification', 'token'))


def _method(model, bound_method) -> str:
  """'speculative' / 'baseline' from MODEL.decode_fn (and a bound decode.method)."""
  from specdec_jax.interop.t5x import decode_fn as t5x_decode_fn  # pylint: disable=g-import-not-at-top
  fn = model.decode_fn
  base = t5x_decode_fn.unwrapped(fn)  # under gin's wrapper / functools.partial layers
  ours = str(getattr(base, '__module__', '')).startswith('specdec_jax.')
  name = getattr(base, '__name__', None)
  if fn is None or (ours and name == 'speculative_sample'):
    method = 'speculative'
  elif ours and name == 'temperature_sample':
    method = 'baseline'  # specdec_jax.t5x_decoding.temperature_sample: the target alone.
  else:
    raise ValueError(f'{MODEL_SELECTOR}.decode_fn = {fn!r} cannot be run by the decode job: it '
                     'runs speculative decoding (decode_fn unset, or '
                     '@specdec_jax.t5x_decoding.speculative_sample) or the target alone '
                     '(@specdec_jax.t5x_decoding.temperature_sample), with the arguments '
                     'of MODEL and the decode.* settings.')
  if bound_method is not None and bound_method != method:
    if method == 'baseline':
      raise ValueError(f"decode.method = {bound_method!r} contradicts the T5X model gin's "
                       'decode_fn = @specdec_jax.t5x_decoding.temperature_sample (target alone); '
                       'drop one of them.')
    method = bound_method  # 'baseline': the target alone, like T5X's temperature_sample.
  return method


# ---------------------------------------------------------------------------- unused bindings

def _config_dicts():
  """(all bindings, operative bindings) as gin keeps them: {(scope, selector): {arg: value}}.

  gin has no public accessor for every binding (`gin.config_str()` only prints them),
  so this reads the two module-level dicts behind `config_str` / `operative_config_str`.
  """
  cfg = getattr(gin.config, '_CONFIG', None)
  op = getattr(gin.config, '_OPERATIVE_CONFIG', None)
  if cfg is None or op is None:
    return {}, {}
  return cfg, op


def _prefixes(scope: str) -> list[str]:
  parts = scope.split('/') if scope else []
  return ['/'.join(parts[:i]) for i in range(len(parts) + 1)]


def unused_bindings(extra_used: Iterable[tuple] = (),
                    accepted_selectors: Iterable[str] = ()) -> list[tuple[str, str, str, Any]]:
  """Bindings no configurable call used: `(scope, selector, arg, value)`, in gin's order.

  A binding `scope/selector.arg` is used when `selector` was called in a scope whose
  prefix is `scope` and no more specific binding of `arg` overrode it there (gin's
  scope rule); `extra_used` adds `(scope, selector, arg)` the caller read itself, and
  bindings of a selector equal to or ending in `.NAME` for a NAME in
  `accepted_selectors` are accepted.
  """
  cfg, op = _config_dicts()
  extra = set(extra_used)
  accepted = tuple(accepted_selectors)
  out = []
  for (scope, selector), args in cfg.items():
    if any(selector == a or selector.endswith('.' + a) for a in accepted):
      continue
    for arg, value in args.items():
      if (scope, selector, arg) in extra:
        continue
      used = False
      for (call_scope, call_sel), op_args in op.items():
        if call_sel != selector or arg not in op_args:
          continue
        prefixes = _prefixes(call_scope)
        if scope not in prefixes:
          continue
        more_specific = prefixes[prefixes.index(scope) + 1:]
        if not any(arg in cfg.get((s, selector), {}) for s in more_specific):
          used = True
          break
      if not used:
        out.append((scope, selector, arg, value))
  return out


def _show(scope: str, selector: str, arg: str, value) -> str:
  text = repr(value)
  text = text if len(text) <= 60 else text[:57] + '...'
  if selector == 'gin.macro':
    return f'{scope} = {text}'
  return f'{scope + "/" if scope else ""}{selector}.{arg} = {text}'


def check_all_bindings_used(extra_used: Iterable[tuple] = (), *, t5x_model: bool = False) -> None:
  """Raises ValueError naming every binding the job did not use (module docstring)."""
  unused = unused_bindings(extra_used, T5X_MACHINERY if t5x_model else ())
  if not unused:
    return
  shown = '; '.join(_show(*u) for u in unused)
  hints = []
  macros = [s for s, sel, _, _ in unused if sel == 'gin.macro']
  t5x = [m for m in macros if m in MACRO_HINTS]
  if t5x and not t5x_model:
    hints.append(', '.join(f'{m} → {MACRO_HINTS[m]}' for m in t5x)
                 + ': these T5X macros are read only with a T5X model gin (one defining '
                 f'MODEL = @{MODEL_SELECTOR}(), e.g. specdec_jax/configs/t5x/'
                 'speculative_model.gin); '
                 'with a pair folder or decode.* bindings, bind the decode.* parameter')
  if any(sel == 'network.T5Config' for _, sel, _, _ in unused):
    hints.append('network.T5Config bindings only count in the scope decode.target_config / '
                 'decode.draft_config reference (@target/network.T5Config(), '
                 '@draft/network.T5Config()), and a more specific binding of the same field '
                 'wins')
  hints.append('remove them, or bind what the job reads (python -m specdec_jax.decode --help '
               'lists the decode.* parameters)')
  raise ValueError(f'gin binding(s) the decode job does not use: {shown}. '
                   + '; '.join(hints) + '.')
