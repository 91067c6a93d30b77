r"""Fine-tuning data from JFLEG dev with a seeded held-out half (issue #40's "fine-tuned on
jfleg_dev if it helps, then hold out part of dev to report on").

  python -m specdec_jax.train.jfleg_split --out=runs/gec_jfleg \
      --synthetic_dir=runs/gec_data_80 [--held_out=377] [--synthetic_pairs=3000] [--seed=0]

JFLEG dev's 754 learner sentences are permuted with `numpy.random.default_rng(seed)`; the
last `held_out` of the permutation are held out (never written to the training files) and
the rest are the tuning part. Writes, under `--out` (each file atomically):
  - `train.{src,tgt}`: every tuning sentence once per *distinct* reference among its four
    (`dev.ref0`-`dev.ref3`; a sentence whose references agree gives one pair), plus
    `synthetic_pairs` lines drawn without replacement from `<synthetic_dir>/train.{src,tgt}`
    (the synthetic errors of `gec_data`, captions and news alike, so that the corrector
    keeps copying clean text), all shuffled with the same generator;
  - `val.{src,tgt}`: a copy of `<synthetic_dir>/val.{src,tgt}` (the training job's curves,
    comparable with the corrector's first run; no JFLEG sentence);
  - `heldout.ids`: the held-out JFLEG dev line numbers (0-based, ascending), for
    `scripts/eval_gec.py --lines`; `heldout.src`: those sentences, the decode job's input;
  - `recipe.json`: the settings and counts.
Both sides are JFLEG's own tokenization already (as `gec_data` writes its pairs).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
from typing import Sequence

import numpy as np

from specdec_jax.text import gleu
from specdec_jax.util import atomic, paths


def _read(path: pathlib.Path) -> list[str]:
  """`gleu.read_lines`, with the command that builds a missing synthetic file."""
  try:
    return gleu.read_lines(path)
  except FileNotFoundError as e:
    raise FileNotFoundError(f'{e} Build it with `python -m specdec_jax.train.gec_data '
                            '--out=...`.') from e


def build(out: str | pathlib.Path, synthetic_dir: str | pathlib.Path, *, held_out: int = 377,
          synthetic_pairs: int = 3000, seed: int = 0, jfleg_dir=None) -> dict:
  """Writes the split under `out` (module docstring); returns the recipe summary.

  Args:
    out: output folder (created).
    synthetic_dir: a `gec_data` folder with `train.{src,tgt}` and `val.{src,tgt}`.
    held_out: JFLEG dev sentences held out, 1 … 753 (default 377: half).
    synthetic_pairs: synthetic pairs mixed in, 0 … the synthetic training lines.
    seed: the permutation's and the shuffle's seed.
    jfleg_dir: folder with `dev.src`, `dev.ref0-3` (default: the shared data's
      `gec/jfleg_dev`).
  Raises:
    ValueError: `held_out` or `synthetic_pairs` out of range (before anything is written).
    FileNotFoundError: a JFLEG or synthetic file is missing.
  """
  for name, value in (('held_out', held_out), ('synthetic_pairs', synthetic_pairs),
                      ('seed', seed)):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
      raise ValueError(f'{name} must be an integer >= 0, got {value!r}.')
  folder = pathlib.Path(jfleg_dir) if jfleg_dir else paths.data_dir() / 'gec' / 'jfleg_dev'
  sources, refs = gleu.read_jfleg(folder)
  if not 1 <= held_out < len(sources):
    raise ValueError(f'held_out must be between 1 and {len(sources) - 1} (JFLEG dev has '
                     f'{len(sources)} sentences), got {held_out}.')
  synthetic_dir = pathlib.Path(synthetic_dir)
  syn_src, syn_tgt = (_read(synthetic_dir / f'train.{s}') for s in ('src', 'tgt'))
  val_src, val_tgt = (_read(synthetic_dir / f'val.{s}') for s in ('src', 'tgt'))
  if synthetic_pairs > len(syn_src):
    raise ValueError(f'synthetic_pairs={synthetic_pairs} exceeds the {len(syn_src)} '
                     f'training pairs in {str(synthetic_dir)!r}.')
  rng = np.random.default_rng(seed)
  order = rng.permutation(len(sources))
  tune = sorted(int(i) for i in order[:len(sources) - held_out])
  held = sorted(int(i) for i in order[len(sources) - held_out:])
  pairs = []
  for i in tune:
    seen = set()
    for ref in refs:
      target = ' '.join(ref[i].split())
      if target and target not in seen:
        seen.add(target)
        pairs.append((' '.join(sources[i].split()), target))
  jfleg_pairs = len(pairs)
  picked = sorted(int(i) for i in rng.choice(len(syn_src), synthetic_pairs, replace=False))
  pairs += [(syn_src[i], syn_tgt[i]) for i in picked]
  pairs = [pairs[i] for i in rng.permutation(len(pairs))]
  out = pathlib.Path(out)
  out.mkdir(parents=True, exist_ok=True)
  files = {'train.src': [s for s, _ in pairs], 'train.tgt': [t for _, t in pairs],
           'val.src': val_src, 'val.tgt': val_tgt,
           'heldout.ids': [str(i) for i in held], 'heldout.src': [sources[i] for i in held]}
  for name, lines in files.items():
    atomic.write_text(out / name, '\n'.join(lines) + '\n')
  recipe = dict(seed=seed, jfleg_dir=str(folder), synthetic_dir=str(synthetic_dir),
                jfleg_sentences=len(sources), tuning_sentences=len(tune),
                held_out_sentences=len(held), jfleg_pairs=jfleg_pairs,
                synthetic_pairs=synthetic_pairs, train_pairs=len(pairs),
                val_pairs=len(val_src))
  atomic.write_text(out / 'recipe.json', json.dumps(recipe, indent=2) + '\n')
  return recipe


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--out', required=True, help='output folder, e.g. runs/gec_jfleg')
  parser.add_argument('--synthetic_dir', required=True,
                      help="a gec_data folder (train/val .src/.tgt), e.g. runs/gec_data_80")
  parser.add_argument('--held_out', type=int, default=377)
  parser.add_argument('--synthetic_pairs', type=int, default=3000)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--jfleg_dir', default=None,
                      help='folder with dev.src and dev.ref0-3 (default: the shared data)')
  args = parser.parse_args(argv)
  try:
    recipe = build(args.out, args.synthetic_dir, held_out=args.held_out,
                   synthetic_pairs=args.synthetic_pairs, seed=args.seed,
                   jfleg_dir=args.jfleg_dir)
  except (ValueError, FileNotFoundError) as e:
    print(f'jfleg_split: error: {e}', file=sys.stderr)
    return 2
  print(json.dumps(recipe))
  return 0


if __name__ == '__main__':
  sys.exit(main())
