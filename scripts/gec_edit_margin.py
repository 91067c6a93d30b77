r"""Analysis: would keeping only the corrector's confident edits beat leaving sentences alone?

  python scripts/gec_edit_margin.py --predictions=out/gec/jfleg_dev_lookup.jsonl \
      [--pair_dir=specdec_jax/assets/gec_en] [--heldout=runs/gec_jfleg/heldout.ids] \
      [--out=out/gec/edit_margin.json]

For each JFLEG dev sentence x with the decode job's correction y ≠ x, the margin is
m = log p(y | x) − log p(x | x) under the pair's target (teacher-forced, float32, nats; each
side tokenized with EOS as the decode job does). The filtered output keeps y where m ≥ δ and
the source x elsewhere: an edit-confidence threshold, the way GEC systems trade recall for
precision. δ is chosen on the dev lines *not* in `--heldout` (jfleg_split's tuning half; the
grid `DELTAS`, GLEU with 100 reference draws) and reported on the held-out lines (500 draws,
seed 0), beside the unfiltered output and do-nothing. A post-processing analysis of a decode
job's output, not a decoding change: the decode itself (baseline or speculative, identical at
T = 0) is untouched. Run it alone; about 2 minutes on 2 cores for 754 sentences.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax.text import gleu  # noqa: E402
from specdec_jax.util import atomic, paths  # noqa: E402

DELTAS = (0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 15.0, 20.0)


def keep_confident(sources, hyps, margins, delta: float) -> list[str]:
  """`hyps[i]` where it edits `sources[i]` (other words) and `margins[i] >= delta`, else
  `sources[i]`. sources, hyps: N strings; margins: N floats (nats)."""
  if not len(sources) == len(hyps) == len(margins):
    raise ValueError(f'sources, hyps and margins differ in length: {len(sources)}, '
                     f'{len(hyps)}, {len(margins)}.')
  return [h if (h.split() != s.split() and m >= delta) else s
          for s, h, m in zip(sources, hyps, margins)]


def sequence_logprobs(model, params, vocab, prefix: str, sources, targets, *,
                      batch_size: int = 32, max_input_len: int = 160,
                      max_target_len: int = 160) -> np.ndarray:
  """log p(target | prefix + source) per pair under a T5 `model`, float64 `[N]` (nats).

  Both sides are SentencePiece ids + EOS (1), cut to the lengths (a cut pair is scored on
  its kept tokens). Batches are padded to `batch_size` rows so one program is compiled.
  """
  import jax  # pylint: disable=import-outside-toplevel
  from specdec_jax.interop.t5x.losses import sequence_scores  # pylint: disable=import-outside-toplevel
  from specdec_jax.train.evaluation import teacher_forced_features  # pylint: disable=import-outside-toplevel

  @jax.jit
  def score(batch):
    logits = model.apply({'params': params}, batch['encoder_input_tokens'],
                         batch['decoder_input_tokens'], batch['decoder_target_tokens'],
                         enable_dropout=False)
    return sequence_scores(logits, batch['decoder_target_tokens'], batch['decoder_loss_weights'])

  def pad(seqs, n):
    a = np.zeros((batch_size, n), np.int32)
    for i, s in enumerate(seqs):
      a[i, :len(s)] = s
    return a

  out = []
  for i in range(0, len(sources), batch_size):
    enc = [vocab.encode(prefix + s.strip())[:max_input_len - 1] + [1]
           for s in sources[i:i + batch_size]]
    tgt = [vocab.encode(t.strip())[:max_target_len - 1] + [1]
           for t in targets[i:i + batch_size]]
    batch = teacher_forced_features(model, pad(enc, max_input_len), pad(tgt, max_target_len))
    out.append(np.asarray(score(batch),
                          np.float64)[:len(enc)])
  return np.concatenate(out) if out else np.zeros((0,), np.float64)


ROOT = pathlib.Path(__file__).resolve().parent.parent
HELDOUT_HINT = ('make it with `python -m specdec_jax.train.gec_data --out=runs/gec_data_80 '
                '--max_words=80` and `python -m specdec_jax.train.jfleg_split --out=runs/gec_jfleg '
                '--synthetic_dir=runs/gec_data_80`')


def read_predictions(path, sources) -> list[str]:
  """The `prediction` of each row of a decode job's JSONL on all of JFLEG dev, in order.

  Raises:
    ValueError: unreadable, not JSONL with `prediction`, a row count other than
      len(sources), or a row whose `inputs` is not that dev line (another input file).
  """
  try:
    rows = [json.loads(x) for x in pathlib.Path(path).read_text(encoding='utf-8').splitlines()]
    hyps = [r['prediction'] for r in rows]
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise ValueError(f'not a decode job\'s JSONL with a "prediction" in every row ({e}); '
                     'decode dev.src as in gec_en/MODEL_CARD.md, "Evaluation"') from e
  if len(hyps) != len(sources):
    raise ValueError(f'{len(hyps)} rows; decode all {len(sources)} dev sentences')
  for i, (r, s) in enumerate(zip(rows, sources)):
    if 'inputs' in r and r['inputs'].split() != s.split():
      raise ValueError(f'row {i}\'s inputs are not dev line {i} ({r["inputs"][:40]!r}); '
                       'decode dev.src itself, in order')
  return hyps


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument('--predictions', required=True, help="the decode job's JSONL on all of dev.src")
  p.add_argument('--pair_dir', default=str(ROOT / 'specdec_jax' / 'assets' / 'gec_en'),
                 help='the correction pair folder whose target scores (default: the shipped one)')
  p.add_argument('--heldout', default='runs/gec_jfleg/heldout.ids',
                 help="jfleg_split's held-out line numbers (the rest tunes delta)")
  p.add_argument('--out', default=None, help='write the result JSON here too')
  args = p.parse_args(argv)
  sources, refs = gleu.read_jfleg(paths.data_dir() / 'gec' / 'jfleg_dev')
  try:
    hyps = read_predictions(args.predictions, sources)
  except ValueError as e:
    print(f'error: --predictions={args.predictions!r}: {e}.', file=sys.stderr)
    return 2
  try:
    held = gleu.read_line_ids(args.heldout, len(sources))
  except (OSError, ValueError) as e:
    print(f'error: --heldout={args.heldout!r}: {e} ({HELDOUT_HINT}).', file=sys.stderr)
    return 2
  if not (pathlib.Path(args.pair_dir) / 'pair.json').is_file():
    print(f'error: --pair_dir={args.pair_dir!r} has no pair.json; give the correction pair '
          f'folder (default {ROOT / "specdec_jax" / "assets" / "gec_en"}).', file=sys.stderr)
    return 2
  tune = sorted(set(range(len(sources))) - set(held))
  if not tune:
    print(f'error: --heldout={args.heldout!r} holds every dev line; nothing is left to choose '
          'delta on.', file=sys.stderr)
    return 2

  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from specdec_jax import checkpoints  # pylint: disable=import-outside-toplevel
  from specdec_jax.models import t5  # pylint: disable=import-outside-toplevel
  from specdec_jax.models.config import T5Config  # pylint: disable=import-outside-toplevel
  from specdec_jax.text import vocabulary  # pylint: disable=import-outside-toplevel
  pair_dir = pathlib.Path(args.pair_dir)
  pair = json.loads((pair_dir / 'pair.json').read_text())
  config = T5Config(**pair['target_config'])
  params = checkpoints.load_t5x_checkpoint(pair_dir / pair['target']['checkpoint'],
                                           config=config, dtype=jnp.float32)
  vocab = vocabulary.SentencePieceVocab(str(pair_dir / pair['vocabulary']['path']))
  model = t5.Transformer(config)
  prefix = pair.get('input_prefix', '')
  margins = (sequence_logprobs(model, params, vocab, prefix, sources, hyps)
             - sequence_logprobs(model, params, vocab, prefix, sources, sources))

  def score(idx, outputs, iterations):
    return gleu.corpus_gleu([sources[i] for i in idx], [outputs[i] for i in idx],
                            [[r[i] for i in idx] for r in refs], iterations=iterations)

  sweep = []
  for delta in DELTAS:
    out = keep_confident(sources, hyps, margins, delta)
    sweep.append(dict(delta=delta, tune_gleu=score(tune, out, 100).score,
                      edited=sum(o.split() != s.split() for o, s in zip(out, sources))))
  best = max(sweep, key=lambda r: r['tune_gleu'])
  chosen = keep_confident(sources, hyps, margins, best['delta'])
  result = dict(
      delta=best['delta'], sweep=sweep,
      tune_do_nothing=score(tune, sources, 100).score,
      heldout=dict(sentences=len(held),
                   filtered=score(held, chosen, 500).score,
                   unfiltered=score(held, hyps, 500).score,
                   do_nothing=score(held, sources, 500).score,
                   edited_filtered=sum(chosen[i].split() != sources[i].split() for i in held),
                   edited_unfiltered=sum(hyps[i].split() != sources[i].split() for i in held)),
      predictions=args.predictions, pair_dir=args.pair_dir, heldout_ids=args.heldout)
  print(json.dumps(result, indent=2))
  if args.out:
    atomic.write_text(args.out, json.dumps(result, indent=2) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
