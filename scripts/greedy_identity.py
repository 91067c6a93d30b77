r"""Greedy speculative output against greedy baseline output, row by row, on a whole test
set, at batch 1 and 8 (issue #39's exactness goal; any pair, either family), plus α at
temperature 1.

    python scripts/greedy_identity.py --pair demo_ende_decoder_only \
        [--task specdec_ende_multi30k] [--out out/greedy_identity.json] [--predictions_dir DIR]

Runs the decode job (`python -m specdec_jax.decode`, γ = 4, float32 compute as the job
does) for each batch size: baseline and speculative at T = 0, and speculative at T = 1
(batch 8). Compares the predictions row by row and records the summaries' α, tokens per
target call, BLEU (the task's references), rows cut at `max_decode_len` and run seconds. Writes the JSON after
every step (temp file, then rename); exits 1 when any greedy row differs.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from specdec_jax import decode as decode_lib  # noqa: E402
from specdec_jax.util import atomic  # noqa: E402

KEEP = ('alpha', 'acceptance_rate', 'tokens_per_target_call', 'bleu', 'cut_at_max_decode_len',
        'run_s', 'tokens_per_s', 'examples', 'suppress_ids')


def _decode(pair, task, out, method, batch, temperature, gamma):
  rc = decode_lib.main([
      '--gin_file=configs/runs/decode.gin', f"--gin.decode.pair_dir='{pair}'",
      f"--gin.decode.task_name='{task}'", "--gin.decode.task_split='test'",
      f"--gin.decode.output_path='{out}'",
      f"--gin.decode.method='{method}'", f'--gin.decode.batch_size={batch}',
      f'--gin.decode.temperature={temperature}', f'--gin.decode.gamma={gamma}',
      '--gin.decode.print_predictions=0'])
  if rc:
    raise SystemExit(rc)
  rows = [json.loads(x) for x in out.read_text(encoding='utf-8').splitlines()]
  summary = json.loads(out.with_name(out.name + '.summary.json').read_text())
  return rows, {k: summary.get(k) for k in KEEP}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--pair', default='demo_ende_decoder_only')
  p.add_argument('--task', default='specdec_ende_multi30k',
                 help="a seqio task of specdec_jax.text.tasks; its 'test' split is decoded")
  p.add_argument('--batch_sizes', default='1,8')
  p.add_argument('--gamma', type=int, default=4)
  p.add_argument('--out', default='out/greedy_identity.json')
  p.add_argument('--predictions_dir', default=None,
                 help='keep the decode jobs\' prediction files ({method}_{batch}.jsonl, '
                      'speculative_t1.jsonl) in this folder (default: a temporary one)')
  args = p.parse_args(argv)
  result = {'pair': args.pair, 'task': args.task, 'gamma': args.gamma, 'runs': {}}
  differ = 0
  with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(args.predictions_dir or tmp)
    tmp.mkdir(parents=True, exist_ok=True)
    for batch in [int(x) for x in args.batch_sizes.split(',')]:
      rows = {}
      for method in ('baseline', 'speculative'):
        rows[method], summary = _decode(args.pair, args.task, tmp / f'{method}_{batch}.jsonl',
                                        method, batch, 0.0, args.gamma)
        result['runs'][f'{method}/batch{batch}/T0'] = summary
        atomic.write_text(pathlib.Path(args.out), json.dumps(result, indent=2))
      bad = [i for i, (a, b) in enumerate(zip(rows['baseline'], rows['speculative']))
             if a['prediction'] != b['prediction'] or a['tokens'] != b['tokens']]
      differ += len(bad)
      result['runs'][f'identical/batch{batch}'] = {
          'rows': len(rows['baseline']), 'identical': len(rows['baseline']) - len(bad),
          'first_differing_rows': bad[:10]}
      print(f'batch {batch}: {len(rows["baseline"]) - len(bad)} / {len(rows["baseline"])} '
            'greedy rows identical', flush=True)
      atomic.write_text(pathlib.Path(args.out), json.dumps(result, indent=2))
    _, summary = _decode(args.pair, args.task, tmp / 'speculative_t1.jsonl', 'speculative', 8,
                         1.0, args.gamma)
    result['runs']['speculative/batch8/T1'] = summary
  atomic.write_text(pathlib.Path(args.out), json.dumps(result, indent=2))
  print(json.dumps(result, indent=2))
  return 1 if differ else 0


if __name__ == '__main__':
  sys.exit(main())
