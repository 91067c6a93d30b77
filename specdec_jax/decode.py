r"""The gin-configured decode job: speculative (or baseline) decoding of a T5 pair to JSONL.

  python -m specdec_jax.decode --gin_file=configs/runs/decode.gin \
      [--gin_file=configs/pairs/t5_1_1_small_to_xxl.gin] [--gin.decode.gamma=5] \
      [--gin.decode.input_path="'my_inputs.txt'"] [--gin.decode.output_path="'out/x.jsonl'"]

Flags: `--gin_file=F` (repeatable; resolved against the working directory, then the
repository root), `--gin.KEY=VALUE` / `--gin_bindings='KEY = VALUE'` (repeatable,
applied after the files, T5X style), `--gin_search_paths=DIR` (repeatable),
`--debug` (show Python tracebacks for configuration errors too).

What it does, in order (everything that can be checked is checked before any
model is loaded or compiled):

1. parses the gin files and bindings — an unknown configurable or parameter is
   reported as gin words it (file / line included) and the job exits with status 2;
2. resolves the model pair (`decode.pair_dir` with `pair.json`, `target/`, `draft/`,
   `vocab/`, or explicit `decode.target_config` / `target_checkpoint` / ... bindings,
   which win), checks the vocabulary and checkpoint paths exist, validates the
   decoding arguments;
3. reads and tokenizes the inputs (`specdec_jax.inputs`: text / TSV / JSONL file,
   seqio task, or the built-in examples) — a missing file, an empty line, ... is an
   error naming the file (and line);
4. loads both checkpoints, checking every param's shape against the T5Config
   before reading data (a mismatch names the param and both shapes);
5. decodes in fixed-shape batches (`batch_size × max_input_len`; the last batch is
   padded with copies of a real row, so one program is compiled), timing a warm-up
   call on the first batch separately (`compile_s`) from the run itself (`run_s`);
6. writes `output_path` (JSONL, one line per input in input order: `inputs`,
   `prediction`, `targets` when known, `target_calls`, `drafted`, `accepted`,
   `tokens`, and `truncated: true` on truncated inputs) and
   `<output_path>.summary.json`, each through a temporary file in the same folder
   renamed into place at the end — an error leaves no partial output; prints the
   summary (examples/s, tokens/s, α = Σ alpha_sum / Σ alpha_count, acceptance rate,
   tokens per target call, compile time, BLEU when every input has a reference).

Exit status: 0 on success, 2 for a configuration / input error (clean one-paragraph
message on stderr), 3 when the default demo pair is not in `specdec_jax/assets/`.

Randomness: with `method='speculative'` row i uses the key
`fold_in(PRNGKey(seed), i)` (i = the example's index in the input), so a sample does
not depend on batch size or on the other inputs. The baseline follows T5X's
`temperature_sample`, which takes one key per batch: `fold_in(PRNGKey(seed),
batch_index)`. At temperature 0 both are greedy and need no randomness; speculative
decoding then reproduces the baseline token for token.

Per-example statistics: `tokens` counts emitted tokens (EOS included);
`target_calls` counts target forward calls while the row was active (the baseline
makes one per token); `drafted` / `accepted` count draft tokens proposed / accepted
(0 for the baseline).
"""

if __name__ == '__main__':
  # Run the package module (not this `__main__` copy), so that the gin configurables
  # below are registered exactly once, under `specdec_jax.decode`.
  import sys as _sys
  from specdec_jax import decode as _decode_module
  _sys.exit(_decode_module.main())

import dataclasses  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any, Optional, Sequence  # noqa: E402

import gin  # noqa: E402

from specdec_jax import flags  # noqa: E402
from specdec_jax import inputs as inputs_lib  # noqa: E402
from specdec_jax import paths  # noqa: E402
from specdec_jax.models import config as config_lib  # noqa: E402
from specdec_jax.models.config import T5Config  # noqa: E402

TRANSLATE_PREFIX = 'translate English to German: '
DEMO_PAIR = 'demo_ende'
METHODS = ('speculative', 'baseline')
EXIT_CONFIG_ERROR = 2
EXIT_DEMO_PAIR_MISSING = 3


