r"""How often sampled outputs hold ids the demo target never saw in training, with and
without `decode.suppress_ids` (issue: sentinels and the unknown piece at T = 1).

    python scripts/suppressed_rate.py [--pair demo_ende] [--out out/suppressed_rate.json]

For each held-out set (Multi30K test 2016, the first 1,000 WMT news_test sentences) the
decode job decodes at temperature 1 (seed 0, baseline and speculative) twice: with
`decode.suppress_ids=()` (T5X's default: nothing suppressed) and with the pair's own list
(`'pair'`, pair.json). A row counts when its text holds the unknown piece ("⁇") or a
sentinel ("<extra_id_"); ids beyond the SentencePiece model and the sentinels decode to
those. Writes the counts after every decode (temp file, then rename) and prints them.
`--sets` and `--methods` choose a part of the grid.
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
from specdec_jax.util import paths  # noqa: E402

MARKERS = ('⁇', '<extra_id_')


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--pair', default='demo_ende')
  p.add_argument('--out', default='out/suppressed_rate.json')
  p.add_argument('--limit', type=int, default=1000)
  p.add_argument('--sets', default='multi30k_test_2016,wmt_news_test')
  p.add_argument('--methods', default='baseline,speculative')
  args = p.parse_args(argv)
  data = paths.data_dir() / 'ende'
  sets = {'multi30k_test_2016': data / 'multi30k/test_2016_flickr.en.gz',
          'wmt_news_test': data / 'wmt/news_test.en'}
  result = {'pair': args.pair, 'temperature': 1.0, 'seed': 0, 'markers': MARKERS,
            'rows': {}}
  with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    for name, src in sets.items():
      if name not in args.sets.split(','):
        continue
      for method in args.methods.split(','):
        for label, value in (('none', '()'), ('pair', "'pair'")):
          out = tmp / f'{name}_{method}_{label}.jsonl'
          rc = decode_lib.main([
              '--gin_file=configs/runs/decode.gin', f"--gin.decode.pair_dir='{args.pair}'",
              f"--gin.decode.input_path='{src}'", f'--gin.decode.max_examples={args.limit}',
              f"--gin.decode.output_path='{out}'",
              f"--gin.decode.method='{method}'", '--gin.decode.temperature=1.0',
              '--gin.decode.batch_size=32', '--gin.decode.print_predictions=0',
              f'--gin.decode.suppress_ids={value}'])
          if rc:
            return rc
          rows = [json.loads(x) for x in out.read_text(encoding='utf-8').splitlines()]
          hit = sum(any(m in r['prediction'] for m in MARKERS) for r in rows)
          result['rows'][f'{name}/{method}/suppress_{label}'] = {
              'rows': len(rows), 'with_unseen_ids': hit,
              'percent': round(100 * hit / max(len(rows), 1), 2)}
          print(name, method, label, hit, '/', len(rows), flush=True)
          atomic.write_text(pathlib.Path(args.out), json.dumps(result, indent=2))
  print(json.dumps(result['rows'], indent=2))
  return 0


if __name__ == '__main__':
  sys.exit(main())
