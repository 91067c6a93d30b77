"""Subword regularisation (Kudo 2018): sampled SentencePiece segmentations of training pairs.

`segmented_pairs` gives every (source, target) pair K times, each side segmented by a sample
from the unigram model's lattice instead of its single best segmentation. SentencePiece's
sampler (sentencepiece 0.2.3) is reproducible for a seed within one process but not across
processes, so a training run stores its samples in a `.npz` cache and a resumed run rereads
them: the saved data position then points into the same data.
"""

from __future__ import annotations

import math
import os
import pathlib
from typing import Sequence

import numpy as np

from specdec_jax.util import atomic


def check_args(subword_samples, subword_alpha, targets_path=None) -> None:
  """Raises ValueError for settings `data.load_dataset` cannot honour (`train.train` calls it
  before it writes or compiles anything)."""
  if isinstance(subword_samples, bool) or not (isinstance(subword_samples, int)
                                               and subword_samples >= 0):
    raise ValueError(f'train.subword_samples must be an int >= 0 (0 = no subword '
                     f'regularisation), got {subword_samples!r}.')
  if subword_samples and (isinstance(subword_alpha, bool)
                          or not isinstance(subword_alpha, (int, float))
                          or not math.isfinite(subword_alpha) or subword_alpha <= 0):
    raise ValueError(f'train.subword_alpha must be a finite number > 0 (0.3 keeps lengths '
                     f'within ~11 %), got {subword_alpha!r}.')
  if subword_samples and targets_path is not None:
    raise ValueError('train.subword_samples needs the gold targets (text); train.targets_path '
                     'gives token ids, which cannot be re-segmented: set one of them.')


def _seed(seed: int, side: int, k: int) -> int:
  """A 31-bit SentencePiece seed for (run seed, side, sample), distinct for distinct triples
  with overwhelming probability (numpy's SeedSequence hashing)."""
  return int(np.random.SeedSequence([int(seed) % 2**32, side, k]).generate_state(1)[0] >> 1)


def sample_segmentations(processor, sentences: Sequence[str], samples: int, alpha: float,
                         seed: int, side: int = 0) -> list[list[list[int]]]:
  """`samples` sampled segmentations of every sentence: `[samples][len(sentences)]` lists of
  token ids (int, no EOS).

  Each draws from the unigram model's full lattice (`nbest_size=-1`) with the segmentation
  probabilities raised to `alpha` (smaller: more, shorter pieces; on Multi30K German with the
  8k vocabulary alpha 0.3 gives 11 % more tokens, 0.1 twice as many). Sets SentencePiece's
  process-global generator seed before each sample (from `seed`, `side`, the sample index):
  the result repeats within one process, not across processes (see the module docstring).
  """
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  out = []
  for k in range(samples):
    # SentencePiece restarts its generator from the global seed on every call: one per sample.
    spm.set_random_generator_seed(_seed(seed, side, k))
    out.append(processor.encode(list(sentences), enable_sampling=True, alpha=float(alpha),
                                nbest_size=-1, num_threads=1))
  return out


def _flat(seqs):
  return (np.fromiter((t for s in seqs for t in s), np.int32),
          np.fromiter((len(s) for s in seqs), np.int64))


def _unflat(ids, lengths):
  ends = np.cumsum(lengths)
  return [ids[e - n:e].tolist() for e, n in zip(ends, lengths)]


def segmented_pairs(processor, sources: Sequence[str], targets: Sequence[str], samples: int,
                    alpha: float, seed: int, cache: str | os.PathLike | None = None
                    ) -> tuple[list[list[int]], list[list[int]]]:
  """(inputs, targets): `samples × len(sources)` token-id lists each (sample-major, no EOS).

  With `cache` (a `.npz` path): read from it when it exists, else sampled and written there
  atomically. The cache records the settings and the pair count.

  Raises:
    ValueError: `cache` holds samples of other settings (samples, alpha, seed) or of a
      split with another number of pairs; delete it or use a new run folder.
  """
  settings = dict(samples=samples, alpha=float(alpha), seed=int(seed), pairs=len(sources))
  if cache is not None and pathlib.Path(cache).exists():
    with np.load(cache) as f:
      stored = {k: f[k].item() for k in settings}
      if stored != settings:
        raise ValueError(f'{cache} holds subword samples made with {stored}, not {settings}: '
                         'delete it (a new segmentation) or use the settings it was made with.')
      return (_unflat(f['inputs'], f['input_lengths']),
              _unflat(f['targets'], f['target_lengths']))
  inputs = [x for s in sample_segmentations(processor, sources, samples, alpha, seed, 0)
            for x in s]
  outputs = [x for s in sample_segmentations(processor, targets, samples, alpha, seed, 1)
             for x in s]
  if cache is not None:
    (i_ids, i_len), (t_ids, t_len) = _flat(inputs), _flat(outputs)

    def write(tmp):
      with open(tmp, 'wb') as f:
        np.savez_compressed(f, inputs=i_ids, input_lengths=i_len, targets=t_ids,
                            target_lengths=t_len, **{k: np.asarray(v) for k, v in
                                                     settings.items()})
    atomic.write_with(cache, write)
  return inputs, outputs
