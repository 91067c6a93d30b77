"""English→German parallel text into T5X-style, length-bucketed training batches.

Each example becomes the T5X feature dict

  encoder_input_tokens   [L]  tokens of "translate English to German: <en>" + EOS (1)
  decoder_target_tokens  [L]  tokens of "<de>" + EOS (1)
  decoder_input_tokens   [L]  decoder_target_tokens shifted right, starting with 0
  decoder_loss_weights   [L]  1.0 on real target tokens (EOS included), 0.0 on padding

padded with 0 to the length L of its bucket: the smallest bucket (default 32 or
48) that holds both sides. Examples longer than the largest bucket are
truncated to it (keeping the final EOS), as seqio's trim-and-pad does; on
Multi30K train that touches 24 of 29,000 pairs. Batches hold examples of one
bucket only, so the training step compiles once per bucket. Every epoch is
reshuffled with `seed + epoch`; a bucket's last, partial batch is filled with
all-zero rows (zero loss weight) so shapes stay fixed and no example is dropped.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import pathlib
from typing import Iterator, Sequence

import numpy as np

from specdec_jax.train import subword
from specdec_jax.text.vocabulary import EOS_ID, TRANSLATE_PREFIX, read_lines

FEATURES = ('encoder_input_tokens', 'decoder_input_tokens', 'decoder_target_tokens',
            'decoder_loss_weights')


def _find(root: pathlib.Path, stem: str) -> pathlib.Path:
  for suffix in ('.gz', ''):
    path = root / f'{stem}{suffix}'
    if path.exists():
      return path
  raise FileNotFoundError(f'Neither {stem}.gz nor {stem} exists under {root}.')


def read_parallel(split: str, data_dir: str | os.PathLike | None = None,
                  src: str = 'en', tgt: str = 'de', limit: int | None = None
                  ) -> tuple[list[str], list[str]]:
  """Line-aligned (source, target) sentences of a shared-data split such as 'ende/multi30k/train'."""
  from specdec_jax.util import paths
  root = pathlib.Path(data_dir) if data_dir else paths.data_dir()
  sources = read_lines(_find(root, f'{split}.{src}'))
  targets = read_lines(_find(root, f'{split}.{tgt}'))
  if len(sources) != len(targets):
    raise ValueError(f'{split}: {len(sources)} {src} lines but {len(targets)} {tgt} lines.')
  if limit is not None:
    sources, targets = sources[:limit], targets[:limit]
  return sources, targets


def encode_inputs(processor, sentences: Sequence[str], prefix: str = TRANSLATE_PREFIX
                  ) -> list[list[int]]:
  """Token ids of `prefix + sentence`, EOS appended (no padding)."""
  return [ids + [EOS_ID] for ids in processor.encode([prefix + s for s in sentences])]


def encode_targets(processor, sentences: Sequence[str]) -> list[list[int]]:
  return [ids + [EOS_ID] for ids in processor.encode(list(sentences))]


def pad_batch(seqs: Sequence[Sequence[int]], length: int) -> np.ndarray:
  """int32 [len(seqs), length], truncated (last token kept as EOS) or padded with 0."""
  out = np.zeros((len(seqs), length), np.int32)
  for i, s in enumerate(seqs):
    s = list(s)
    if len(s) > length:
      s = s[:length - 1] + [EOS_ID]
    out[i, :len(s)] = s
  return out


def make_features(inputs: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                  length: int) -> dict[str, np.ndarray]:
  """T5X feature dict for one batch, every feature `[batch, length]`."""
  enc = pad_batch(inputs, length)
  tgt = pad_batch(targets, length)
  dec_in = np.zeros_like(tgt)
  dec_in[:, 1:] = tgt[:, :-1]
  return {
      'encoder_input_tokens': enc,
      'decoder_input_tokens': dec_in,
      'decoder_target_tokens': tgt,
      'decoder_loss_weights': (tgt > 0).astype(np.float32),
  }


def make_prefix_lm_features(inputs: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                            length: int, bidirectional: bool = True) -> dict[str, np.ndarray]:
  """T5X's decoder-only features (seqio `DecoderFeatureConverter`, inputs and targets, no
  packing) for one batch, every feature `[batch, length]`.

  A row is `inputs ++ targets` (`decoder_target_tokens`), shifted right with BOS 0
  (`decoder_input_tokens`); `decoder_loss_weights` covers the targets only (T5X's
  `loss_on_targets_only`); `decoder_causal_attention` is 1 on positions 0 … len(inputs)
  (the inputs, shifted, plus the position whose output is the first target) and is only
  included when `bidirectional` (prefix LM). A row longer than `length` keeps its inputs
  and loses the end of its targets (the last kept token set to EOS).
  """
  batch = len(inputs)
  tgt = np.zeros((batch, length), np.int32)
  weights = np.zeros((batch, length), np.float32)
  causal = np.zeros((batch, length), np.int32)
  for b, (x, y) in enumerate(zip(inputs, targets)):
    x, y = list(x)[:length - 1], list(y)
    row = x + y
    if len(row) > length:
      row = row[:length - 1] + [EOS_ID]
    tgt[b, :len(row)] = row
    weights[b, len(x):len(row)] = 1.0
    causal[b, :len(x) + 1] = 1
  dec_in = np.zeros_like(tgt)
  dec_in[:, 1:] = tgt[:, :-1]
  feats = {'decoder_input_tokens': dec_in, 'decoder_target_tokens': tgt,
           'decoder_loss_weights': weights}
  if bidirectional:
    feats['decoder_causal_attention'] = causal
  return feats


@dataclasses.dataclass
class BucketedDataset:
  """Tokenized parallel data, grouped into fixed length buckets.

  Iterate with `batches(epoch)`; `steps_per_epoch` batches per epoch.
  """
  inputs: list[list[int]]
  targets: list[list[int]]
  batch_size: int
  buckets: tuple[int, ...] = (32, 48)
  seed: int = 0
  # Decoder-only features (`make_prefix_lm_features`): None = encoder–decoder features;
  # 'prefix_lm' or 'causal' = inputs ++ targets in one sequence (bucketed by the sum).
  decoder_only: str | None = None

  def __post_init__(self):
    self.buckets = tuple(sorted(self.buckets))
    if self.decoder_only not in (None, 'prefix_lm', 'causal'):
      raise ValueError(f"decoder_only must be None, 'prefix_lm' or 'causal', got "
                       f'{self.decoder_only!r}.')
    size = ((lambda i, t: len(i) + len(t)) if self.decoder_only
            else (lambda i, t: max(len(i), len(t))))
    self._bucket_of = np.array([
        next((b for b in self.buckets if size(i, t) <= b), self.buckets[-1])
        for i, t in zip(self.inputs, self.targets)], np.int32)

  @property
  def steps_per_epoch(self) -> int:
    return sum(-(-int((self._bucket_of == b).sum()) // self.batch_size) for b in self.buckets)

  def batch_plan(self, epoch: int) -> list[tuple[int, np.ndarray]]:
    """The epoch's batches as (bucket length, example indices), in a seeded random order."""
    rng = np.random.default_rng([self.seed, epoch])
    plan = []
    for b in self.buckets:
      idx = np.flatnonzero(self._bucket_of == b)
      idx = idx[rng.permutation(len(idx))]
      plan.extend((b, idx[s:s + self.batch_size]) for s in range(0, len(idx), self.batch_size))
    order = rng.permutation(len(plan))
    return [plan[i] for i in order]

  def batches(self, epoch: int, start: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """Feature dicts of `epoch`, from its `start`-th batch; every batch has `batch_size` rows."""
    for length, idx in self.batch_plan(epoch)[start:]:
      rows_in, rows_out = [self.inputs[i] for i in idx], [self.targets[i] for i in idx]
      if self.decoder_only:
        feats = make_prefix_lm_features(rows_in, rows_out, length,
                                        bidirectional=self.decoder_only == 'prefix_lm')
      else:
        feats = make_features(rows_in, rows_out, length)
      missing = self.batch_size - len(idx)
      if missing:
        feats = {k: np.concatenate([v, np.zeros((missing, length), v.dtype)])
                 for k, v in feats.items()}
      yield feats


TRUNCATED_TARGETS = ('keep', 'drop', 'gold')
LOOP_NGRAM = 3  # the n of `loop_repeats`: a token trigram repeated is a loop's signature


def repeats_ngram(row: Sequence[int], times: int, n: int = LOOP_NGRAM) -> bool:
  """Whether some token n-gram occurs at least `times` times in `row` (overlaps counted).

  A loop that ended before the length limit (e.g. "U-Bahn-Bahn-Bahn ." closed by an EOS)
  repeats its n-grams; `load_dataset(loop_repeats=...)` treats such lines as truncated.
  """
  counts = collections.Counter(tuple(row[i:i + n]) for i in range(len(row) - n + 1))
  return max(counts.values(), default=0) >= times


def _decode_limit(path) -> int:
  """The `max_decode_len` a distillation file was decoded with (its `.summary.json`)."""
  summary = pathlib.Path(str(path) + '.summary.json')
  try:
    value = json.loads(summary.read_text(encoding='utf-8'))['max_decode_len']
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f'targets_path {path}: truncated_targets needs its summary {summary} '
                     f"(written by distill_data) with max_decode_len ({e}); regenerate the "
                     "file or use truncated_targets='keep'.") from None
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f'{summary}: max_decode_len must be a positive int, got {value!r}.')
  return value


