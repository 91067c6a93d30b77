r"""Unigram and bigram draft tables (paper Table 3): estimation, files, loading.

  python -m specdec_jax.drafters.tables --vocab=specdec_jax/assets/demo_ende/vocab/ende8k.model \
      --split=ende/multi30k/train --side=de --order=2 --out=specdec_jax/assets/demo_ende/bigram.npz

A table is what `decoding.drafters.NgramTableDrafter` carries: for each context row c
(bigram: the previous token id, row 0 = after the decoder's start token 0; unigram: one
row) the `k` most frequent next tokens `ids [rows, k] int32` and their log-probabilities
`log_probs [rows, k] float32`, renormalised over those k. Counts are add-`smoothing`
(default 0.1) over the k kept ids; a context seen fewer than `min_count` times (default
1, i.e. never) uses the unigram row. Every target sequence ends with EOS (id 1), so the
table predicts EOS after sentence-final tokens, as the target does.

File: `.npz` with `ids`, `log_probs`, `order` (1 or 2) and `vocab_size` (the logits
size it was built for), written atomically (temp file, then rename).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import sys
from typing import Iterable, Sequence

import numpy as np

from specdec_jax.util import atomic

EOS_ID = 1
NEG_LOG_PROB = -1.0e9  # the log-probability of a kept id with probability 0 (exp gives 0)


def estimate(sequences: Iterable[Sequence[int]], vocab_size: int, order: int = 2, k: int = 32,
             smoothing: float = 0.1, min_count: int = 1) -> tuple[np.ndarray, np.ndarray]:
  """`(ids [rows, k] int32, log_probs [rows, k] float32)` from token-id sequences.

  Args:
    sequences: token ids of target-side sentences (EOS appended here if missing).
    vocab_size: number of rows of a bigram table (the target's logits size).
    order: 1 (unigram) or 2 (bigram).
    k: next tokens kept per row (≤ vocab_size).
  Raises:
    ValueError: order not 1 or 2, k < 1 or > vocab_size, an id outside [0, vocab_size),
      no sequences.
  """
  if order not in (1, 2):
    raise ValueError(f'order must be 1 (unigram) or 2 (bigram), got {order!r}.')
  if not smoothing >= 0:
    raise ValueError(f'smoothing must be >= 0, got {smoothing!r}.')
  if not isinstance(k, int) or not 1 <= k <= vocab_size:
    raise ValueError(f'k must be an int in [1, vocab_size={vocab_size}], got {k!r}.')
  prev_ids, next_ids = [], []
  count = 0
  for seq in sequences:
    seq = [int(t) for t in seq]
    if not seq or seq[-1] != EOS_ID:
      seq = seq + [EOS_ID]
    count += 1
    prev_ids.extend([0] + seq[:-1])
    next_ids.extend(seq)
  if not count:
    raise ValueError('no sequences to estimate a table from.')
  prev_arr, next_arr = np.asarray(prev_ids, np.int64), np.asarray(next_ids, np.int64)
  if prev_arr.min() < 0 or max(prev_arr.max(), next_arr.max()) >= vocab_size:
    raise ValueError(f'token ids must lie in [0, vocab_size={vocab_size}).')
  uni = np.bincount(next_arr, minlength=vocab_size).astype(np.float64)

  def top(counts):
    idx = np.argsort(-counts, kind='stable')[:k]
    c = counts[idx] + smoothing
    with np.errstate(divide='ignore'):  # a kept id never seen (smoothing 0): probability 0
      log_p = np.maximum(np.log(c / c.sum()), NEG_LOG_PROB)
    return idx.astype(np.int32), log_p.astype(np.float32)
  uni_ids, uni_lp = top(uni)
  if order == 1:
    return uni_ids[None], uni_lp[None]
  ids = np.tile(uni_ids, (vocab_size, 1))
  log_probs = np.tile(uni_lp, (vocab_size, 1))
  order_ = np.argsort(prev_arr, kind='stable')
  prev_sorted, next_sorted = prev_arr[order_], next_arr[order_]
  bounds = np.searchsorted(prev_sorted, np.arange(vocab_size + 1))
  for c in range(vocab_size):
    lo, hi = bounds[c], bounds[c + 1]
    if hi - lo >= min_count and hi > lo:
      ids[c], log_probs[c] = top(np.bincount(next_sorted[lo:hi], minlength=vocab_size)
                                 .astype(np.float64))
  return ids, log_probs


def save(path: str | os.PathLike, ids: np.ndarray, log_probs: np.ndarray, order: int,
         vocab_size: int) -> pathlib.Path:
  """Writes a table file atomically; returns its path."""
  buf = io.BytesIO()
  np.savez_compressed(buf, ids=np.asarray(ids, np.int32), log_probs=np.asarray(log_probs, np.float32),
           order=np.int32(order), vocab_size=np.int32(vocab_size))
  path = pathlib.Path(path)
  atomic.write_bytes(path, buf.getvalue())
  return path


def load(path: str | os.PathLike, vocab_size: int | None = None
         ) -> tuple[np.ndarray, np.ndarray, int]:
  """`(ids, log_probs, order)` of a table file.

  Raises:
    FileNotFoundError: no file at `path` (the message says how to build one).
    ValueError: not a table file, inconsistent arrays, ids outside the vocabulary, or a
      table built for a different `vocab_size` than the target's.
  """
  path = pathlib.Path(path)
  if not path.is_file():
    raise FileNotFoundError(f'no n-gram table at {str(path)!r}; build one with '
                            '`python -m specdec_jax.drafters.tables --help`.')
  try:
    with np.load(path) as z:
      ids, log_probs = z['ids'], z['log_probs']
      order, built_for = int(z['order']), int(z['vocab_size'])
  except (KeyError, ValueError, OSError) as e:
    raise ValueError(f'{str(path)!r} is not an n-gram table file ({e}).') from None
  if ids.shape != log_probs.shape or ids.ndim != 2 or order not in (1, 2):
    raise ValueError(f'{str(path)!r}: inconsistent table (ids {ids.shape}, log_probs '
                     f'{log_probs.shape}, order {order}).')
  if vocab_size is not None and built_for != vocab_size:
    raise ValueError(f'{str(path)!r} was built for vocab_size {built_for}, the target has '
                     f'{vocab_size}; build a table with the target\'s vocabulary.')
  if ids.min() < 0 or ids.max() >= built_for or not np.all(np.isfinite(log_probs)):
    raise ValueError(f'{str(path)!r}: ids outside [0, {built_for}) or non-finite log-probs.')
  return ids.astype(np.int32), log_probs.astype(np.float32), order


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(prog='python -m specdec_jax.drafters.tables',
                                   description='Estimate a unigram/bigram draft table.')
  parser.add_argument('--vocab', required=True, help='SentencePiece model of the pair')
  parser.add_argument('--split', default='ende/multi30k/train',
                      help='shared-data split (files <split>.<side>[.gz])')
  parser.add_argument('--side', default='de', help="file suffix of the target side ('de')")
  parser.add_argument('--data_dir', default=None, help='data root (default SPECDEC_DATA or '
                      '../shared/data)')
  parser.add_argument('--order', type=int, default=2)
  parser.add_argument('--k', type=int, default=32)
  parser.add_argument('--vocab_size', type=int, default=8192, help="the target's logits size")
  parser.add_argument('--out', required=True)
  args = parser.parse_args(argv)
  try:
    from specdec_jax.text import vocabulary  # pylint: disable=g-import-not-at-top
    from specdec_jax.util import paths  # pylint: disable=g-import-not-at-top
    root = pathlib.Path(args.data_dir) if args.data_dir else paths.data_dir()
    stem = root / f'{args.split}.{args.side}'
    path = stem.with_name(stem.name + '.gz') if not stem.exists() else stem
    lines = vocabulary.read_lines(path)
    processor = vocabulary.load_processor(args.vocab)
    ids, log_probs = estimate(processor.encode(lines), args.vocab_size, args.order, args.k)
    out = save(args.out, ids, log_probs, args.order, args.vocab_size)
  except (ValueError, FileNotFoundError) as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  print(json.dumps({'out': str(out), 'rows': int(ids.shape[0]), 'k': int(ids.shape[1]),
                    'sentences': len(lines), 'order': args.order}))
  return 0


if __name__ == '__main__':
  sys.exit(main())
