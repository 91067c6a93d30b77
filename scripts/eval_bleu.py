r"""BLEU of a trained EN→DE model (greedy decoding) on a shared-data split; optional α estimate.

  python scripts/eval_bleu.py --run_dir=runs/target_ende --split=ende/multi30k/test_2016_flickr \
      --num=500 [--draft_run_dir=runs/draft_ende]

Decoding: `specdec_jax.generate.t5_generate` (temperature 0 = greedy), or for a decoder-only
model `decoder_only_generate` with each input as its prompt (prefix LM as its run says).
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax.util import atomic  # noqa: E402
from specdec_jax.train import data as data_lib  # noqa: E402
from specdec_jax.train import evaluation  # noqa: E402
from specdec_jax.train import job as train_lib  # noqa: E402
from specdec_jax.train import run_files  # noqa: E402
from specdec_jax.text import vocabulary  # noqa: E402
from specdec_jax.models import family  # noqa: E402


def _bidirectional(run_dir) -> bool:
  """A decoder-only model's prefix-LM flag: its run's summary.json, or its pair.json."""
  value = run_files.run_inputs_bidirectional_attention(run_dir)
  if value is None:
    raise SystemExit(f'{run_dir}: no inputs_bidirectional_attention in summary.json or '
                     '../pair.json; it says whether the model is a prefix LM.')
  return value


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
  config, params = train_lib.load_run(args.run_dir)
  model = family.build(config.replace(dropout_rate=0.0))
  decode_kwargs = {}
  if not hasattr(model, 'encode'):  # decoder-only: prefix LM or not, from the run / pair
    decode_kwargs['inputs_bidirectional_attention'] = _bidirectional(args.run_dir)
  draft = None
  if args.draft_run_dir:
    if decode_kwargs:
      raise SystemExit('--draft_run_dir: the agreement estimate is for T5 pairs only.')
    dconfig, dparams = train_lib.load_run(args.draft_run_dir)
    draft = family.build(dconfig.replace(dropout_rate=0.0))
  inputs = data_lib.encode_inputs(processor, src)
  truncated = sum(len(x) > args.max_input_len for x in inputs)
  inputs = [x if len(x) <= args.max_input_len else x[:args.max_input_len - 1] + [1]
            for x in inputs]
  hyps, stats = [None] * len(inputs), dict(agree=0.0, beta=0.0, positions=0.0)
  reached_max = []  # indices of the outputs that reach max_decode_len (loops, in practice)
  start = time.time()
  for idx, decodes in evaluation.decode_batches(model, params, inputs,
                                                batch_size=args.batch_size,
                                                max_decode_len=args.max_decode_len,
                                                input_buckets=(args.max_input_len,),
                                                **decode_kwargs):
    for i, row in zip(idx, decodes):
      ids = evaluation.ids_until_eos(row)
      if len(ids) >= args.max_decode_len:
        reached_max.append(i)
      hyps[i] = evaluation.detokenize(processor, ids)
    if draft is not None:
      enc = data_lib.pad_batch([inputs[i] for i in idx], args.max_input_len)
      a = evaluation.draft_agreement(model, params, draft, dparams, enc, decodes)
      stats = {k: stats[k] + a[k] for k in stats}
  seconds = time.time() - start
  bleu = evaluation.corpus_bleu(hyps, ref)
  result = {'run_dir': args.run_dir, 'split': args.split, 'sentences': len(hyps),
            'bleu': round(bleu.score, 2), 'bleu_signature': str(bleu),
            'decoder': ('generate.t5_generate' if not decode_kwargs else
                        'generate.decoder_only_generate'), **decode_kwargs,
            'inputs_truncated': truncated,
            'max_input_len': args.max_input_len, 'max_decode_len': args.max_decode_len,
            'outputs_reaching_max_decode_len': len(reached_max),
            'outputs_reaching_max_decode_len_indices': sorted(reached_max),
            'longest_reference_tokens': max(len(processor.encode(r)) + 1 for r in ref),  # + EOS
            'seconds': round(seconds, 1)}
  if draft is not None:
    result['draft_run_dir'] = args.draft_run_dir
    result['draft_greedy_agreement'] = round(stats['agree'] / stats['positions'], 4)
    result['draft_sum_min_pq_t1'] = round(stats['beta'] / stats['positions'], 4)
  print(json.dumps(result), flush=True)
  for h, r in list(zip(hyps, ref))[:3]:
    print('HYP:', h, '\nREF:', r)
  if args.output:
    pathlib.Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(args.output, json.dumps(result, indent=2))
    atomic.write_text(args.output + '.hyp.txt', '\n'.join(hyps) + '\n')
  return result


if __name__ == '__main__':
  main()