def read_target_ids(path: str | os.PathLike) -> list[list[int]]:
  """Token-id lines (space-separated ints, EOS excluded) as written by `specdec_jax.train.distill_data`."""
  lines = pathlib.Path(path).read_text(encoding='utf-8').splitlines()
  out = []
  for n, line in enumerate(lines, 1):
    try:
      out.append([int(t) for t in line.split()])
    except ValueError as e:
      raise ValueError(f'{path}:{n}: not a line of space-separated token ids ({e}).') from None
  return out


def load_dataset(processor, split: str = 'ende/multi30k/train', batch_size: int = 128,
                 buckets: Sequence[int] = (32, 48), seed: int = 0,
                 data_dir: str | os.PathLike | None = None, limit: int | None = None,
                 targets_path: str | os.PathLike | Sequence[str | os.PathLike] | None = None,
                 subword_samples: int = 0, subword_alpha: float = 0.3,
                 subword_cache: str | os.PathLike | None = None,
                 source_suffix: str = 'en', target_suffix: str = 'de',
                 input_prefix: str = TRANSLATE_PREFIX,
                 decoder_only: str | None = None,
                 truncated_targets: str = 'keep',
                 loop_repeats: int = 0) -> BucketedDataset:
  """Reads, tokenizes and buckets a line-aligned split (default: shared-data EN→DE).

  `decoder_only` ('prefix_lm' or 'causal') makes decoder-only features
  (`make_prefix_lm_features`), bucketed by input + target length.

  The split's files are `<data_dir>/<split>.<source_suffix>[.gz]` and
  `.<target_suffix>[.gz]`; `input_prefix` is put before every source (T5's task prefix;
  the synthetic correction data of `train.gec_data` uses suffixes `src`/`tgt`).

  With `targets_path` (a file of token-id lines aligned with the split's sources, e.g.
  a target model's greedy outputs for sequence-level distillation) those ids replace
  the gold German side (EOS appended here). A sequence of such files (e.g. the
  target's greedy and its sampled outputs) gives one example per source and file:
  the sources are repeated once per file, and an epoch covers all of them.
  `truncated_targets` says what happens to a line that reached its decoder's
  `max_decode_len` (read from the `<file>.summary.json` that `distill_data` writes beside
  it: such a line is a repetition loop cut off, with no EOS): 'keep' (the default; a draft
  should imitate its target, loops included), 'drop' (the pair is left out) or 'gold' (the
  split's gold target replaces it: sequence-level distillation of a new target, which should
  not learn its teacher's loops). With `loop_repeats = r >= 2` a line in which one token
  trigram occurs r times or more (`repeats_ngram`: a loop that closed before the limit) is
  handled as truncated too; 0 (the default) looks at the length only.

  With `subword_samples = K > 0` (gold targets only) each pair appears K times, each time
  with both sides segmented by a sample from the SentencePiece model
  (`subword.sample_segmentations`, `subword_alpha`, seeded by `seed`) instead of its single
  best segmentation: subword regularisation, so an epoch holds K × the pairs. SentencePiece's
  sampling is not reproducible across processes, so with `subword_cache` (a `.npz` path;
  `train` uses `<run_dir>/subword_segmentations.npz`) the samples are written there once and
  reread by every later call, which keeps a resumed run on the same data.

  Raises:
    ValueError: a `targets_path` file has a different number of lines than the split,
      or the sequence is empty; `truncated_targets` not 'keep' / 'drop' / 'gold', or not
      'keep' for a file without its summary (or for gold targets); `loop_repeats` not 0 or
      an int >= 2, or set with truncated_targets='keep'; `subword_samples` < 0, `subword_alpha` <= 0, or
      `subword_samples` with `targets_path` (token ids cannot be re-segmented); a
      `subword_cache` written with other settings or for another split.
  """
  subword.check_args(subword_samples, subword_alpha, targets_path)
  if truncated_targets not in TRUNCATED_TARGETS:
    raise ValueError(f'truncated_targets must be one of {TRUNCATED_TARGETS}, got '
                     f'{truncated_targets!r}.')
  if truncated_targets != 'keep' and targets_path is None:
    raise ValueError(f'truncated_targets={truncated_targets!r} applies to distillation '
                     "files (targets_path); the gold targets are never truncated: use 'keep'.")
  if (isinstance(loop_repeats, bool) or not isinstance(loop_repeats, int)
      or loop_repeats < 0 or loop_repeats == 1):
    raise ValueError(f'loop_repeats must be 0 (off) or an int >= 2 (a trigram that many '
                     f'times marks a loop), got {loop_repeats!r}.')
  if loop_repeats and truncated_targets == 'keep':
    raise ValueError(f'loop_repeats={loop_repeats} says which lines count as truncated; it '
                     "needs truncated_targets='drop' or 'gold' (or set loop_repeats=0).")
  src, tgt = read_parallel(split, data_dir, source_suffix, target_suffix, limit=limit)
  if subword_samples:
    inputs, targets = subword.segmented_pairs(
        processor, [input_prefix + x for x in src], tgt, subword_samples, subword_alpha,
        seed, subword_cache)
    return BucketedDataset([x + [EOS_ID] for x in inputs], [x + [EOS_ID] for x in targets],
                           batch_size, tuple(buckets), seed, decoder_only)
  if targets_path is None:
    return BucketedDataset(encode_inputs(processor, src, input_prefix),
                           encode_targets(processor, tgt),
                           batch_size, tuple(buckets), seed, decoder_only)
  paths = ([targets_path] if isinstance(targets_path, (str, os.PathLike))
           else list(targets_path))
  if not paths:
    raise ValueError('targets_path is an empty sequence: give one token-id file or more, '
                     'or None for the gold targets.')
  inputs, targets = [], []
  encoded = encode_inputs(processor, src, input_prefix)
  gold = encode_targets(processor, tgt) if truncated_targets == 'gold' else None
  for path in paths:
    ids = read_target_ids(path)
    if limit is not None:
      ids = ids[:limit]
    if len(ids) != len(src):
      raise ValueError(f'targets_path {path} has {len(ids)} lines but {split} has '
                       f'{len(src)} sources; regenerate it for this split.')
    limit_len = None if truncated_targets == 'keep' else _decode_limit(path)
    for i, (x, row) in enumerate(zip(encoded, ids)):
      if limit_len is not None and (len(row) >= limit_len or (
          loop_repeats and repeats_ngram(row, loop_repeats))):
        if truncated_targets == 'drop':
          continue
        inputs.append(x)
        targets.append(gold[i])
      else:
        inputs.append(x)
        targets.append(row + [EOS_ID])
  return BucketedDataset(inputs, targets, batch_size, tuple(buckets), seed, decoder_only)
