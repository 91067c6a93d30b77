r"""Would a draft temperature other than the target's raise α at temperature 1? (measurement)

  python scripts/draft_calibration.py [--draft_dir=specdec_jax/assets/demo_ende/draft] \
      [--num=400] [--output=out/draft_calibration.json]          (from the repository root)

Speculative sampling is exact for any draft distribution q (paper §2.3), so a draft could
sample from softmax(draft logits / τ) instead of τ = 1. At temperature 1, α is
E[Σ_x min(p(x), q_τ(x))] over the target's own sampled prefixes (paper Def. 3.1). This
samples one translation per source from the target (the first `--num` Multi30K val
sources, temperature 1, seed 123, `evaluation.decode_batches`), scores target and draft
teacher-forced along it, and prints the mean β per τ (non-padding positions). A peak at
τ = 1 says the distilled draft is calibrated and a draft temperature buys nothing.
Writes the table as JSON (atomically).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax.util import atomic  # noqa: E402
from specdec_jax.train import evaluation
from specdec_jax.train import run_files
from specdec_jax.text import vocabulary
from specdec_jax.train import data as data_lib  # noqa: E402
from specdec_jax.models import t5  # noqa: E402

TAUS = (0.7, 0.8, 0.9, 1.0, 1.1, 1.25)
LENGTH, BATCH = 48, 100


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--target_dir', default='specdec_jax/assets/demo_ende/target')
  p.add_argument('--draft_dir', default='specdec_jax/assets/demo_ende/draft')
  p.add_argument('--vocab', default='specdec_jax/assets/demo_ende/vocab/ende8k.model')
  p.add_argument('--split', default='ende/multi30k/val')
  p.add_argument('--num', type=int, default=400, help='sources (a multiple of 100)')
  p.add_argument('--output', default='out/draft_calibration.json')
  args = p.parse_args(argv)
  if args.num < BATCH or args.num % BATCH:
    p.error(f'--num must be a positive multiple of {BATCH}, got {args.num}')
  tc, tp = run_files.load_run(args.target_dir)
  dc, dp = run_files.load_run(args.draft_dir)
  target, draft = t5.Transformer(tc), t5.Transformer(dc)
  sp = vocabulary.load_processor(args.vocab)
  sources, _ = data_lib.read_parallel(args.split, None, limit=args.num)
  if len(sources) < args.num:
    p.error(f'--num={args.num} but {args.split} has only {len(sources)} sentences')
  inputs = data_lib.encode_inputs(sp, sources)
  enc_len = max(len(e) for e in inputs)  # every source whole, with its EOS
  samples = [None] * len(inputs)
  for idx, rows in evaluation.decode_batches(target, tp, inputs, batch_size=BATCH,
                                             max_decode_len=LENGTH, temperature=1.0, seed=123):
    for i, row in zip(idx, rows):
      samples[i] = evaluation.ids_until_eos(row)

  @jax.jit
  def betas(tparams, dparams, enc, dec_in, tgt):
    p_t = jax.nn.softmax(target.apply({'params': tparams}, enc, dec_in, tgt,
                                      enable_dropout=False))
    logits_d = draft.apply({'params': dparams}, enc, dec_in, tgt, enable_dropout=False)
    return jnp.stack([jnp.sum(jnp.minimum(p_t, jax.nn.softmax(logits_d / tau, -1)), -1)
                      for tau in TAUS])

  total, count = np.zeros(len(TAUS)), 0
  for b in range(0, len(inputs), BATCH):
    enc = np.zeros((BATCH, enc_len), np.int32)
    tgt = np.zeros((BATCH, LENGTH), np.int32)
    for j in range(BATCH):
      e = inputs[b + j]
      s = (samples[b + j] + [1])[:LENGTH]  # the sample and its EOS
      enc[j, :len(e)], tgt[j, :len(s)] = e, s
    dec_in = np.zeros_like(tgt)
    dec_in[:, 1:] = tgt[:, :-1]
    beta = np.asarray(betas(tp, dp, enc, dec_in, tgt))
    mask = tgt > 0
    total += (beta * mask).sum((1, 2))
    count += int(mask.sum())
  result = {'draft_dir': args.draft_dir, 'sources': len(inputs), 'positions': count,
            'mean_beta_by_draft_temperature': {str(t): round(float(v), 4)
                                               for t, v in zip(TAUS, total / count)}}
  atomic.write_text(args.output, json.dumps(result, indent=2))
  print(json.dumps(result))
  return 0


if __name__ == '__main__':
  sys.exit(main())
