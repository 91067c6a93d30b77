"""The decode job's gin configurable `decode` and its preparation (steps 1–4).

Everything that can be checked is checked here, before any model is compiled:
settings, output path, input file, the model pair (pair folder / `decode.*`
bindings, or a T5X model gin), every gin binding used, vocabulary, inputs, and the
checkpoints' shapes against the configs.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Optional


from specdec_jax.text import inputs as inputs_lib
from specdec_jax.text import vocabulary
from specdec_jax.decode import outputs
from specdec_jax.decode import pair as pair_lib
from specdec_jax.decode import t5x_gin
from specdec_jax.decode.prepared import Prepared
from specdec_jax.util import atomic
from specdec_jax.util import gin_config

TRANSLATE_PREFIX = vocabulary.TRANSLATE_PREFIX  # the demo pair's task prefix
METHODS = ('speculative', 'baseline')


def register_configurables() -> None:
  """Registers `network.T5Config` (T5X's name) and the dtype constants with gin, once
  (through `specdec_jax.interop.t5x.gin_registry`, the project's one place for T5X-name registrations)."""
  from specdec_jax.interop.t5x import gin_registry as gin_utils  # noqa: F401  pylint: disable=g-import-not-at-top


# At import, so that gin files parsed by a library user can say @target/network.T5Config().
register_configurables()


@gin_config.configurable(denylist=['prepare_only', 'check_bindings'])
def decode(output_path: str = 'out/decode/predictions.jsonl',
           # The model pair.
           pair_dir: Optional[str] = pair_lib.DEMO_PAIR,
           target_config: Any = None,
           draft_config: Any = None,
           target_checkpoint: Optional[str] = None,
           draft_checkpoint: Optional[str] = None,
           vocab_path: Optional[str] = None,
           extra_ids: int = 100,
           checkpoint_dtype: Optional[str] = None,
           # Inputs.
           input_path: Optional[str] = None,
           input_format: str = 'auto',
           input_field: str = 'inputs',
           target_field: str = 'targets',
           task_name: Optional[str] = None,
           task_split: str = 'test',
           max_examples: Optional[int] = None,
           prefix: Optional[str] = None,
           max_input_len: int = 64,
           on_long_input: str = 'truncate',
           # Decoding.
           method: str = 'speculative',
           gamma: int = 4,
           draft_policy=None,
           verification: str = 'token',
           drafter: str = 'model',
           lookup_max_ngram: int = 4,
           lookup_min_ngram: int = 1,
           ngram_table_path: Optional[str] = None,
           lenience: float = 1.0,
           temperature: float = 0.0,
           topk: int = 0,
           topp: float = 0.0,
           suppress_ids: Any = 'pair',
           batch_size: int = 8,
           max_decode_len: int = 64,
           seed: int = 0,
           # Sharding (docs/scaling.md).
           mesh_shape=None,
           logical_axis_rules=None,
           draft_sharding: str = 'replicated',
           warmup: bool = True,
           progress: Optional[bool] = None,
           print_predictions: int = 10,
           prepare_only: bool = False,
           check_bindings: bool = False):
  """Decodes the inputs with the model pair and writes JSONL + summary (see the package doc).

  Args:
    output_path: the JSONL to write (`<output_path>.summary.json` beside it).
    pair_dir: a pair folder (`pair.json` with both T5Configs, `target/` and `draft/`
      T5X checkpoints, `vocab/*.model`); a bare name is looked up under
      `specdec_jax/assets/`. None: everything comes from the bindings below.
    target_config, draft_config: T5Configs (`@target/network.T5Config()`), preset
      names ('t5_1_1_xxl') or None (from `pair.json`).
    target_checkpoint, draft_checkpoint: T5X checkpoints (folder of
      `checkpoint_<step>/` → latest step, one such folder, or a msgpack file).
    vocab_path: SentencePiece `.model` (or a folder holding one), used through
      `seqio.SentencePieceVocabulary(path, extra_ids=extra_ids)`.
    extra_ids: sentinel ids added to the vocabulary (T5: 100).
    checkpoint_dtype: e.g. 'bfloat16' to cast params when loading (None: as stored).
    input_path, input_format, input_field, target_field: see `specdec_jax.text.inputs`;
      no input_path and no task_name → the built-in example sentences.
    task_name, task_split, max_examples: a registered seqio task (e.g.
      'specdec_ende_multi30k') and split; at most max_examples inputs.
    prefix: prepended to every file input (not to seqio task inputs); None: the pair's
      `input_prefix` from pair.json, else 'translate English to German: '.
    max_input_len: the fixed encoder length; longer inputs follow on_long_input
      ('truncate': keep max_input_len − 1 tokens + EOS, warn once; 'error').
    on_long_input: 'truncate' or 'error'.
    method: 'speculative' or 'baseline' (T5X-style one-token-per-call decoding).
    gamma: γ, draft tokens per round (any γ ≥ 1 works with any max_decode_len); with
      an adaptive draft_policy, the most a row drafts in a round (γ_max).
    draft_policy: the draft length per round: None / 'constant' (γ every round),
      'heuristic', 'confidence', 'optimal', or `@specdec_jax.DraftPolicy()` with its
      settings bound (`specdec_jax.DraftPolicy.threshold = 0.4`); see
      `specdec_jax.decoding.policies`.
    verification: 'token' (Algorithm 1, each draft accepted in turn) or 'block' (block
      verification, Sun et al. ICLR 2025: the accepted length decided jointly; exact, at
      least as many tokens per target call; the same tokens at temperature 0).
    drafter: what drafts (`specdec_jax.decoding.drafters`), a name or a configured object
      (`@specdec_jax.LookupDrafter()` with `specdec_jax.LookupDrafter.max_ngram = 3`):
      'model' (the draft model),
      'lookup' (n-gram lookup in the input and the text so far: no draft model needed),
      'lookup+model' (lookup where it matches, else the draft model), 'bigram' /
      'unigram' (a table, `ngram_table_path`). Every drafter is exact.
    lookup_max_ngram, lookup_min_ngram: the lookup's n-gram lengths (longest first).
    ngram_table_path: the table of 'bigram' / 'unigram' (`specdec_jax.drafters.tables`);
      None: `<pair folder>/<drafter>.npz`.
    lenience: l in (0, 1] (paper Appendix A.5); 1 = exact. l < 1 accepts more drafts and
      is NOT exact: the summary, every output row and the printed summary say so.
    temperature, topk, topp: sampling (0 = greedy; at most one of topk / topp;
      topp = 1 keeps every token).
    suppress_ids: token ids neither model may emit (their logits set to -inf before
      standardization, so the output is exactly the target's distribution without them):
      'pair' (default) takes pair.json's `suppress_ids` (the demo pairs list the unknown
      piece, the sentinels and the padding rows; none for a pair without the field or a
      T5X model gin, T5X's default); or a list of ids and `[first, last]` ranges, e.g.
      `[2, [8000, 8191]]`; `()` turns it off.
    batch_size: rows per call (the last batch is padded to it).
    max_decode_len: decoded tokens per input at most.
    seed: PRNG seed.
    mesh_shape: `(data, model)` device-mesh sizes (one may be -1: the rest of the
      devices); None decodes on one device. Params are placed (and restored) from
      their logical axes, the batch is split over `data` (padded to a multiple of
      it), caches over `data` and `heads`; outputs are the same on every mesh.
      Across processes (`specdec_jax.sharding.distributed`: JAX_COORDINATOR_ADDRESS,
      JAX_NUM_PROCESSES, JAX_PROCESS_ID) the mesh spans every process's devices and
      process 0 writes the outputs.
    logical_axis_rules: `((logical axis, 'data' | 'model' | None), ...)`; None: T5X's
      standard rules (`@specdec_jax.standard_logical_axis_rules()`).
    draft_sharding: 'replicated' (the draft whole on every device) or 'like_target'.
    warmup: time a first call on the first batch separately as `compile_s`
      (costs one extra batch of decoding); False: `run_s` includes compilation.
    progress: tqdm bar on stderr (None: when stderr is a terminal and there is
      more than one batch; SPECDEC_PROGRESS=1 / 0 overrides None).
    print_predictions: print the first this many `input → prediction` pairs to
      stdout before the summary (0: none).
    prepare_only: stop after validation and loading and return the `Prepared`
      job (not bindable; `main` uses it to report configuration errors cleanly).
    check_bindings: (not bindable) raise ValueError for any gin binding the job does
      not use (`t5x_gin.check_all_bindings_used`); `main` and `run` set it.
  Returns:
    The summary dict (or the `Prepared` job with prepare_only).
  """
  settings = dict(
      output_path=output_path, pair_dir=pair_dir, extra_ids=extra_ids,
      checkpoint_dtype=checkpoint_dtype, input_path=input_path, input_format=input_format,
      input_field=input_field, target_field=target_field, task_name=task_name,
      task_split=task_split, max_examples=max_examples, prefix=prefix,
      max_input_len=max_input_len, on_long_input=on_long_input, method=method, gamma=gamma,
      draft_policy=draft_policy, verification=verification, drafter=drafter,
      lookup_max_ngram=lookup_max_ngram, lookup_min_ngram=lookup_min_ngram,
      ngram_table_path=ngram_table_path, lenience=lenience, temperature=temperature,
      topk=topk, topp=topp, suppress_ids=suppress_ids, batch_size=batch_size,
      max_decode_len=max_decode_len, seed=seed, mesh_shape=mesh_shape,
      logical_axis_rules=logical_axis_rules, draft_sharding=draft_sharding, warmup=warmup,
      progress=progress, print_predictions=print_predictions)
  prepared = prepare(settings, target_config=target_config, draft_config=draft_config,
                     target_checkpoint=target_checkpoint, draft_checkpoint=draft_checkpoint,
                     vocab_path=vocab_path, check_bindings=check_bindings)
  if prepare_only:
    return prepared
  return outputs.run_decode(prepared)


def _validate_settings(s: dict) -> None:
  from specdec_jax.decoding import sampling  # pylint: disable=g-import-not-at-top
  if s['method'] not in METHODS:
    raise ValueError(f"decode.method must be one of {METHODS}, got {s['method']!r}.")
  for key, low in (('gamma', 1), ('batch_size', 1), ('max_decode_len', 1),
                   ('max_input_len', 2), ('extra_ids', 0), ('print_predictions', 0)):
    v = s[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
      raise ValueError(f'decode.{key} must be an int >= {low}, got {v!r}.')
  sampling.check_seed('decode.seed', s['seed'])
  if not isinstance(s['temperature'], (int, float)) or isinstance(s['temperature'], bool):
    raise ValueError(f"decode.temperature must be a number, got {s['temperature']!r}.")
  try:
    sampling.validate_sampling_args(s['temperature'], s['topk'], s['topp'])
  except ValueError as e:
    raise ValueError(f'decode: {e}') from e
  from specdec_jax.decoding import policies  # pylint: disable=g-import-not-at-top
  try:
    s['draft_policy'] = policies.as_policy(s.get('draft_policy'))
  except ValueError as e:
    raise ValueError(f'decode.draft_policy: {e}') from e
  from specdec_jax.decoding import accept  # pylint: disable=g-import-not-at-top
  try:
    accept.check_verification(s.get('verification', 'token'))
    s['lenience'] = accept.check_lenience(s.get('lenience', 1.0),
                                          s.get('verification', 'token'))
  except ValueError as e:
    raise ValueError(f'decode.{e}') from e
  from specdec_jax.generate import common as generate_common  # pylint: disable=g-import-not-at-top
  try:
    s['drafter_spec'] = generate_common.resolve_drafter(
        s.get('drafter', 'model'), s.get('lookup_max_ngram', 4), s.get('lookup_min_ngram', 1))
  except ValueError as e:
    raise ValueError(f'decode.drafter: {e}') from e
  s['drafter'] = generate_common.drafter_name(s['drafter_spec'])
  lookup = getattr(s['drafter_spec'], 'lookup', s['drafter_spec'])
  if hasattr(lookup, 'max_ngram'):  # a configured object's settings win (the summary's)
    s['lookup_max_ngram'], s['lookup_min_ngram'] = lookup.max_ngram, lookup.min_ngram
  if s['on_long_input'] not in inputs_lib.ON_LONG_INPUT:
    raise ValueError(f'decode.on_long_input must be one of {inputs_lib.ON_LONG_INPUT}, '
                     f"got {s['on_long_input']!r}.")
  if s.get('suppress_ids', 'pair') != 'pair':
    s['suppress_ids'] = pair_lib.parse_suppress_ids(s['suppress_ids'], 'decode.suppress_ids')
  pair_lib._dtype(s.get('checkpoint_dtype'))  # pylint: disable=protected-access
  if s['input_format'] not in inputs_lib.FORMATS:
    raise ValueError(f'decode.input_format must be one of {inputs_lib.FORMATS}, '
                     f"got {s['input_format']!r}.")


def check_output_path(output_path: str) -> pathlib.Path:
  """The output path as a Path, checked before anything runs.

  Raises:
    ValueError: unbound; it or its summary sidecar (`<output_path>.summary.json`) is a
      folder or a special file; or its folder is not (and cannot be made) writable. A
      symlinked output is written through (`atomic.destination`).
  """
  if not output_path:
    raise ValueError("Bind decode.output_path='out/predictions.jsonl' (the JSONL to write).")
  p = pathlib.Path(output_path).expanduser()
  if p.is_dir():
    raise ValueError(f'decode.output_path {str(p)!r} is a folder; name a .jsonl file.')
  atomic.destination(p, 'decode.output_path')
  atomic.destination(p.with_name(p.name + '.summary.json'),
                     'the summary beside decode.output_path')
  ancestor = p.parent
  while not ancestor.exists():
    ancestor = ancestor.parent
  if not ancestor.is_dir() or not os.access(ancestor, os.W_OK):
    raise ValueError(f'Cannot write decode.output_path {str(p)!r}: {str(ancestor)!r} is not '
                     'a writable folder.')
  atomic.check_writable(p, 'decode.output_path')  # a real probe: root passes os.access
  return p


def _resolve_model(s: dict, *, target_config, draft_config, target_checkpoint,
                   draft_checkpoint, vocab_path, need_draft: bool):
  """(PairSpec, extra used bindings, T5X model gin or None); updates `s` from a T5X gin."""
  if t5x_gin.has_model_gin():
    m = t5x_gin.read_model_gin()
    s.update(gamma=m.gamma, temperature=m.temperature, topk=m.topk, topp=m.topp,
             method=m.method, pair_dir=None, verification=m.verification)
    _validate_settings(s)  # The model's values, checked as the job's own.
    used = [('CHECKPOINT_PATH', 'gin.macro', 'value'), ('DRAFT_CHECKPOINT', 'gin.macro', 'value')]
    return m.pair, used, m
  pair = pair_lib.resolve_pair(
      s['pair_dir'], target_config=target_config, draft_config=draft_config,
      target_checkpoint=target_checkpoint, draft_checkpoint=draft_checkpoint,
      vocab_path=vocab_path, need_draft=need_draft)
  return pair, [], None


def prepare(settings: dict, *, target_config=None, draft_config=None, target_checkpoint=None,
            draft_checkpoint=None, vocab_path=None, load_models: bool = True,
            check_bindings: bool = False) -> Prepared:
  """Steps 2–4 of the job: validate, read inputs, load checkpoints (nothing compiled)."""
  s = dict(settings)
  _validate_settings(s)
  output = check_output_path(s['output_path'])
  if s['input_path'] and not s['task_name']:
    inp = pathlib.Path(s['input_path']).expanduser()
    summary = output.with_name(output.name + '.summary.json')
    if inp.exists() and any(inp.resolve() == x.resolve() for x in (output, summary)):
      raise ValueError(f"decode.output_path {str(output)!r} would overwrite the input "
                       f"(decode.input_path {s['input_path']!r}); name another output file.")
  # Input files are checked first: a typo there should not wait for anything else.
  if s['input_path'] and not s['task_name']:
    inputs_lib.check_input_file(s['input_path'])
  pair, used, t5x_model = _resolve_model(
      s, target_config=target_config, draft_config=draft_config,
      target_checkpoint=target_checkpoint, draft_checkpoint=draft_checkpoint,
      vocab_path=vocab_path, need_draft=_needs_draft(s))
  need_draft = _needs_draft(s)
  if check_bindings:
    t5x_gin.check_all_bindings_used(used, t5x_model=t5x_model is not None)
  if pair.target_config is None:
    raise ValueError('No target model config: bind decode.target_config = '
                     '@target/network.T5Config() (and target/network.T5Config.* sizes), or '
                     'decode.pair_dir to a folder with pair.json.')
  if need_draft and pair.draft_config is None:
    raise ValueError('No draft model config: bind decode.draft_config = '
                     '@draft/network.T5Config(), or decode.pair_dir.')
  binding = (lambda role: 'CHECKPOINT_PATH' if role == 'target' else 'DRAFT_CHECKPOINT') if (
      t5x_model) else (lambda role: f'decode.{role}_checkpoint')
  pair_lib.check_checkpoint(pair.target_checkpoint, 'target', binding('target'))
  if need_draft and pair.draft_checkpoint is not None:  # None: the target's `target/draft`
    pair_lib.check_checkpoint(pair.draft_checkpoint, 'draft', binding('draft'))
  dtype = pair_lib._dtype(s['checkpoint_dtype'])  # pylint: disable=protected-access
  vocab = pair.vocabulary or pair_lib.load_vocabulary(pair.vocab_path, s['extra_ids'])
  input_vocab = pair.input_vocabulary or vocab
  configs = [('target', pair.target_config)] + ([('draft', pair.draft_config)]
                                               if need_draft else [])
  for role, cfg in configs:
    if s['topk'] > cfg.vocab_size:  # before loading, not at the first generate call
      raise ValueError(f"decode.topk={s['topk']} exceeds the {role} model's "
                       f'vocab_size={cfg.vocab_size}; use a smaller topk (0 = off).')
    if vocab.vocab_size > cfg.vocab_size:
      raise ValueError(f'The vocabulary ({vocab.vocab_size} ids with extra_ids) is larger than '
                       f'the {role} model\'s vocab_size={cfg.vocab_size}; wrong '
                       'decode.vocab_path or T5Config?')
  records = inputs_lib.read_records(
      s['input_path'], task_name=s['task_name'], task_split=s['task_split'],
      max_examples=s['max_examples'], input_format=s['input_format'],
      input_field=s['input_field'], target_field=s['target_field'])
  if s.get('suppress_ids', 'pair') == 'pair':
    s['suppress_ids'] = pair.suppress_ids
  summary_path = output.with_name(output.name + '.summary.json')
  reads = {'decode.input_path': s['input_path'] if not s['task_name'] else None,
           'the pair folder': pair.folder, 'the target checkpoint': pair.target_checkpoint,
           'the draft checkpoint': pair.draft_checkpoint if need_draft else None,
           'the vocabulary': pair.vocab_path, 'decode.ngram_table_path': s.get('ngram_table_path')}
  for out_path, name in ((output, 'decode.output_path'),
                         (summary_path, 'the summary beside decode.output_path')):
    atomic.check_not_reading(out_path, name, reads)
  eos = pair.eos_id if pair.eos_id is not None else vocab.eos_id
  if eos in s['suppress_ids']:
    raise ValueError(f'decode.suppress_ids holds the EOS id {eos}: no output could ever end '
                     '(every row would run to decode.max_decode_len); remove it.')
  for role, cfg in configs:
    beyond = [i for i in s['suppress_ids'] if i >= cfg.vocab_size]
    if beyond:
      raise ValueError(f'decode.suppress_ids holds {beyond[0]}, beyond the {role} model\'s '
                       f'vocab_size={cfg.vocab_size}; list ids of the pair\'s vocabulary.')
  if s['prefix'] is None:
    s['prefix'] = pair.input_prefix if pair.input_prefix is not None else TRANSLATE_PREFIX
  s['ngram_table'] = _ngram_table(s, pair)
  examples = inputs_lib.tokenize(records, input_vocab, prefix=s['prefix'],
                                 max_input_len=s['max_input_len'],
                                 on_long_input=s['on_long_input'])
  prepared = Prepared(s, pair, vocab, examples, output_path=output, input_vocab=input_vocab,
                      plan=_plan(s))
  if load_models:
    check_memory(s, configs, dtype)
    _load_models(prepared, configs, dtype, binding)
  return prepared


def decode_bytes(s: dict, configs, dtype=None) -> int:
  """A lower bound on the bytes one decode call needs: params, KV caches, logits.

  Per model: params (`family.param_shapes` × the load dtype's size, float32 when None);
  KV caches of `batch_size` rows × (max(max_decode_len, γ + 1) + the input length) positions
  × 2 × layers × heads × head_dim float32s (a decoder-only model's prompt takes the input
  length); `[batch_size, γ + 1, vocab]` float32 logits, counted twice (logits and their
  probabilities). Inputs are counted at `max_input_len`, their upper bound.
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import family  # pylint: disable=g-import-not-at-top
  rows, gamma = s['batch_size'], (s['gamma'] if s['method'] == 'speculative' else 0)
  length = max(s['max_decode_len'], gamma + 1) + s['max_input_len']
  total = 0
  for _, cfg in configs:
    layers = (getattr(cfg, 'num_decoder_layers', None) or cfg.num_layers) + getattr(
        cfg, 'num_encoder_layers', 0)
    params = sum(int(np.prod(shape)) for shape in family.param_shapes(cfg).values())
    total += params * np.dtype(dtype or np.float32).itemsize
    total += rows * length * 2 * layers * cfg.num_heads * cfg.head_dim * 4
    total += 2 * rows * (gamma + 1) * cfg.vocab_size * 4
  return int(total)


def available_bytes() -> int | None:
  """Memory one decode may use: the device's limit on an accelerator (JAX's
  `memory_stats()['bytes_limit']`), the host's available memory on a CPU; None if unknown."""
  import jax  # pylint: disable=g-import-not-at-top
  device = jax.devices()[0]
  if device.platform != 'cpu':
    stats = device.memory_stats() or {}
    return stats.get('bytes_limit')
  try:
    import psutil  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return int(psutil.virtual_memory().available)


def check_memory(s: dict, configs, dtype=None) -> None:
  """Raises ValueError, before any checkpoint is read, when `decode_bytes` (a lower bound)
  exceeds `available_bytes`, naming the settings that size it.

  Without this, a `max_decode_len`, `max_input_len`, `batch_size` or γ far too large ends in
  an out-of-memory traceback after the models are loaded.
  """
  need, have = decode_bytes(s, configs, dtype), available_bytes()
  if have is None or need <= have:
    return
  gib = 2 ** 30
  raise ValueError(
      f"This decode needs at least {need / gib:,.1f} GiB (params, KV caches of "
      f"decode.batch_size={s['batch_size']} rows × decode.max_input_len={s['max_input_len']} + "
      f"max(decode.max_decode_len={s['max_decode_len']}, decode.gamma + 1 = {s['gamma'] + 1}) "
      f'positions, logits) but {have / gib:,.1f} GiB are available; lower those settings.')


def _needs_draft(s: dict) -> bool:
  """Whether the job loads a draft model (speculative decoding with 'model' / 'lookup+model')."""
  from specdec_jax.generate import common as generate_common  # pylint: disable=g-import-not-at-top
  return s['method'] == 'speculative' and generate_common.needs_draft_model(s['drafter_spec'])


def _ngram_table(s: dict, pair):
  """The table of a 'bigram' / 'unigram' drafter (None for other drafters)."""
  from specdec_jax.decoding import drafters  # pylint: disable=g-import-not-at-top
  spec = s['drafter_spec']
  if s['method'] != 'speculative' or not isinstance(spec, drafters.NgramTableDrafter):
    if s.get('ngram_table_path'):
      raise ValueError(f"decode.ngram_table_path is set but decode.drafter={s['drafter']!r} "
                       "uses no table; set decode.drafter='bigram' or 'unigram', or drop it.")
    return None
  path = s.get('ngram_table_path')
  if path is None:
    if pair.folder is None:
      raise ValueError(f"decode.drafter={s['drafter']!r} needs decode.ngram_table_path (a "
                       'table from `python -m specdec_jax.drafters.tables`).')
    path = str(pathlib.Path(pair.folder) / f"{s['drafter']}.npz")
  from specdec_jax.drafters import tables  # pylint: disable=g-import-not-at-top
  ids, log_probs, order = tables.load(path, pair.target_config.vocab_size)
  if order != spec.order:
    raise ValueError(f"decode.ngram_table_path {path!r} holds an order-{order} table but "
                     f"decode.drafter={s['drafter']!r}; use a "
                     f"{'bigram' if spec.order == 2 else 'unigram'} table.")
  s['ngram_table_path'] = path
  import jax  # pylint: disable=g-import-not-at-top
  return jax.device_put((ids, log_probs))  # once: not copied to the device on every batch


def _plan(s: dict):
  """The job's `ShardingPlan` (None without decode.mesh_shape); ValueError naming the binding."""
  from specdec_jax import sharding  # pylint: disable=g-import-not-at-top
  if s['mesh_shape'] is None:
    if s['draft_sharding'] != 'replicated' or s['logical_axis_rules'] is not None:
      what = ('decode.draft_sharding' if s['draft_sharding'] != 'replicated'
              else 'decode.logical_axis_rules')
      raise ValueError(f'{what} is set but decode.mesh_shape is None (one device, nothing '
                       'to shard): bind decode.mesh_shape=(data, model), or drop it.')
    return None
  try:
    return sharding.plan_from(s['mesh_shape'], s['logical_axis_rules'], s['draft_sharding'])
  except ValueError as e:  # each message starts with the setting it is about
    raise ValueError(f'decode.{e}') from e


def _checkpoint_source(pair, role: str) -> tuple[str, str, tuple[str, ...]]:
  """(checkpoint path, subtree, excluded children) a role's params are read from.

  A checkpoint that T5X saved for our model classes holds the target's params under
  `target` and the draft's under `target/draft` (`params['draft']`): the target is read
  without that child, and with no draft checkpoint of its own (or the target's named
  again) the draft is read from it.
  """
  if role == 'target':
    return pair.target_checkpoint, 'target', ('draft',)
  if pair.draft_checkpoint is None or pair.draft_checkpoint == pair.target_checkpoint:
    return pair.target_checkpoint, 'target/draft', ()
  return pair.draft_checkpoint, 'target', ()


def _load_models(prepared: Prepared, configs, dtype, binding) -> None:
  import jax  # pylint: disable=g-import-not-at-top
  from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import family  # pylint: disable=g-import-not-at-top
  from specdec_jax.models.config import family_of  # pylint: disable=g-import-not-at-top
  pair = prepared.pair
  families = {role: family_of(cfg) for role, cfg in configs}
  if len(set(families.values())) > 1:
    raise ValueError(f'the target is a {families["target"]} model but the draft a '
                     f'{families["draft"]} one: speculative decoding needs two models of one '
                     'family (the same features and prompt); pair them so.')
  for role, cfg in configs:
    path, subtree, exclude = _checkpoint_source(pair, role)
    role_dtype = pair.draft_dtype if role == 'draft' and pair.draft_dtype is not None else dtype
    try:
      shardings = (prepared.plan.param_shardings(cfg, role) if prepared.plan is not None
                   else None)
      params = checkpoints.load_t5x_checkpoint(path, cfg, dtype=role_dtype, shardings=shardings,
                                               subtree=subtree, exclude=exclude)
      family.check_params(params, cfg)
      if shardings is None:  # Once, here: numpy params are copied to the device per call.
        params = jax.device_put(params)
    except ValueError as e:
      if isinstance(e, checkpoints.MissingSubtree) and subtree == 'target/draft':
        raise ValueError(
            f'No draft checkpoint: {binding("draft")} is not bound, and the target checkpoint '
            f'{path!r} holds no draft under target/draft (where T5X saves params["draft"] '
            f'for SpeculativeEncoderDecoderModel / SpeculativeDecoderOnlyModel); bind '
            f'{binding("draft")}.') from e
      if isinstance(e, checkpoints.DamagedCheckpoint):  # damaged, not mismatched
        raise ValueError(f'{binding(role)} {path!r}: {e}') from e
      what = 'decode.' + role + '_config' if binding(role).startswith('decode.') else (
          'the T5X model gin\'s ' + ('module' if role == 'target' else 'draft_module'))
      raise ValueError(f'{binding(role)} {path!r} does not fit {what}: {e}') from e
    setattr(prepared, f'{role}_model', family.build(cfg))
    setattr(prepared, f'{role}_params', params)