def register_configurables() -> None:
  """Registers `network.T5Config` (T5X's name) and the dtype constants with gin, once
  (through `specdec_jax.gin_utils`, the project's one place for T5X-name registrations)."""
  from specdec_jax import gin_utils  # noqa: F401  pylint: disable=g-import-not-at-top


# At import, so that gin files parsed by a library user can say @target/network.T5Config().
register_configurables()


class DemoPairMissing(FileNotFoundError):
  """The default demo pair (specdec_jax/assets/demo_ende) is not shipped / trained yet."""


# ---------------------------------------------------------------------------- the pair

@dataclasses.dataclass(frozen=True)
class PairSpec:
  """What the job needs to know about the model pair (all paths resolved)."""
  name: str
  target_config: Optional[T5Config]
  draft_config: Optional[T5Config]
  target_checkpoint: Optional[str]
  draft_checkpoint: Optional[str]
  vocab_path: Optional[str]


def _is_url(path: str) -> bool:
  return '://' in str(path)


def resolve_path(path) -> Optional[str]:
  """An existing local path (made absolute); else the same relative path under the
  repository root if it exists there; else the path as given. URLs are unchanged."""
  if path is None:
    return None
  path = os.fspath(path)
  if _is_url(path):
    return path
  p = pathlib.Path(path).expanduser()
  if p.exists():
    return str(p.resolve())
  in_repo = paths.REPO_ROOT / p
  return str(in_repo.resolve()) if not p.is_absolute() and in_repo.exists() else str(p)


def _as_config(value, what: str) -> Optional[T5Config]:
  if value is None or isinstance(value, T5Config):
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


def _config_from_dict(d: dict, what: str) -> T5Config:
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  fields = {f.name for f in dataclasses.fields(T5Config)}
  unknown = sorted(set(d) - fields)
  if unknown:
    raise ValueError(f'{what}: unknown T5Config fields {unknown}.')
  d = dict(d)
  if 'dtype' in d:
    d['dtype'] = jnp.dtype(d['dtype']).type
  if 'mlp_activations' in d:
    d['mlp_activations'] = tuple(d['mlp_activations'])
  return T5Config(**d)


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
  return PairSpec(name, target_config, draft_config, resolve_path(target_checkpoint),
                  resolve_path(draft_checkpoint), resolve_path(vocab_path))


def load_vocabulary(path: Optional[str], extra_ids: int = 100):
  """`seqio.SentencePieceVocabulary` of a `.model` file (or a folder holding exactly one)."""
  if not path:
    raise ValueError("No vocabulary: bind decode.vocab_path='/path/to/sentencepiece.model'.")
  p = pathlib.Path(path)
  if p.is_dir():
    models = sorted(p.glob('*.model'))
    if len(models) != 1:
      raise FileNotFoundError(f'Expected one SentencePiece .model file in {str(p)!r} '
                              f'(decode.vocab_path), found {len(models)}.')
    p = models[0]
  if not p.is_file():
    raise FileNotFoundError(f'SentencePiece model {str(p)!r} not found (decode.vocab_path); '
                            "bind decode.vocab_path='/path/to/sentencepiece.model'.")
  import seqio  # pylint: disable=g-import-not-at-top
  vocab = seqio.SentencePieceVocabulary(str(p), extra_ids=extra_ids)
  try:
    vocab.vocab_size  # Loads the model now, so a broken file fails before compiling.
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f'Cannot load SentencePiece model {str(p)!r}: {e}') from e
  return vocab


def check_output_path(output_path: str) -> pathlib.Path:
  if not output_path:
    raise ValueError("Bind decode.output_path='out/predictions.jsonl' (the JSONL to write).")
  p = pathlib.Path(output_path).expanduser()
  if p.is_dir():
    raise ValueError(f'decode.output_path {str(p)!r} is a folder; name a .jsonl file.')
  ancestor = p.parent
  while not ancestor.exists():
    ancestor = ancestor.parent
  if not ancestor.is_dir() or not os.access(ancestor, os.W_OK):
    raise ValueError(f'Cannot write decode.output_path {str(p)!r}: {str(ancestor)!r} is not '
                     'a writable folder.')
  return p


