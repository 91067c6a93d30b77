"""Inputs of the decode job: text / TSV / JSONL files, seqio tasks, built-in examples.

Sources (`read_records`):

* **text** (`.txt` or anything not below): one source segment per line.
* **TSV** (`.tsv`): first column the source, optional second column a reference
  translation (used for BLEU); a third column is an error.
* **JSONL** (`.jsonl`, `.json`): one JSON object a line; the source is the field
  `input_field` (default `inputs`), the optional reference `target_field`
  (default `targets`).
* **seqio task** (`task_name`): the task's `inputs_pretokenized` /
  `targets_pretokenized` features of `task_split`, i.e. the text *after* the
  task's own preprocessors (which already add any task prefix, so the job's
  `prefix` is not applied again).
* **built-in examples** (no file, no task): `specdec_jax/assets/examples_en.txt`,
  eight simple English image-caption-style sentences written for this project.

Files may be gzip-compressed (`.gz` after the extension above); they are read as
UTF-8. A leading UTF-8 byte-order mark (U+FEFF, as some editors write) is removed in
every format; trailing newline and carriage-return characters are stripped, other
whitespace is kept.

Documented behaviour on bad input:

* a missing path raises `FileNotFoundError`, a folder / unreadable / non-UTF-8 file
  raises `ValueError`, both naming the path;
* an **empty (or whitespace-only) source line is an error** (`ValueError` naming
  the file and the 1-based line number): skipping it silently would break the
  "one output line per input line" correspondence;
* text that is not valid Unicode — a **lone UTF-16 surrogate**, which only a JSON
  escape can produce (`"\ud83d"` without its low half `"\ude00"`) — is an error
  (`ValueError` naming file, line and the character position), not repaired:
  guessing the missing half would change the input silently, and SentencePiece
  cannot encode it;
* a source longer than `max_input_len` tokens (prefix and EOS included) is, by
  default, **truncated**: its first `max_input_len − 1` tokens are kept and EOS is
  appended (seqio's `append_eos_after_trim` behaviour); one warning is printed for
  the whole input set and each such example is flagged `truncated`. With
  `on_long_input='error'` it is a `ValueError` naming file and line instead.

Tokenization uses the job's seqio vocabulary (`vocabulary.encode`), appends EOS
and pads every example to the fixed `max_input_len` bucket, so one compiled
program serves every batch (the last batch is padded to `batch_size` by `batches`).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import pathlib
import sys
from typing import Iterator, Optional, Sequence

import numpy as np

from specdec_jax.util import paths

EXAMPLES_PATH = paths.ASSETS_DIR / 'examples_en.txt'
FORMATS = ('auto', 'text', 'tsv', 'jsonl')
BOM = '\ufeff'  # A UTF-8 byte-order mark, decoded.
ON_LONG_INPUT = ('truncate', 'error')


@dataclasses.dataclass(frozen=True)
class Record:
  """One input before tokenization.

  Attributes:
    inputs: the source text as given (without the job's prefix).
    targets: the reference, when the source has one.
    origin: where it came from, e.g. 'inputs.txt:3' (for messages).
    prefixed: True when `inputs` already is the model's input text (seqio tasks),
      so no prefix is added.
  """
  inputs: str
  targets: Optional[str]
  origin: str
  prefixed: bool = False


@dataclasses.dataclass(frozen=True)
class Example:
  """A tokenized input: `tokens` holds the prefix, the source and EOS (no padding)."""
  index: int
  record: Record
  tokens: tuple
  truncated: bool


def detect_format(path: str | os.PathLike) -> str:
  """'tsv' / 'jsonl' / 'text' from the file name (a trailing `.gz` is ignored)."""
  name = pathlib.Path(path).name.lower()
  if name.endswith('.gz'):
    name = name[:-3]
  if name.endswith('.tsv'):
    return 'tsv'
  if name.endswith(('.jsonl', '.json')):
    return 'jsonl'
  return 'text'


def check_input_file(path: str | os.PathLike, binding: str = 'decode.input_path'
                     ) -> pathlib.Path:
  """Raises a clear error unless `path` is a readable file; returns it as a Path.

  `binding` is the setting that named the file (for the message).
  """
  p = pathlib.Path(path).expanduser()
  if not p.exists():
    raise FileNotFoundError(f'Input file {str(p)!r} not found ({binding}).')
  if p.is_dir():
    raise ValueError(f'Input path {str(p)!r} is a folder; {binding} must name a '
                     'text / .tsv / .jsonl file.')
  if not os.access(p, os.R_OK):
    raise ValueError(f'Input file {str(p)!r} is not readable (permission denied).')
  return p


def _read_lines(path: pathlib.Path) -> list[str]:
  opener = gzip.open if path.name.endswith('.gz') else open
  try:
    with opener(path, 'rt', encoding='utf-8', newline='') as f:
      text = f.read()
  except UnicodeDecodeError as e:
    raise ValueError(f'Input file {str(path)!r} is not valid UTF-8 ({e}).') from e
  except (OSError, EOFError) as e:
    raise ValueError(f'Cannot read input file {str(path)!r}: {e}') from e
  text = text.removeprefix(BOM)
  lines = text.split('\n')
  if lines and lines[-1] == '':
    lines.pop()  # The newline that ends the last line.
  return [line.rstrip('\r') for line in lines]


def check_encodable(text: str, origin: str, what: str = 'input') -> None:
  """Raises ValueError (naming `origin` and the position) unless `text` encodes as UTF-8.

  Only lone UTF-16 surrogates (U+D800–U+DFFF, e.g. from a JSON escape `"\ud83d"`
  without its pair) fail; SentencePiece cannot encode them.
  """
  try:
    text.encode('utf-8')
  except UnicodeEncodeError as e:
    char = text[e.start]
    raise ValueError(
        f'{origin}: the {what} holds a lone UTF-16 surrogate U+{ord(char):04X} at character '
        f'{e.start + 1}, which is not a Unicode character (a JSON escape "\\u{ord(char):04x}" '
        'without the other half of its pair?); write the character itself, or both halves '
        '(e.g. "\\ud83d\\ude00" for 😀).') from None


def _empty_line_error(path, lineno, what='input line'):
  return ValueError(
      f'{path}:{lineno}: empty {what}. Every line must hold one source segment (the '
      'output has one line per input line); remove the blank line.')


def read_file(path: str | os.PathLike, input_format: str = 'auto', *,
              input_field: str = 'inputs', target_field: str = 'targets',
              binding: str = 'decode.input_path') -> list[Record]:
  """Reads a text / TSV / JSONL input file (see the module docstring); `binding` names the
  setting that gave `path` in errors."""
  if input_format not in FORMATS:
    raise ValueError(f'decode.input_format must be one of {FORMATS}, got {input_format!r}.')
  p = check_input_file(path, binding)
  fmt = detect_format(p) if input_format == 'auto' else input_format
  records = []
  for lineno, line in enumerate(_read_lines(p), start=1):
    origin = f'{p}:{lineno}'
    if fmt == 'text':
      source, target = line, None
    elif fmt == 'tsv':
      cols = line.split('\t')
      if len(cols) > 2:
        raise ValueError(f'{origin}: {len(cols)} tab-separated columns; a TSV input holds the '
                         'source and optionally a reference (2 columns at most).')
      source = cols[0]
      target = cols[1] if len(cols) == 2 else None
    else:  # jsonl
      if not line.strip():
        raise _empty_line_error(p, lineno, 'JSONL line')
      try:
        obj = json.loads(line)
      except json.JSONDecodeError as e:
        raise ValueError(f'{origin}: not valid JSON ({e}).') from e
      if not isinstance(obj, dict):
        raise ValueError(f'{origin}: expected a JSON object, got {type(obj).__name__}.')
      if input_field not in obj:
        raise ValueError(f'{origin}: no field {input_field!r} (fields: {sorted(obj)}); bind '
                         'decode.input_field to the field holding the source.')
      source = obj[input_field]
      target = obj.get(target_field)
      if not isinstance(source, str) or (target is not None and not isinstance(target, str)):
        raise ValueError(f'{origin}: fields {input_field!r} / {target_field!r} must be strings.')
    if not source.strip():
      raise _empty_line_error(p, lineno, 'source' if fmt != 'text' else 'input line')
    check_encodable(source, origin, 'source')
    if target is not None:
      check_encodable(target, origin, 'reference')
    records.append(Record(source, target, origin))
  if not records:
    raise ValueError(f'Input file {str(p)!r} holds no inputs.')
  return records


def read_task(task_name: str, split: str = 'test',
              max_examples: Optional[int] = None) -> list[Record]:
  """Records of a registered seqio task (or mixture), in the split's order (no shuffling)."""
  from specdec_jax.text import vocabulary
  seqio = vocabulary.import_seqio()
  from specdec_jax.text import tasks  # noqa: F401  (registers the specdec_ende_* tasks)
  try:
    provider = seqio.get_mixture_or_task(task_name)
  except ValueError as e:
    known = sorted(seqio.TaskRegistry.names())
    raise ValueError(f'Unknown seqio task {task_name!r} (decode.task_name); registered: '
                     f'{known}.') from e
  if split not in provider.splits:
    raise ValueError(f'seqio task {task_name!r} has no split {split!r} (decode.task_split); '
                     f'splits: {list(provider.splits)}.')
  ds = provider.get_dataset(sequence_length=None, split=split, shuffle=False, num_epochs=1,
                            use_cached=False)
  if max_examples is not None:
    ds = ds.take(max_examples)
  records = []
  for i, ex in enumerate(ds.as_numpy_iterator()):
    if 'inputs_pretokenized' in ex:
      source = ex['inputs_pretokenized']
    else:  # Fall back to the task's own tokens.
      source = provider.output_features['inputs'].vocabulary.decode(
          [int(t) for t in ex['inputs']])
    source = source.decode('utf-8') if isinstance(source, bytes) else str(source)
    target = ex.get('targets_pretokenized')
    if isinstance(target, bytes):
      target = target.decode('utf-8')
    origin = f'{task_name}[{split}]#{i}'
    if not source.strip():
      raise ValueError(f'{origin}: empty input.')
    records.append(Record(source, target, origin, prefixed=True))
  if not records:
    raise ValueError(f'seqio task {task_name!r} split {split!r} yielded no examples.')
  return records


def read_records(input_path: Optional[str] = None, *, task_name: Optional[str] = None,
                 task_split: str = 'test', max_examples: Optional[int] = None,
                 input_format: str = 'auto', input_field: str = 'inputs',
                 target_field: str = 'targets') -> list[Record]:
  """The job's inputs: a file, a seqio task, or (neither) the built-in examples."""
  if max_examples is not None and (not isinstance(max_examples, int) or max_examples < 1):
    raise ValueError(f'decode.max_examples must be None or an int >= 1, got {max_examples!r}.')
  if input_path and task_name:
    raise ValueError('Bind either decode.input_path or decode.task_name, not both.')
  if task_name:
    return read_task(task_name, task_split, max_examples)
  path = input_path or EXAMPLES_PATH
  records = read_file(path, input_format, input_field=input_field, target_field=target_field)
  return records[:max_examples] if max_examples else records


def tokenize(records: Sequence[Record], vocabulary, *, prefix: str = '', max_input_len: int,
             on_long_input: str = 'truncate', warn_stream=None) -> list[Example]:
  """Encodes `prefix + inputs`, appends EOS, applies the long-input rule (module docstring)."""
  if on_long_input not in ON_LONG_INPUT:
    raise ValueError(f'decode.on_long_input must be one of {ON_LONG_INPUT}, '
                     f'got {on_long_input!r}.')
  if not isinstance(max_input_len, int) or max_input_len < 2:
    raise ValueError(f'decode.max_input_len must be an int >= 2, got {max_input_len!r}.')
  eos = vocabulary.eos_id
  if prefix and any(not rec.prefixed for rec in records):
    n_prefix = len(vocabulary.encode(prefix.rstrip()))
    if n_prefix + 2 > max_input_len:
      raise ValueError(f'decode.max_input_len={max_input_len} leaves no room for the source: '
                       f'the prefix {prefix!r} alone is {n_prefix} tokens, before a source '
                       f'token and EOS; use max_input_len >= {n_prefix + 2} (e.g. 64).')
  examples, truncated = [], []
  for i, rec in enumerate(records):
    text = rec.inputs if rec.prefixed else prefix + rec.inputs
    check_encodable(text, rec.origin)
    ids = [int(t) for t in vocabulary.encode(text)] + [eos]
    cut = len(ids) > max_input_len
    if cut:
      if on_long_input == 'error':
        raise ValueError(f'{rec.origin}: input is {len(ids)} tokens (prefix and EOS '
                         f'included), longer than decode.max_input_len={max_input_len}.')
      ids = ids[:max_input_len - 1] + [eos]
      truncated.append(rec.origin)
    examples.append(Example(i, rec, tuple(ids), cut))
  if truncated:
    print(f'warning: {len(truncated)} input(s) longer than decode.max_input_len='
          f'{max_input_len} tokens were truncated to {max_input_len - 1} tokens + EOS '
          f'(first: {truncated[0]}). Bind decode.max_input_len to a larger bucket, or '
          "decode.on_long_input='error' to refuse them.",
          file=warn_stream or sys.stderr, flush=True)
  return examples


@dataclasses.dataclass(frozen=True)
class Batch:
  """`tokens [batch_size, length]` int32 (length: max_input_len or a bucket); rows
  `n_real…` are padding copies."""
  examples: tuple
  tokens: np.ndarray
  n_real: int


def batches(examples: Sequence[Example], batch_size: int, max_input_len: int,
            length_buckets: Sequence[int] = ()) -> Iterator[Batch]:
  """Batches in input order; the last one is padded with copies of its first row.

  Padding rows repeat a real row (rather than all-padding rows) so that they finish
  decoding no later than it; their outputs are dropped.

  Args:
    examples: tokenized examples (each at most `max_input_len` tokens).
    batch_size: rows per batch.
    max_input_len: the padded length `[batch, max_input_len]` of every batch, unless
      `length_buckets` is given.
    length_buckets: optional increasing lengths; each batch is then padded to the
      smallest bucket (or `max_input_len`) that holds its longest row, so short
      inputs do not pay for encoding padding (one compilation per bucket used).
  Returns:
    An iterator of `Batch` (tokens int32 `[batch_size, length]`).
  Raises:
    ValueError: at the call (not at the first iteration): batch_size or
      max_input_len < 1, a bucket that is not a positive int, or an example longer
      than `max_input_len` (tokenize with the same max_input_len).
  """
  if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
    raise ValueError(f'decode.batch_size must be an int >= 1, got {batch_size!r}.')
  if isinstance(max_input_len, bool) or not isinstance(max_input_len, int) or max_input_len < 1:
    raise ValueError(f'max_input_len must be an int >= 1, got {max_input_len!r}.')
  if not isinstance(length_buckets, (list, tuple)) or any(
      isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in length_buckets):
    raise ValueError(f'length_buckets must be a tuple of positive ints, e.g. (32, 64); got '
                     f'{length_buckets!r}.')
  for ex in examples:
    if len(ex.tokens) > max_input_len:
      raise ValueError(f'{ex.record.origin}: {len(ex.tokens)} tokens exceed max_input_len='
                       f'{max_input_len}; tokenize with the same max_input_len.')
  buckets = sorted({b for b in length_buckets if b < max_input_len} | {max_input_len})
  return _batches(tuple(examples), batch_size, buckets)


def _batches(examples, batch_size: int, buckets) -> Iterator[Batch]:
  for start in range(0, len(examples), batch_size):
    chunk = examples[start:start + batch_size]
    longest = max(len(ex.tokens) for ex in chunk)
    length = next(b for b in buckets if b >= longest)
    tokens = np.zeros((batch_size, length), np.int32)
    for row in range(batch_size):
      ex = chunk[row] if row < len(chunk) else chunk[0]
      tokens[row, :len(ex.tokens)] = ex.tokens
    yield Batch(chunk, tokens, len(chunk))


def tokens_until_eos(row, eos_id: int) -> np.ndarray:
  """A decoded row `[max_decode_len]` cut after its first EOS (EOS kept); whole if none."""
  row = np.asarray(row)
  hits = np.flatnonzero(row == eos_id)
  return row[:hits[0] + 1] if hits.size else row


def num_batches(n: int, batch_size: int) -> int:
  return -(-n // batch_size)
