"""The shipped demo pair on real text, through the gin decode job.

Decodes the first 100 sentences of Multi30K test_2016 (seqio task
`specdec_ende_multi30k`, split `test`) with the demo pair, greedily, speculatively
(γ = 4) and with the baseline: the predictions must be identical, and the floors hold.
Measured on the shipped pair (v6 target, v6.2 draft; specdec_jax/assets/demo_ende/MODEL_CARD.md):
BLEU 28.2 on these 100 sentences (31.33 on all 1,000; the v3 target scored 28.1 on them, the
v2 target 20.0), α 0.818 (Σ min(p, q) over scored positions, one-hot p and q at temperature 0;
0.813 on all 1,000; the v6 draft: 0.803 here), 3.08 tokens per target call (v6 draft: 2.99).
The floors leave margins of about 15 % (BLEU), 0.07 (α) and 0.48 (tokens per call): a broken
draft (α ≈ 0), or a target no better than v2, fails them.
"""

from __future__ import annotations

import json

import pytest

from specdec_jax import decode
from specdec_jax.util import paths

BLEU_FLOOR = 24.0
ALPHA_FLOOR = 0.75
TOKENS_PER_CALL_FLOOR = 2.6
DEMO = paths.ASSETS_DIR / 'demo_ende'

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (DEMO / 'draft').is_dir(), reason='demo pair not shipped'),
]


def _run(tmp_path, method, *bindings):
  out = tmp_path / f'{method}.jsonl'
  summary = decode.run([
      '--gin_file=configs/runs/decode.gin',
      "--gin.decode.task_name='specdec_ende_multi30k'", "--gin.decode.task_split='test'",
      '--gin.decode.max_examples=100', f"--gin.decode.method='{method}'",
      '--gin.decode.temperature=0.0', '--gin.decode.gamma=4', '--gin.decode.batch_size=10',
      f"--gin.decode.output_path='{out}'", *bindings])
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  return rows, summary


def test_demo_pair_on_multi30k(tmp_path):
  spec_rows, spec = _run(tmp_path, 'speculative')
  base_rows, base = _run(tmp_path, 'baseline')
  assert len(spec_rows) == len(base_rows) == 100
  assert [r['prediction'] for r in spec_rows] == [r['prediction'] for r in base_rows]
  assert [r['tokens'] for r in spec_rows] == [r['tokens'] for r in base_rows]
  assert spec['alpha'] >= ALPHA_FLOOR, spec
  assert spec['bleu'] >= BLEU_FLOOR, spec
  assert spec['bleu'] == pytest.approx(base['bleu'])
  assert spec['tokens_per_target_call'] >= TOKENS_PER_CALL_FLOOR, spec
  # pair.json's suppress_ids apply by default: the unknown piece, sentinels, padding rows
  assert spec['suppress_ids'] == base['suppress_ids'] == [2, [8000, 8191]]


DECODER_ONLY = paths.ASSETS_DIR / 'demo_ende_decoder_only'
DO_BLEU_FLOOR = 21.0
DO_ALPHA_FLOOR = 0.77
DO_TOKENS_PER_CALL_FLOOR = 2.75


@pytest.mark.skipif(not (DECODER_ONLY / 'draft').is_dir(),
                    reason='decoder-only demo pair not shipped')
def test_decoder_only_demo_pair_on_multi30k(tmp_path):
  """The decoder-only demo pair (target v3 + draft v2; its MODEL_CARD.md) on the same 100
  sentences: greedy speculative == greedy baseline row for row, and floors below what it
  measured on them (BLEU 25.1, α 0.821, 3.05 tokens per target call; margins about 16 %, 0.05
  and 0.30) that a broken draft or prefill fails, and so does the earlier draft v1 (α 0.744,
  2.57 tokens per call here)."""
  out = {}
  for method in ('speculative', 'baseline'):
    out[method] = _run(tmp_path, method, "--gin.decode.pair_dir='demo_ende_decoder_only'")
  (spec_rows, spec), (base_rows, base) = out['speculative'], out['baseline']
  assert [r['prediction'] for r in spec_rows] == [r['prediction'] for r in base_rows]
  assert [r['tokens'] for r in spec_rows] == [r['tokens'] for r in base_rows]
  assert spec['alpha'] >= DO_ALPHA_FLOOR, spec
  assert spec['bleu'] >= DO_BLEU_FLOOR, spec
  assert spec['tokens_per_target_call'] >= DO_TOKENS_PER_CALL_FLOOR, spec
  assert spec['suppress_ids'] == [2, [8000, 8191]]


@pytest.mark.skipif(not (DECODER_ONLY / 'draft').is_dir(),
                    reason='decoder-only demo pair not shipped')
def test_decoder_only_t5x_model_gin_decodes_as_the_pair_folder(tmp_path):
  """The decode job takes the decoder-only pair's T5X model gin (MODEL =
  @models.SpeculativeDecoderOnlyModel(), prefix LM from its INPUTS_BIDIRECTIONAL_ATTENTION):
  the same predictions and target calls as the pair folder, on 20 test sentences."""
  common = ["--gin.decode.task_name='specdec_ende_multi30k'", "--gin.decode.task_split='test'",
            '--gin.decode.max_examples=20', '--gin.decode.batch_size=10',
            "--gin.decode.checkpoint_dtype='float32'"]
  shipped = json.loads((DECODER_ONLY / 'pair.json').read_text())['target']['checkpoint']
  runs = {}
  for name, files in (
      ('pair', ['--gin_file=configs/runs/decode.gin',
                "--gin.decode.pair_dir='demo_ende_decoder_only'", '--gin.decode.gamma=4']),
      ('gin', ['--gin_file=specdec_jax/configs/t5x/demo_ende_decoder_only.gin',
               "--gin.CHECKPOINT_PATH='specdec_jax/assets/demo_ende_decoder_only/"
               f"{shipped}'"])):
    out = tmp_path / f'{name}.jsonl'
    summary = decode.run(files + common + [f"--gin.decode.output_path='{out}'"])
    runs[name] = ([json.loads(line) for line in out.read_text().splitlines()], summary)
  (pair_rows, pair), (gin_rows, gin_summary) = runs['pair'], runs['gin']
  assert [r['prediction'] for r in gin_rows] == [r['prediction'] for r in pair_rows]
  assert [r['target_calls'] for r in gin_rows] == [r['target_calls'] for r in pair_rows]
  assert gin_summary['method'] == 'speculative' and gin_summary['alpha'] > 0.5
  assert gin_summary['family'] == pair['family'] == 'decoder_only'
  assert gin_summary['inputs_bidirectional_attention'] is True  # the gin's prefix LM
  assert pair['inputs_bidirectional_attention'] is True