def _check_checkpoint(path: Optional[str], role: str) -> None:
  if path is None:
    raise ValueError(f"No {role} checkpoint: bind decode.{role}_checkpoint='/path/to/"
                     "checkpoint_<step>' (a T5X checkpoint folder, or a model folder holding "
                     'checkpoint_<step>/ folders; gs:// paths work for the T5X layouts).')
  from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
  try:
    checkpoints.find_checkpoint(path)
  except FileNotFoundError as e:
    raise FileNotFoundError(f'decode.{role}_checkpoint: {e}') from e
  except ValueError as e:
    raise ValueError(f'decode.{role}_checkpoint: {e}') from e


def _dtype(name):
  if name is None:
    return None
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  try:
    return jnp.dtype(name)
  except TypeError as e:
    raise ValueError(f'decode.checkpoint_dtype: unknown dtype {name!r}.') from e


# ---------------------------------------------------------------------------- the job

@dataclasses.dataclass
class Prepared:
  """Everything `run_decode` needs: validated settings, loaded models and tokenized inputs."""
  settings: dict
  pair: PairSpec
  vocab: Any
  examples: list
  target_model: Any = None
  target_params: Any = None
  draft_model: Any = None
  draft_params: Any = None
  output_path: Optional[pathlib.Path] = None


@gin.configurable(denylist=['prepare_only'])
def decode(output_path: str = 'out/decode/predictions.jsonl',
           # The model pair.
           pair_dir: Optional[str] = DEMO_PAIR,
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
           prefix: str = TRANSLATE_PREFIX,
           max_input_len: int = 64,
           on_long_input: str = 'truncate',
           # Decoding.
           method: str = 'speculative',
           gamma: int = 4,
           temperature: float = 0.0,
           topk: int = 0,
           topp: float = 0.0,
           batch_size: int = 8,
           max_decode_len: int = 64,
           seed: int = 0,
           warmup: bool = True,
           progress: Optional[bool] = None,
           print_predictions: int = 10,
           prepare_only: bool = False):
  """Decodes the inputs with the model pair and writes JSONL + summary (module docstring).

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
    checkpoint_dtype: e.g. 'bfloat16' to cast params when loading (None: as stored).
    input_path, input_format, input_field, target_field: see `specdec_jax.inputs`;
      no input_path and no task_name → the built-in example sentences.
    task_name, task_split, max_examples: a registered seqio task (e.g.
      'specdec_ende_multi30k') and split; at most max_examples inputs.
    prefix: prepended to every file input (not to seqio task inputs).
    max_input_len: the fixed encoder length; longer inputs follow on_long_input
      ('truncate': keep max_input_len − 1 tokens + EOS, warn once; 'error').
    method: 'speculative' or 'baseline' (T5X-style one-token-per-call decoding).
    gamma: γ, draft tokens per round.
    temperature, topk, topp: sampling (0 = greedy; at most one of topk / topp).
    batch_size: rows per call (the last batch is padded to it).
    max_decode_len: decoded tokens per input at most.
    seed: PRNG seed.
    warmup: time a first call on the first batch separately as `compile_s`
      (costs one extra batch of decoding); False: `run_s` includes compilation.
    progress: tqdm bar (None: when there is more than one batch).
    print_predictions: print the first this many `input → prediction` pairs to
      stdout before the summary (0: none).
    prepare_only: stop after validation and loading and return the `Prepared`
      job (not bindable; `main` uses it to report configuration errors cleanly).
  Returns:
    The summary dict (or the `Prepared` job with prepare_only).
  """
  settings = dict(
      output_path=output_path, pair_dir=pair_dir, extra_ids=extra_ids,
      checkpoint_dtype=checkpoint_dtype, input_path=input_path, input_format=input_format,
      input_field=input_field, target_field=target_field, task_name=task_name,
      task_split=task_split, max_examples=max_examples, prefix=prefix,
      max_input_len=max_input_len, on_long_input=on_long_input, method=method, gamma=gamma,
      temperature=temperature, topk=topk, topp=topp, batch_size=batch_size,
      max_decode_len=max_decode_len, seed=seed, warmup=warmup, progress=progress,
      print_predictions=print_predictions)
  prepared = prepare(settings, target_config=target_config, draft_config=draft_config,
                     target_checkpoint=target_checkpoint, draft_checkpoint=draft_checkpoint,
                     vocab_path=vocab_path)
  return prepared if prepare_only else run_decode(prepared)


