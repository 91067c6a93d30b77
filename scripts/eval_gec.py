r"""GLEU of a decode job's corrections of JFLEG dev, beside the do-nothing output.

  python -m specdec_jax.decode --gin_file=configs/runs/decode.gin --gin_file=configs/pairs/gec_en.gin \
      --gin.decode.input_path="'../shared/data/gec/jfleg_dev/dev.src'" \
      --gin.decode.output_path="'out/gec/jfleg_dev.jsonl'"
  python scripts/eval_gec.py --predictions=out/gec/jfleg_dev.jsonl [--out=out/gec/gleu.json]
      [--lines=runs/gec_jfleg/heldout.ids]

Reads the JSONL's `prediction` fields (in input order, one per `dev.src` line), scores them
and the unchanged sources with `specdec_jax.text.gleu.corpus_gleu` against the four JFLEG
references (500 random reference draws, seed 0), and prints / writes
`{"gleu", "gleu_do_nothing", "std", ..., "changed_sentences", "by_length"}`. No JFLEG sentence
is used in training the shipped corrector, so all 754 dev sentences are held out. With
`--lines` (a file of 0-based dev line numbers, one a line, e.g. `jfleg_split`'s
`heldout.ids`), the predictions are those lines' in that order and only they are scored:
the held-out part of a corrector fine-tuned on the rest of dev.

`by_length` splits the sentences by source length in whitespace words (< 20, 20-29, 30-39,
>= 40; the model card's length table) and gives for each bucket: `sentences`, `unchanged`
(same words as the source), `at_limit` (the decode stopped at `max_decode_len`: JSONL
`ended` == 'max_decode_len', in practice a repetition loop), `dropped_2plus` (at least 2 fewer words
than the source), and `gleu` / `gleu_do_nothing` on that bucket alone (same draws and seed).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax.text import gleu  # noqa: E402
from specdec_jax.util import atomic, paths  # noqa: E402


LENGTH_BUCKETS = ((0, 20), (20, 30), (30, 40), (40, None))


def by_length(sources, hyps, ended, refs, *, iterations=500):
  """Per source-length bucket counts and GLEU (module docstring); skips empty buckets.

  Args:
    sources, hyps: N whitespace-tokenised strings each; ended: N JSONL `ended` values
      (None where the JSONL has none); refs: the K reference sets of `corpus_gleu`.
  Returns:
    a list of dicts, one per non-empty bucket, keyed by `words` ('<20', '20-29', ..., '>=40').
  """
  rows = []
  for lo, hi in LENGTH_BUCKETS:
    idx = [i for i, s in enumerate(sources)
           if len(s.split()) >= lo and (hi is None or len(s.split()) < hi)]
    if not idx:
      continue
    pick = lambda xs: [xs[i] for i in idx]  # noqa: E731
    sub_refs = [pick(r) for r in refs]
    ours = gleu.corpus_gleu(pick(sources), pick(hyps), sub_refs, iterations=iterations)
    floor = gleu.corpus_gleu(pick(sources), pick(sources), sub_refs, iterations=iterations)
    rows.append(dict(
        words=f'<{hi}' if lo == 0 else (f'>={lo}' if hi is None else f'{lo}-{hi - 1}'),
        sentences=len(idx),
        unchanged=sum(hyps[i].split() == sources[i].split() for i in idx),
        at_limit=sum(ended[i] == 'max_decode_len' for i in idx),
        dropped_2plus=sum(len(hyps[i].split()) <= len(sources[i].split()) - 2 for i in idx),
        gleu=ours.score, ci95=list(ours.ci95), gleu_do_nothing=floor.score,
        do_nothing_ci95=list(floor.ci95)))
  return rows


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument('--predictions', required=True, help="the decode job's JSONL")
  p.add_argument('--jfleg', default=None, help='folder with dev.src, dev.ref0-3 '
                 '(default: <shared data>/gec/jfleg_dev)')
  p.add_argument('--out', default=None, help='write the result JSON here too')
  p.add_argument('--lines', default=None,
                 help='score only these dev lines (0-based, one a line; e.g. '
                      "jfleg_split's heldout.ids); the predictions are theirs, in order")
  args = p.parse_args(argv)
  folder = pathlib.Path(args.jfleg) if args.jfleg else paths.data_dir() / 'gec' / 'jfleg_dev'
  sources, refs = gleu.read_jfleg(folder)
  if args.lines:
    try:
      lines = gleu.read_line_ids(args.lines, len(sources))
    except (OSError, ValueError) as e:
      print(f'error: --lines={args.lines!r}: {e}', file=sys.stderr)
      return 2
    sources = [sources[i] for i in lines]
    refs = [[r[i] for i in lines] for r in refs]
  rows = [json.loads(x) for x in pathlib.Path(args.predictions).read_text().splitlines()]
  hyps = [r['prediction'] for r in rows]
  if len(hyps) != len(sources):
    print(f'error: {args.predictions} has {len(hyps)} predictions but '
          + (f'--lines names {len(sources)} lines' if args.lines else
             f'{folder}/dev.src has {len(sources)} lines; decode all of dev.src') + '.',
          file=sys.stderr)
    return 2
  ours = gleu.corpus_gleu(sources, hyps, refs)
  floor = gleu.corpus_gleu(sources, sources, refs)
  result = dict(gleu=ours.score, std=ours.std, ci95=list(ours.ci95),
                gleu_do_nothing=floor.score, do_nothing_ci95=list(floor.ci95),
                sentences=len(hyps), iterations=ours.iterations,
                changed_sentences=sum(h.split() != s.split() for h, s in zip(hyps, sources)),
                at_limit=sum(r.get('ended') == 'max_decode_len' for r in rows),
                predictions=args.predictions, lines=args.lines,
                by_length=by_length(sources, hyps, [r.get('ended') for r in rows], refs))
  print(json.dumps(result, indent=2))
  if args.out:
    atomic.write_text(args.out, json.dumps(result, indent=2) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
