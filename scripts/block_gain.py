"""Tokens per target call, token-wise vs block verification, from decode-job outputs.

Reads the JSONL files that `python -m specdec_jax.decode` wrote with
`--gin.decode.verification='token'` and `'block'` (same pair, inputs, γ, temperature;
several seeds), named `g<γ>_<verification>_s<seed>.jsonl` in one folder, and reports per γ:
tokens per target call of each rule (Σ tokens / Σ target calls over every row of every
seed), the relative gain of block over token, and a 95 % bootstrap interval of the gain
(rows resampled with replacement within each rule, 2,000 resamples, numpy seed 0). Writes
the table as JSON (atomically) and prints it.

  python scripts/block_gain.py --folder out/stats_block --output out/block_gain.json

Sun et al., "Block Verification Accelerates Speculative Decoding" (ICLR 2025), Thm. 2: the
block rule's expected accepted length is never below the token rule's for the same drafts.
"""

from __future__ import annotations

import argparse
import collections
import json
import pathlib
import re
import sys

import numpy as np

from specdec_jax.util import atomic
from specdec_jax.util import jsonio

NAME = re.compile(r'g(\d+)_(token|block)_s(\d+)\.jsonl$')


def read(folder: pathlib.Path) -> dict:
  """{γ: {rule: (tokens [rows], target_calls [rows], seeds)}} from the folder's JSONL files."""
  rows = collections.defaultdict(lambda: collections.defaultdict(lambda: ([], [], [])))
  for path in sorted(folder.glob('g*_s*.jsonl')):
    m = NAME.search(path.name)
    if not m or not path.with_name(path.name + '.summary.json').is_file():
      continue  # a run still going (its summary is written last)
    gamma, rule, seed = int(m.group(1)), m.group(2), int(m.group(3))
    tokens, calls, seeds = rows[gamma][rule]
    for line in path.read_text().splitlines():
      r = json.loads(line)
      tokens.append(r['tokens'])
      calls.append(r['target_calls'])
    seeds.append(seed)
  return rows


def gain_table(rows: dict, resamples: int = 2000, seed: int = 0) -> list[dict]:
  """One dict per γ with both rules: tokens per call, gain and its bootstrap interval."""
  rng = np.random.default_rng(seed)
  out = []
  for gamma in sorted(rows):
    if set(rows[gamma]) != {'token', 'block'}:
      continue
    per = {}
    boot = {}
    for rule, (tokens, calls, seeds) in rows[gamma].items():
      t, c = np.asarray(tokens, np.float64), np.asarray(calls, np.float64)
      per[rule] = dict(tokens_per_call=t.sum() / c.sum(), rows=len(t), seeds=sorted(seeds))
      idx = rng.integers(0, len(t), size=(resamples, len(t)))
      boot[rule] = t[idx].sum(1) / c[idx].sum(1)
    ratio = boot['block'] / boot['token']
    out.append(dict(gamma=gamma, token=per['token'], block=per['block'],
                    gain=per['block']['tokens_per_call'] / per['token']['tokens_per_call'] - 1,
                    gain_95=[float(np.quantile(ratio, 0.025) - 1),
                             float(np.quantile(ratio, 0.975) - 1)]))
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  parser.add_argument('--folder', default='out/stats_block', type=pathlib.Path)
  parser.add_argument('--output', default='out/block_gain.json', type=pathlib.Path)
  args = parser.parse_args(argv)
  if not args.folder.is_dir():
    print(f'block_gain: error: --folder {str(args.folder)!r} is not a folder', file=sys.stderr)
    return 2
  table = gain_table(read(args.folder))
  if not table:
    print(f'block_gain: error: no γ with both token and block runs in {args.folder}',
          file=sys.stderr)
    return 2
  atomic.write_text(args.output, jsonio.dumps(table, indent=2))
  print('| γ | token tok/call | block tok/call | gain | 95 % interval | rows (seeds) |')
  print('|---|---|---|---|---|---|')
  for r in table:
    print(f"| {r['gamma']} | {r['token']['tokens_per_call']:.3f} | "
          f"{r['block']['tokens_per_call']:.3f} | {100 * r['gain']:+.1f} % | "
          f"{100 * r['gain_95'][0]:+.1f} … {100 * r['gain_95'][1]:+.1f} % | "
          f"{r['token']['rows']} ({len(r['token']['seeds'])}) |")
  return 0


if __name__ == '__main__':
  sys.exit(main())