def _validate_settings(s: dict) -> None:
  from specdec_jax import sampling  # pylint: disable=g-import-not-at-top
  if s['method'] not in METHODS:
    raise ValueError(f"decode.method must be one of {METHODS}, got {s['method']!r}.")
  for key, low in (('gamma', 1), ('batch_size', 1), ('max_decode_len', 1),
                   ('max_input_len', 2), ('extra_ids', 0)):
    v = s[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < low:
      raise ValueError(f'decode.{key} must be an int >= {low}, got {v!r}.')
  if not isinstance(s['seed'], int):
    raise ValueError(f"decode.seed must be an int, got {s['seed']!r}.")
  if not isinstance(s['temperature'], (int, float)) or isinstance(s['temperature'], bool):
    raise ValueError(f"decode.temperature must be a number, got {s['temperature']!r}.")
  try:
    sampling.validate_sampling_args(s['temperature'], s['topk'], s['topp'])
  except ValueError as e:
    raise ValueError(f'decode: {e}') from e
  if s['on_long_input'] not in inputs_lib.ON_LONG_INPUT:
    raise ValueError(f'decode.on_long_input must be one of {inputs_lib.ON_LONG_INPUT}, '
                     f"got {s['on_long_input']!r}.")
  if s['input_format'] not in inputs_lib.FORMATS:
    raise ValueError(f'decode.input_format must be one of {inputs_lib.FORMATS}, '
                     f"got {s['input_format']!r}.")


def prepare(settings: dict, *, target_config=None, draft_config=None, target_checkpoint=None,
            draft_checkpoint=None, vocab_path=None, load_models: bool = True) -> Prepared:
  """Steps 2–4 of the job: validate, read inputs, load checkpoints (nothing compiled)."""
  s = settings
  _validate_settings(s)
  output = check_output_path(s['output_path'])
  need_draft = s['method'] == 'speculative'
  # Input files are checked first: a typo there should not wait for anything else.
  if s['input_path'] and not s['task_name']:
    inputs_lib.check_input_file(s['input_path'])
  pair = resolve_pair(s['pair_dir'], target_config=target_config, draft_config=draft_config,
                      target_checkpoint=target_checkpoint, draft_checkpoint=draft_checkpoint,
                      vocab_path=vocab_path, need_draft=need_draft)
  if pair.target_config is None:
    raise ValueError('No target model config: bind decode.target_config = '
                     '@target/network.T5Config() (and target/network.T5Config.* sizes), or '
                     'decode.pair_dir to a folder with pair.json.')
  if need_draft and pair.draft_config is None:
    raise ValueError('No draft model config: bind decode.draft_config = '
                     '@draft/network.T5Config(), or decode.pair_dir.')
  _check_checkpoint(pair.target_checkpoint, 'target')
  if need_draft:
    _check_checkpoint(pair.draft_checkpoint, 'draft')
  dtype = _dtype(s['checkpoint_dtype'])
  vocab = load_vocabulary(pair.vocab_path, s['extra_ids'])
  configs = [('target', pair.target_config)] + ([('draft', pair.draft_config)]
                                               if need_draft else [])
  for role, cfg in configs:
    if vocab.vocab_size > cfg.vocab_size:
      raise ValueError(f'The vocabulary ({vocab.vocab_size} ids with extra_ids) is larger than '
                       f'the {role} model\'s vocab_size={cfg.vocab_size}; wrong '
                       'decode.vocab_path or T5Config?')
  records = inputs_lib.read_records(
      s['input_path'], task_name=s['task_name'], task_split=s['task_split'],
      max_examples=s['max_examples'], input_format=s['input_format'],
      input_field=s['input_field'], target_field=s['target_field'])
  examples = inputs_lib.tokenize(records, vocab, prefix=s['prefix'],
                                 max_input_len=s['max_input_len'],
                                 on_long_input=s['on_long_input'])
  prepared = Prepared(s, pair, vocab, examples, output_path=output)
  if load_models:
    from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
    from specdec_jax.models import t5  # pylint: disable=g-import-not-at-top
    for role, cfg in configs:
      path = getattr(pair, f'{role}_checkpoint')
      try:
        params = checkpoints.load_t5x_checkpoint(path, cfg, dtype=dtype)
        t5.check_params(params, cfg)
      except ValueError as e:
        raise ValueError(f'decode.{role}_checkpoint {path!r} does not fit decode.{role}_config: '
                         f'{e}') from e
      setattr(prepared, f'{role}_model', t5.Transformer(cfg))
      setattr(prepared, f'{role}_params', params)
  return prepared


def _decode_batch(p: Prepared, batch: inputs_lib.Batch, batch_index: int):
  """One call; returns host arrays (decodes [B, L], stats dict of [B] int/float arrays)."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from specdec_jax import generate  # pylint: disable=g-import-not-at-top
  s = p.settings
  eos = p.vocab.eos_id
  base = jax.random.PRNGKey(s['seed'])
  kwargs = dict(eos_id=eos, temperature=s['temperature'], topk=s['topk'], topp=s['topp'])
  if s['method'] == 'speculative':
    idx = [ex.index for ex in batch.examples]
    idx += [idx[0]] * (batch.tokens.shape[0] - len(idx))
    keys = jax.vmap(lambda i: jax.random.fold_in(base, i))(np.asarray(idx, np.uint32))
    decodes, _, stats = generate.t5_speculative_generate(
        p.target_model, p.target_params, p.draft_model, p.draft_params, batch.tokens,
        s['max_decode_len'], s['gamma'], decode_rng=keys, real_vocab_size=p.vocab.vocab_size,
        **kwargs)
    decodes, stats = jax.device_get((decodes, stats))
    out = {k: np.asarray(getattr(stats, k))[:, 0]
           for k in ('target_calls', 'drafted', 'accepted', 'alpha_sum', 'alpha_count', 'tokens')}
  else:
    decodes, _ = generate.t5_generate(p.target_model, p.target_params, batch.tokens,
                                      s['max_decode_len'],
                                      decode_rng=jax.random.fold_in(base, batch_index), **kwargs)
    decodes = jax.device_get(decodes)
    tokens = np.array([len(inputs_lib.tokens_until_eos(r, eos))
                       for r in np.asarray(decodes)[:, 0]])
    zeros = np.zeros_like(tokens)
    out = dict(target_calls=tokens, drafted=zeros, accepted=zeros,
               alpha_sum=zeros.astype(np.float32), alpha_count=zeros, tokens=tokens)
  return np.asarray(decodes)[:, 0], out


def _atomic_writer(path: pathlib.Path):
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.', suffix='.tmp')
  return os.fdopen(fd, 'w', encoding='utf-8'), pathlib.Path(tmp)


def run_decode(p: Prepared) -> dict:
  """Steps 5–6: warm-up, decode every batch, write the outputs atomically, summarize."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  s = p.settings
  n_batches = inputs_lib.num_batches(len(p.examples), s['batch_size'])
  show = s['progress'] if s['progress'] is not None else n_batches > 1
  batches = inputs_lib.batches(p.examples, s['batch_size'], s['max_input_len'])

  compile_s = warmup_s = None
  first = next(inputs_lib.batches(p.examples, s['batch_size'], s['max_input_len']))
  if s['warmup']:
    t0 = time.perf_counter()
    _decode_batch(p, first, 0)
    warmup_s = time.perf_counter() - t0

  tmp_paths = []
  out_file, tmp = _atomic_writer(p.output_path)
  tmp_paths.append(tmp)
  try:
    totals = dict(target_calls=0, drafted=0, accepted=0, alpha_sum=0.0, alpha_count=0,
                  tokens=0)
    predictions, references = [], []
    batch_times = []
    shown = []
    t_run = time.perf_counter()
    with out_file, tqdm(total=n_batches, unit='batch', disable=not show, file=sys.stderr,
                        dynamic_ncols=True) as bar:
      for bi, batch in enumerate(batches):
        t0 = time.perf_counter()
        decodes, stats = _decode_batch(p, batch, bi)
        batch_times.append(time.perf_counter() - t0)
        for row, ex in enumerate(batch.examples):
          pred = p.vocab.decode([int(t) for t in decodes[row]])
          rec = {'inputs': ex.record.inputs, 'prediction': pred}
          if ex.record.targets is not None:
            rec['targets'] = ex.record.targets
          for key in ('target_calls', 'drafted', 'accepted', 'tokens'):
            rec[key] = int(stats[key][row])
          if ex.truncated:
            rec['truncated'] = True
          out_file.write(json.dumps(rec, ensure_ascii=False) + '\n')
          for key in totals:
            totals[key] += stats[key][row].item()
          predictions.append(pred)
          references.append(ex.record.targets)
          if len(shown) < s['print_predictions']:
            shown.append((ex.record.inputs, pred))
        bar.update(1)
    run_s = time.perf_counter() - t_run
    if warmup_s is not None:
      compile_s = max(0.0, warmup_s - batch_times[0])

    n = len(p.examples)
    summary = {
        'output': str(p.output_path),
        'method': s['method'],
        'pair': p.pair.name,
        'target_checkpoint': p.pair.target_checkpoint,
        'draft_checkpoint': p.pair.draft_checkpoint if s['method'] == 'speculative' else None,
        'vocab_path': p.pair.vocab_path,
        'input': (f"task:{s['task_name']}[{s['task_split']}]" if s['task_name']
                  else str(s['input_path'] or inputs_lib.EXAMPLES_PATH)),
        'gamma': s['gamma'] if s['method'] == 'speculative' else None,
        'temperature': s['temperature'], 'topk': s['topk'], 'topp': s['topp'],
        'seed': s['seed'], 'batch_size': s['batch_size'],
        'max_input_len': s['max_input_len'], 'max_decode_len': s['max_decode_len'],
        'examples': n, 'batches': n_batches,
        'padding_rows': n_batches * s['batch_size'] - n,
        'truncated_inputs': sum(ex.truncated for ex in p.examples),
        'compile_s': compile_s, 'warmup_s': warmup_s, 'run_s': run_s,
        'run_includes_compile': not s['warmup'],
        'examples_per_s': n / run_s if run_s > 0 else None,
        'tokens_per_s': totals['tokens'] / run_s if run_s > 0 else None,
        'tokens': int(totals['tokens']), 'target_calls': int(totals['target_calls']),
        'drafted': int(totals['drafted']), 'accepted': int(totals['accepted']),
        'alpha': (totals['alpha_sum'] / totals['alpha_count']
                  if totals['alpha_count'] else None),
        'acceptance_rate': (totals['accepted'] / totals['drafted']
                            if totals['drafted'] else None),
        'tokens_per_target_call': (totals['tokens'] / totals['target_calls']
                                   if totals['target_calls'] else None),
        'bleu': None,
        'devices': _devices(),
    }
    if references and all(r is not None for r in references):
      import sacrebleu  # pylint: disable=g-import-not-at-top
      summary['bleu'] = sacrebleu.corpus_bleu(predictions, [references]).score
    summary_path = summary_path_for(p.output_path)
    sum_file, sum_tmp = _atomic_writer(summary_path)
    tmp_paths.append(sum_tmp)
    with sum_file:
      json.dump(summary, sum_file, indent=2, default=_json_default)
      sum_file.write('\n')
    os.replace(tmp, p.output_path)
    os.replace(sum_tmp, summary_path)
  except BaseException:
    for t in tmp_paths:
      t.unlink(missing_ok=True)
    raise
  for source, pred in shown:
    print(f'{source}\n  → {pred}')
  if shown:
    print()
  print_summary(summary)
  return summary


def summary_path_for(output_path) -> pathlib.Path:
  output_path = pathlib.Path(output_path)
  return output_path.with_name(output_path.name + '.summary.json')


def _devices() -> str:
  import jax  # pylint: disable=g-import-not-at-top
  devs = jax.devices()
  return f'{len(devs)} x {devs[0].device_kind}' if devs else 'none'


def _json_default(x):
  if hasattr(x, 'item'):
    return x.item()
  return str(x)


def print_summary(summary: dict, stream=None) -> None:
  stream = stream or sys.stdout

  def fmt(v, spec='.3f'):
    if v is None:
      return '-'
    return format(v, spec) if isinstance(v, float) and math.isfinite(v) else str(v)

  rows = [
      ('method', summary['method'] + (f" (gamma={summary['gamma']})"
                                      if summary['gamma'] else '')),
      ('examples', f"{summary['examples']} in {summary['batches']} batch(es) of "
                   f"{summary['batch_size']}"),
      ('compile', f"{fmt(summary['compile_s'], '.2f')} s" + (
          ' (not separated: decode.warmup=False)' if summary['run_includes_compile'] else '')),
      ('run', f"{fmt(summary['run_s'], '.2f')} s"),
      ('examples/s', fmt(summary['examples_per_s'], '.2f')),
      ('tokens/s', fmt(summary['tokens_per_s'], '.1f')),
      ('tokens', str(summary['tokens'])),
      ('target calls', str(summary['target_calls'])),
      ('tokens / target call', fmt(summary['tokens_per_target_call'])),
      ('alpha', fmt(summary['alpha'])),
      ('acceptance rate', fmt(summary['acceptance_rate'])),
      ('BLEU', fmt(summary['bleu'], '.2f')),
      ('truncated inputs', str(summary['truncated_inputs'])),
      ('output', summary['output']),
  ]
  width = max(len(k) for k, _ in rows)
  for k, v in rows:
    print(f'{k:<{width}}  {v}', file=stream)
  print(f"{'summary':<{width}}  {summary_path_for(summary['output'])}", file=stream, flush=True)


# ---------------------------------------------------------------------------- command line

def parse_flags(argv: Sequence[str]) -> tuple[list[str], list[str], list[str], bool]:
  """(gin files, bindings, search paths, debug) from T5X-style flags (`specdec_jax.flags`)."""
  f = flags.parse_gin_flags(
      argv, 'python -m specdec_jax.decode',
      'Speculative (or baseline) decoding of a T5 pair, gin-configured (every decode.* '
      'argument is listed in configs/runs/decode.gin).', '--gin.decode.gamma=5')
  return f.gin_files, f.bindings, f.search_paths, f.debug


def parse_gin(files: Sequence[str], bindings: Sequence[str],
              search_paths: Sequence[str] = ()) -> None:
  """Clears gin, registers our configurables and parses files then bindings."""
  register_configurables()
  gin.clear_config()
  for p in ['.', *search_paths, str(paths.REPO_ROOT)]:
    gin.add_config_file_search_path(p)
  resolved = []
  for f in files:
    r = resolve_path(f)
    if not _is_url(r) and not pathlib.Path(r).is_file():
      raise FileNotFoundError(f'gin file {f!r} not found (looked in the working directory '
                              f'and {paths.REPO_ROOT}).')
    resolved.append(r)
  # gin's optional package-resource reader logs "Path not found" for every search
  # path an `include` is not under before the one it is found in; that is noise here.
  root_logger = logging.getLogger()
  quiet = _DropMessages('Path not found:')
  root_logger.addFilter(quiet)
  try:
    gin.parse_config_files_and_bindings(resolved, bindings)
  finally:
    root_logger.removeFilter(quiet)


class _DropMessages(logging.Filter):

  def __init__(self, prefix: str):
    super().__init__()
    self.prefix = prefix

  def filter(self, record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(self.prefix)


def run(argv: Sequence[str]) -> dict:
  """Parses flags and gin, then runs `decode()`; raises on any error (no sys.exit)."""
  files, bindings, search_paths, _ = parse_flags(argv)
  parse_gin(files, bindings, search_paths)
  return decode()


def _error(msg: str) -> None:
  # gin appends "In call to configurable 'decode' (<function ...>)" to errors raised
  # inside a configurable; the message already names the binding, so drop that line.
  lines = [line for line in str(msg).splitlines()
           if not re.match(r"\s*In call to configurable '[^']*' \(<", line)]
  print('specdec_jax.decode: error: ' + '\n'.join(lines), file=sys.stderr, flush=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Command-line entry point; returns the exit status (see module docstring)."""
  argv = sys.argv[1:] if argv is None else argv
  files, bindings, search_paths, debug = parse_flags(argv)
  try:
    parse_gin(files, bindings, search_paths)
  except Exception as e:  # pylint: disable=broad-except  (any gin parse failure is a config error)
    if debug:
      raise
    _error(f'invalid gin configuration: {flags.gin_error_message(e, bindings)}')
    return EXIT_CONFIG_ERROR
  try:
    prepared = decode(prepare_only=True)
  except DemoPairMissing as e:
    if debug:
      raise
    _error(str(e))
    return EXIT_DEMO_PAIR_MISSING
  except (FileNotFoundError, ValueError, PermissionError, KeyError) as e:
    if debug:
      raise
    _error(str(e) if not isinstance(e, KeyError) else str(e.args[0]))
    return EXIT_CONFIG_ERROR
  run_decode(prepared)
  return 0
