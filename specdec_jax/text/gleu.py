"""GLEU, the corpus-level metric for grammatical error correction used by JFLEG.

Sources:
* C. Napoles, K. Sakaguchi, M. Post, J. Tetreault. Ground Truth for Grammatical Error
  Correction Metrics. ACL 2015 (the original GLEU).
* C. Napoles, K. Sakaguchi, M. Post, J. Tetreault. GLEU Without Tuning.
  arXiv:1605.02592, 2016 (the revision without the tuned weight, fairer with several
  references; the definition below).
* C. Napoles, K. Sakaguchi, J. Tetreault. JFLEG: A Fluency Corpus and Benchmark for
  Grammatical Error Correction. EACL 2017 (the benchmark; its evaluation script is
  `eval/gleu.py` of github.com/keisks/jfleg). This module is an independent
  implementation of that definition, not a copy of the script.

Definition (tokens are `str.split()` pieces, n-gram orders n = 1..4, counts are
multisets). For sentence i with source s, hypothesis h and one chosen reference r:

  numerator_n   += max(0, |h ∩ r| - |h ∩ (s \\ r)|)
  denominator_n += max(0, len(h) - n + 1)
  H += len(h);  R += len(r)

where ∩ takes the smaller count of each n-gram and s \\ r holds the source n-grams the
reference does not keep (see `source_diff`). Keeping an n-gram of the source that the
reference changed is penalised; copying the reference is rewarded. Then

  BP   = 1 if H > R else exp(1 - R / H)            (the score is 0 when H = 0)
  GLEU = BP * exp(1/4 * sum_n log(numerator_n / denominator_n)),  0 if any numerator is 0.

With K references per sentence the corpus score is drawn `iterations` times, each time
picking one reference per sentence uniformly at random; the result is the mean of the
iteration scores, their standard deviation (population, ddof=0) and the normal 95%
interval mean ± 1.96·std, as the JFLEG script reports them. The draws come from
`numpy.random.default_rng(seed).integers(0, K, size=(iterations, sentences))`, so a
fixed seed gives the same result; the script uses Python's `random` with its own seeds,
so the two means agree only up to that sampling noise (with one reference every
iteration is the same and std is 0).

Scale: `GleuResult.score`, `std` and `ci95` are on a 0-100 scale, as the JFLEG
leaderboard reports them (e.g. 38.21 dev / 40.54 test for the unchanged source);
the JFLEG script prints 0-1.

`source_diff` (keyword of `corpus_gleu` and `gleu_stats`):
* 'multiset': s \\ r keeps each source n-gram max(0, c_s - c_r) times.
* 'type' (default, so scores compare with published JFLEG numbers): the JFLEG script's
  reading: an n-gram type found in the reference is dropped
  from s \\ r altogether, others keep their full source count. The two differ only
  where the source repeats an n-gram the reference also holds fewer times.

Command line (prints JSON {"gleu", "std", "ci95", "sentences"}; exit status 2 with a
one-line error for bad input):
  python -m specdec_jax.text.gleu --src dev.src --hyp predictions.txt \\
      --ref dev.ref0 dev.ref1 dev.ref2 dev.ref3 [--iterations 500] [--seed 0]

Errors: `corpus_gleu` raises ValueError naming the argument for empty input, lengths
that differ, no references, `iterations` < 1 or an unknown `source_diff`, and TypeError
naming the argument for entries that are not strings. `read_jfleg` and `read_lines`
raise FileNotFoundError naming the missing folder / files, ValueError for files that
are not UTF-8 or whose line counts differ.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import pathlib
import sys
from typing import Sequence

import numpy as np

ORDER = 4
NUM_STATS = 2 + 2 * ORDER  # [H, R, numerator_1, denominator_1, ..., numerator_4, denominator_4]
SOURCE_DIFFS = ('multiset', 'type')
_Z95 = 1.959963984540054  # Two-sided 95% quantile of the standard normal.


@dataclasses.dataclass(frozen=True)
class GleuResult:
  """Corpus GLEU on a 0-100 scale.

  score: mean over the iterations' corpus scores. std: their standard deviation
  (ddof=0). ci95: (score - 1.96 std, score + 1.96 std). iterations: how many
  reference draws. sentences: corpus size.
  """
  score: float
  std: float
  ci95: tuple[float, float]
  iterations: int
  sentences: int


def _ngrams(tokens: Sequence[str]) -> list[collections.Counter]:
  """Counters of the 1..ORDER-grams of `tokens` (tuples as keys)."""
  return [collections.Counter(tuple(tokens[j:j + n]) for j in range(len(tokens) - n + 1))
          for n in range(1, ORDER + 1)]


def _overlap(a: collections.Counter, b: collections.Counter) -> int:
  """|a ∩ b| for multisets: sum over shared n-grams of the smaller count."""
  if len(a) > len(b):
    a, b = b, a
  return sum(min(c, b[g]) for g, c in a.items() if g in b)


def _source_not_reference(s: collections.Counter, r: collections.Counter,
                          source_diff: str) -> collections.Counter:
  if source_diff == 'multiset':
    return s - r  # Counter subtraction keeps positive counts only: max(0, c_s - c_r).
  return collections.Counter({g: c for g, c in s.items() if g not in r})


def _stats(h_tokens, h_grams, s_grams, r_tokens, source_diff) -> np.ndarray:
  r_grams = _ngrams(r_tokens)
  out = np.zeros(NUM_STATS, np.int64)
  out[0], out[1] = len(h_tokens), len(r_tokens)
  for n in range(1, ORDER + 1):
    h, r = h_grams[n - 1], r_grams[n - 1]
    penalty = _source_not_reference(s_grams[n - 1], r, source_diff)
    out[2 * n] = max(0, _overlap(h, r) - _overlap(h, penalty))
    out[2 * n + 1] = max(0, len(h_tokens) - n + 1)
  return out


def _check_source_diff(source_diff):
  if source_diff not in SOURCE_DIFFS:
    raise ValueError(f'source_diff must be one of {SOURCE_DIFFS}, got {source_diff!r}.')


def gleu_stats(source: str, hypothesis: str, reference: str, *,
               source_diff: str = 'type') -> np.ndarray:
  """One sentence's sufficient statistics against one reference.

  Returns an int64 array of shape [10]: [H, R, numerator_1, denominator_1, ...,
  numerator_4, denominator_4] (definitions in the module docstring). Sums of these
  arrays over sentences give the corpus statistics for `gleu_from_stats`.
  """
  _check_source_diff(source_diff)
  h_tokens = hypothesis.split()
  return _stats(h_tokens, _ngrams(h_tokens), _ngrams(source.split()), reference.split(),
                source_diff)


def gleu_from_stats(stats) -> np.ndarray | float:
  """GLEU on a 0-1 scale from summed statistics.

  Args:
    stats: array-like of shape [..., 10] (layout of `gleu_stats`).
  Returns:
    float64 array of shape [...] (a Python float for a single [10] vector): 0 where the
    hypothesis length or any numerator is 0.
  """
  stats = np.asarray(stats, np.float64)
  if stats.shape[-1:] != (NUM_STATS,):
    raise ValueError(f'stats must have shape [..., {NUM_STATS}], got {stats.shape}.')
  hyp_len, ref_len = stats[..., 0], stats[..., 1]
  num, den = stats[..., 2::2], stats[..., 3::2]
  zero = (hyp_len <= 0) | np.any(num <= 0, axis=-1)  # num > 0 implies den > 0.
  with np.errstate(divide='ignore', invalid='ignore'):
    log_prec = np.mean(np.log(num / den), axis=-1)
    log_bp = np.minimum(0.0, 1.0 - ref_len / hyp_len)
    score = np.where(zero, 0.0, np.exp(log_bp + log_prec))
  return float(score) if score.ndim == 0 else score


def _check_texts(name: str, texts, expected: int | None = None) -> list[str]:
  if isinstance(texts, (str, bytes)) or not hasattr(texts, '__len__'):
    raise TypeError(f'{name} must be a sequence of strings, got {type(texts).__name__}.')
  texts = list(texts)
  if expected is not None and len(texts) != expected:
    raise ValueError(f'{name} has {len(texts)} sentences but sources has {expected}.')
  for i, t in enumerate(texts):
    if not isinstance(t, str):
      raise TypeError(f'{name}[{i}] must be a str, got {type(t).__name__}.')
  return texts


def corpus_gleu(sources: Sequence[str], hypotheses: Sequence[str],
                references: Sequence[Sequence[str]], *, iterations: int = 500,
                seed: int = 0, source_diff: str = 'type') -> GleuResult:
  """Corpus GLEU (0-100) of `hypotheses`, averaged over random reference draws.

  Args:
    sources: N source sentences (the uncorrected input), whitespace-tokenised strings.
    hypotheses: N system outputs, aligned with `sources`.
    references: K >= 1 reference sets; references[k][i] is the k-th reference of
      sentence i (each set has N strings). For one reference pass `[refs]`.
    iterations: reference draws (>= 1); each picks one reference per sentence.
    seed: seed of `numpy.random.default_rng` for the draws.
    source_diff: 'multiset' or 'type' (module docstring).
  Returns:
    GleuResult(score, std, ci95, iterations, sentences), scores on a 0-100 scale.
  Raises:
    ValueError: empty `sources`, lengths that differ (naming the argument), no
      references, `iterations` < 1, unknown `source_diff`.
    TypeError: a non-string entry, or a string where a sequence is expected.
  """
  _check_source_diff(source_diff)
  if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)) or \
      iterations < 1:
    raise ValueError(f'iterations must be an integer >= 1, got {iterations!r}.')
  sources = _check_texts('sources', sources)
  if not sources:
    raise ValueError('sources is empty: GLEU needs at least one sentence.')
  n_sent = len(sources)
  hypotheses = _check_texts('hypotheses', hypotheses, n_sent)
  if isinstance(references, (str, bytes)) or not hasattr(references, '__len__'):
    raise TypeError('references must be a sequence of reference sets (references[k][i]), '
                    f'got {type(references).__name__}.')
  references = list(references)
  if not references:
    raise ValueError('references is empty: GLEU needs at least one reference set.')
  if isinstance(references[0], str):
    raise ValueError('references must be a sequence of reference sets, references[k][i] '
                     'being the k-th reference of sentence i; got a sequence of strings '
                     '(for a single reference pass [refs]).')
  references = [_check_texts(f'references[{k}]', refs, n_sent)
                for k, refs in enumerate(references)]

  # Per reference set k and sentence i: the 10 statistics, computed once.
  stats = np.zeros((len(references), n_sent, NUM_STATS), np.int64)
  for i, (src, hyp) in enumerate(zip(sources, hypotheses)):
    h_tokens = hyp.split()
    h_grams, s_grams = _ngrams(h_tokens), _ngrams(src.split())
    for k, refs in enumerate(references):
      stats[k, i] = _stats(h_tokens, h_grams, s_grams, refs[i].split(), source_diff)

  # Each iteration sums the chosen references' statistics: for every k, a 0/1 matrix
  # [iterations, N] of where k was drawn times stats[k] ([N, 10]). float64 holds the
  # integer sums exactly (far below 2**53).
  rng = np.random.default_rng(seed)
  draws = rng.integers(0, len(references), size=(int(iterations), n_sent))
  totals = np.zeros((int(iterations), NUM_STATS), np.float64)
  for k in range(len(references)):
    totals += (draws == k).astype(np.float64) @ stats[k].astype(np.float64)
  scores = 100.0 * np.asarray(gleu_from_stats(totals), np.float64).reshape(-1)
  mean, std = float(np.mean(scores)), float(np.std(scores))
  return GleuResult(score=mean, std=std, ci95=(mean - _Z95 * std, mean + _Z95 * std),
                    iterations=int(iterations), sentences=n_sent)


def read_lines(path: str | os.PathLike) -> list[str]:
  """The lines of a UTF-8 text file (a leading byte-order mark is dropped), each with
  its trailing whitespace and newline stripped.

  Raises:
    FileNotFoundError: no such file. ValueError: a folder, or not UTF-8.
  """
  path = pathlib.Path(path)
  if not path.exists():
    raise FileNotFoundError(f'File {str(path)!r} not found.')
  if path.is_dir():
    raise ValueError(f'{str(path)!r} is a folder, not a text file.')
  try:
    text = path.read_text(encoding='utf-8-sig')
  except UnicodeDecodeError as e:
    raise ValueError(f'File {str(path)!r} is not valid UTF-8 ({e}).') from e
  # Split on '\n' only: str.splitlines would also split on form feeds, U+2028, etc.
  lines = text.split('\n')
  if lines and lines[-1] == '':
    lines.pop()  # The newline that ends the last line.
  return [line.rstrip() for line in lines]


def read_line_ids(path: str | os.PathLike, count: int) -> list[int]:
  """0-based line numbers from a text file (whitespace-separated integers, e.g.
  `train.jfleg_split`'s `heldout.ids`), checked to be distinct and in 0 … count − 1.

  Raises:
    FileNotFoundError: no such file. ValueError: a folder, not integers, empty, repeated
      or out of range (the message says which).
  """
  text = ' '.join(read_lines(path))
  try:
    ids = [int(x) for x in text.split()]
  except ValueError as e:
    raise ValueError(f'{str(path)!r} must hold integers (0-based line numbers): {e}') from e
  if not ids or min(ids) < 0 or max(ids) >= count or len(set(ids)) != len(ids):
    raise ValueError(f'{str(path)!r} must hold distinct line numbers in 0 … {count - 1}.')
  return ids


def read_jfleg(folder: str | os.PathLike, split: str = 'dev') -> tuple[list[str], list[list[str]]]:
  """JFLEG's `{split}.src` and `{split}.ref0`..`{split}.ref3` from `folder`.

  Returns:
    (sources, [ref0, ref1, ref2, ref3]): lists of N strings (trailing whitespace
    stripped), ready for `corpus_gleu(sources, hypotheses, refs)`.
  Raises:
    FileNotFoundError: `folder` or one of the five files is missing (the message names
      the folder and the missing files).
    ValueError: a file is not UTF-8, or the files' line counts differ.
  """
  folder = pathlib.Path(folder)
  names = [f'{split}.src'] + [f'{split}.ref{k}' for k in range(4)]
  if not folder.is_dir():
    raise FileNotFoundError(f'JFLEG folder {str(folder)!r} not found (expected it to hold '
                            f'{", ".join(names)}).')
  missing = [n for n in names if not (folder / n).is_file()]
  if missing:
    raise FileNotFoundError(f'JFLEG folder {str(folder)!r} lacks {", ".join(missing)}.')
  texts = [read_lines(folder / n) for n in names]
  for name, lines in zip(names[1:], texts[1:]):
    if len(lines) != len(texts[0]):
      raise ValueError(f'{str(folder / name)!r} has {len(lines)} lines but '
                       f'{names[0]} has {len(texts[0])}.')
  return texts[0], texts[1:]


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      description='Corpus GLEU (0-100) of a hypothesis file, JFLEG style.')
  parser.add_argument('--src', required=True, help='source sentences, one per line')
  parser.add_argument('--hyp', required=True, help='system outputs, one per line')
  parser.add_argument('--ref', required=True, nargs='+', help='reference file(s)')
  parser.add_argument('--iterations', type=int, default=500)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--source_diff', choices=SOURCE_DIFFS, default='type')
  args = parser.parse_args(argv)
  try:
    sources = read_lines(args.src)
    hypotheses = read_lines(args.hyp)
    references = [read_lines(r) for r in args.ref]
    for name, lines in [(args.hyp, hypotheses)] + list(zip(args.ref, references)):
      if len(lines) != len(sources):
        raise ValueError(f'{name!r} has {len(lines)} lines but {args.src!r} has '
                         f'{len(sources)}.')
    result = corpus_gleu(sources, hypotheses, references, iterations=args.iterations,
                         seed=args.seed, source_diff=args.source_diff)
  except (OSError, ValueError, TypeError) as e:
    message = ' '.join(str(e).split()) or type(e).__name__
    print(f'gleu: error: {message}', file=sys.stderr)
    return 2
  print(json.dumps({'gleu': round(result.score, 4), 'std': round(result.std, 4),
                    'ci95': [round(x, 4) for x in result.ci95],
                    'sentences': result.sentences}))
  return 0


if __name__ == '__main__':
  sys.exit(main())
