r"""BLEU of a trained EN→DE model (greedy decoding) on a shared-data split; optional α estimate.

  python scripts/eval_bleu.py --run_dir=runs/target_ende --split=ende/multi30k/test_2016_flickr \
      --num=500 [--draft_run_dir=runs/draft_ende]

Decoding: `specdec_jax.generate.t5_generate` (temperature 0 = greedy).
BLEU is sacrebleu's corpus BLEU (13a tokenization) of the detokenized output against the raw
reference text. With `--draft_run_dir`, the draft is scored teacher-forced along the target's
greedy outputs: argmax agreement (α for greedy speculative decoding, γ-independent estimate)
and mean Σ_x min(p, q) at temperature 1.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import sacrebleu

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax import data as data_lib  # noqa: E402
from specdec_jax import train as train_lib  # noqa: E402
from specdec_jax import vocabulary  # noqa: E402
from specdec_jax.models import t5  # noqa: E402


def load_model(path):
  """(T5Config, float32 params) of a run dir (params.msgpack) or an exported T5X model dir."""
  path = pathlib.Path(path)
  if (path / 'params.msgpack').exists():
    return train_lib.load_run(path)
  from specdec_jax import checkpoints
  config = train_lib.config_from_dict(json.loads((path / 'config.json').read_text()))
  return config, checkpoints.load_t5x_checkpoint(path, config=config, dtype=jnp.float32)


def decode_ids(processor, ids, eos_id=1):
  ids = list(np.asarray(ids))
  if eos_id in ids:
    ids = ids[:ids.index(eos_id)]
  n = processor.vocab_size()
  return processor.decode([int(i) for i in ids if 0 < i < n])


def greedy_decode(model, params, enc, max_len):
  from specdec_jax import generate
  decodes, _ = generate.t5_generate(model, params, enc, max_len, eos_id=1, temperature=0.0)
  return np.asarray(decodes[:, 0])


def draft_agreement(target, tparams, draft, dparams, enc, decodes):
  """(argmax agreements, Σ min(p,q) sum, positions) teacher-forced along target greedy outputs."""
  tgt = np.array(decodes)
  for row in tgt:  # keep through first EOS
    hits = np.flatnonzero(row == 1)
    if len(hits):
      row[hits[0] + 1:] = 0
  dec_in = np.zeros_like(tgt)
  dec_in[:, 1:] = tgt[:, :-1]
  w = (tgt > 0).astype(np.float32)

  @jax.jit
  def f(tparams, dparams, enc, dec_in, tgt, w):
    lp = jax.nn.log_softmax(target.apply({'params': tparams}, enc, dec_in, tgt,
                                         enable_dropout=False))
    lq = jax.nn.log_softmax(draft.apply({'params': dparams}, enc, dec_in, tgt,
                                        enable_dropout=False))
    agree = jnp.sum((jnp.argmax(lp, -1) == jnp.argmax(lq, -1)) * w)
    overlap = jnp.sum(jnp.sum(jnp.minimum(jnp.exp(lp), jnp.exp(lq)), -1) * w)
    return agree, overlap, jnp.sum(w)
  return [float(x) for x in f(tparams, dparams, enc, dec_in, tgt, w)]


def main(argv=None):
  p = argparse.ArgumentParser()
  p.add_argument('--run_dir', required=True)
  p.add_argument('--draft_run_dir', default=None)
  p.add_argument('--vocab', default='specdec_jax/assets/demo_ende/vocab/ende8k.model')
  p.add_argument('--split', default='ende/multi30k/test_2016_flickr')
  p.add_argument('--num', type=int, default=500)
  p.add_argument('--batch_size', type=int, default=100)
  p.add_argument('--max_input_len', type=int, default=64)
  p.add_argument('--max_decode_len', type=int, default=64)
  p.add_argument('--output', default=None, help='JSON file for the results (+ .hyp.txt)')
  args = p.parse_args(argv)

  processor = vocabulary.load_processor(args.vocab)
  src, ref = data_lib.read_parallel(args.split, limit=args.num)
  config, params = load_model(args.run_dir)
  model = t5.Transformer(config.replace(dropout_rate=0.0))
  draft = None
  if args.draft_run_dir:
    dconfig, dparams = load_model(args.draft_run_dir)
    draft = t5.Transformer(dconfig.replace(dropout_rate=0.0))
  inputs = data_lib.encode_inputs(processor, src)
  truncated = sum(len(x) > args.max_input_len for x in inputs)
  hyps, stats = [], np.zeros(3)
  start = time.time()
  for s in range(0, len(inputs), args.batch_size):
    chunk = inputs[s:s + args.batch_size]
    n = len(chunk)
    chunk = chunk + [[1]] * (args.batch_size - n)  # fixed batch shape, one compile
    enc = data_lib.pad_batch(chunk, args.max_input_len)
    decodes = greedy_decode(model, params, enc, args.max_decode_len)
    hyps.extend(decode_ids(processor, d) for d in decodes[:n])
    if draft is not None:
      a = draft_agreement(model, params, draft, dparams, enc[:n], decodes[:n])
      stats += np.array(a)
  seconds = time.time() - start
  bleu = sacrebleu.corpus_bleu(hyps, [ref])
  result = {'run_dir': args.run_dir, 'split': args.split, 'sentences': len(hyps),
            'bleu': round(bleu.score, 2), 'bleu_signature': str(bleu),
            'decoder': 'generate.t5_generate', 'inputs_truncated': truncated,
            'max_input_len': args.max_input_len, 'max_decode_len': args.max_decode_len,
            'seconds': round(seconds, 1)}
  if draft is not None:
    result['draft_run_dir'] = args.draft_run_dir
    result['draft_greedy_agreement'] = round(stats[0] / stats[2], 4)
    result['draft_sum_min_pq_t1'] = round(stats[1] / stats[2], 4)
  print(json.dumps(result), flush=True)
  for h, r in list(zip(hyps, ref))[:3]:
    print('HYP:', h, '\nREF:', r)
  if args.output:
    pathlib.Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.output).write_text(json.dumps(result, indent=2))
    pathlib.Path(args.output + '.hyp.txt').write_text('\n'.join(hyps) + '\n')
  return result


if __name__ == '__main__':
  main()
