"""Per-phase profile of baseline vs speculative decoding on a pair (jax.profiler).

    python scripts/profile_round.py [--pair_dir demo_ende] [--sentences 8] [--gamma 3]
        [--batch_size 1] [--temperature 0] [--max_input_len 64] [--checkpoint_dtype float32]
        [--output_dir out/profile]      (from the repository root)

Compiles the pair family's baseline and speculative decoder (`generate.t5_generate` and
`generate.t5_speculative_generate`, or for a decoder-only pair `decoder_only_generate` and
`decoder_only_speculative_generate`, prefix-LM as its pair.json says) for batches of
`--batch_size` (default 1) of the first N Multi30K test_2016 sentences (with the pair's task
prefix; the decoder-only pair's prompt is that same text),
times one untraced pass of each (median of 3), then traces one pass with
`jax.profiler` and attributes every XLA:CPU op's time to a phase through the op's
HLO metadata: the named scopes `draft`, `verify` and `accept` of `decoding.speculative_sample`
and the Flax module names (mlp, self_attention, encoder_decoder_attention,
logits_dense, Transformer.encode). Ops that XLA created without metadata (some dots)
inherit the phase of their first labelled operand.

Phases: `encode` (the T5 encoders, or the decoder-only prompt prefill of both models, and
cache set-up: once per call), `draft`, `verify`
(split by sub-layer), `accept+commit` (the rest of the speculative loop body),
`step` (the baseline's loop body, split by sub-layer) and `other`.

The tracer inflates op times and the two CPU threads overlap, so the table reports
each phase's share of traced op time and that share of the untraced wall time, per
round (speculative) or per loop step (baseline; at batch 1 one token), also in units of
one baseline step. At batch > 1 both are loop iterations (a batch runs until its longest
row ends; `tokens` then counts iterations, not emitted tokens).
Writes profile.json and profile.md in the output folder (atomically) and prints the
markdown. Used for the cost breakdown in BENCHMARKS.md (runs: docs/benchmarks/history.md).
"""
from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import pathlib
import re
import shlex
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax import decode, generate
from specdec_jax.util import atomic
from specdec_jax.benchmark import job as benchmark
from specdec_jax.generate import xla_options
from specdec_jax.text import inputs as inputs_lib

LINE = re.compile(r'\s*(?:ROOT )?%?([\w.\-]+) = [^(]*?(?:\w+)\((.*?)\)(.*)$')
OP_NAME = re.compile(r'op_name="([^"]*)"')
SKIP = ('ThunkExecutor', 'end:', 'SlinkyThreadPool')


def hlo_op_names(hlo_text: str) -> dict:
  """{instruction name: op_name}, unlabelled instructions taking their operands' label."""
  names, operands = {}, {}
  for line in hlo_text.splitlines():
    m = LINE.match(line)
    if not m:
      continue
    name = m.group(1)
    operands[name] = re.findall(r'%([\w.\-]+)', m.group(2))
    label = OP_NAME.search(line)
    if label:
      names[name] = label.group(1)
  def resolve(name, depth=0):
    if name in names or depth > 6:
      return names.get(name, '')
    for o in operands.get(name, ()):
      got = resolve(o, depth + 1)
      if got:
        return got
    return ''
  return {n: resolve(n) for n in operands}


def sublayer(op: str) -> str:
  for key, label in (('logits', 'logits'), ('mlp', 'mlp'),
                     ('encoder_decoder_attention', 'cross-attention'),
                     ('self_attention', 'self-attention')):
    if key in op:
      return label
  return 'other'


def phase(op: str, speculative: bool) -> str:
  if 'Transformer.encode' in op or 'init_cache' in op or '.prefill' in op:
    return 'encode'
  if '/draft/' in op:
    return 'draft'
  if '/verify/' in op:
    return 'verify: ' + sublayer(op)
  if 'while/body' in op:
    return 'accept+commit' if speculative else 'step: ' + sublayer(op)
  return 'other'


def profile(fn, params, inputs, speculative: bool, trace_dir: str):
  """Untraced wall time (median of 3 passes), per-phase op time and the stats.

  `params` (a tuple of device-array trees) are arguments of the compiled program, as
  in `generate/t5.py` (closed over, they would be compiled in as constants).
  """
  compiled = xla_options.jit(fn).lower(*params, inputs[0]).compile()  # as generate/t5.py compiles
  labels = hlo_op_names(compiled.as_text())
  outs = [jax.block_until_ready(compiled(*params, x)) for x in inputs]
  walls = []
  for _ in range(3):
    t0 = time.perf_counter()
    for x in inputs:
      jax.block_until_ready(compiled(*params, x))
    walls.append(time.perf_counter() - t0)
  jax.profiler.start_trace(trace_dir)
  for x in inputs:
    jax.block_until_ready(compiled(*params, x))
  jax.profiler.stop_trace()
  path = sorted(glob.glob(f'{trace_dir}/**/*.xplane.pb', recursive=True),
                key=os.path.getmtime)[-1]
  times = collections.Counter()
  for plane in jax.profiler.ProfileData.from_file(path).planes:
    for line in plane.lines:
      if 'Eigen' not in line.name and 'PjRtCpuClient' not in line.name:
        continue
      for ev in line.events:
        if ev.name.startswith(SKIP) or 'Dispatch' in ev.name or ev.name.startswith('while'):
          continue
        times[phase(labels.get(ev.name, ''), speculative)] += ev.duration_ns / 1e9
  return statistics.median(walls), times, outs


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--pair_dir', default=None,
                  help="a pair folder or a shipped pair's name (default: the T5 demo pair); "
                       'a decoder-only pair (pair.json family) is profiled with its own decoders')
  ap.add_argument('--sentences', type=int, default=8)
  ap.add_argument('--gamma', type=int, default=3)
  ap.add_argument('--batch_size', type=int, default=1)
  ap.add_argument('--temperature', type=float, default=0.0)
  ap.add_argument('--max_input_len', type=int, default=64,
                  help='inputs are padded to this length (Multi30K sentences fit in 64)')
  ap.add_argument('--max_decode_len', type=int, default=64)
  ap.add_argument('--checkpoint_dtype', default='float32',
                  help="cast params when loading, as configs/runs/benchmark.gin does; "
                       "'none' = as stored (bfloat16 for the demo pair)")
  ap.add_argument('--output_dir', default='out/profile')
  a = ap.parse_args(argv)
  if a.sentences < 1 or a.gamma < 1 or a.batch_size < 1 or a.temperature < 0:
    ap.error('--sentences, --gamma and --batch_size must be >= 1 and --temperature >= 0.')

  pair, vocab, m = benchmark.load_pair(a.pair_dir or decode.DEMO_PAIR, None, None, None,
                                       None, None, 100,
                                       None if a.checkpoint_dtype == 'none'
                                       else a.checkpoint_dtype)
  decoder_only = not hasattr(m.target_model, 'encode')
  records = benchmark.read_sentences(benchmark.DEFAULT_DATASETS[0][1], a.sentences)
  examples = inputs_lib.tokenize(records, vocab, prefix=pair.input_prefix or decode.TRANSLATE_PREFIX,
                                 max_input_len=a.max_input_len)
  inputs = [jnp.asarray(b.tokens)
            for b in inputs_lib.batches(examples, a.batch_size, a.max_input_len)]
  kw = dict(eos_id=vocab.eos_id, temperature=a.temperature,
            decode_rng=jax.random.PRNGKey(0))

  if decoder_only:  # the prompt is the input; both models prefilled in one pass each
    kw['inputs_bidirectional_attention'] = bool(pair.inputs_bidirectional_attention)
    base_fn, spec_fn = generate.decoder_only_generate, generate.decoder_only_speculative_generate
  else:
    base_fn, spec_fn = generate.t5_generate, generate.t5_speculative_generate

  def base(target_params, x):
    return base_fn(m.target_model, target_params, x, a.max_decode_len, **kw)

  def spec(target_params, draft_params, x):
    return spec_fn(m.target_model, target_params, m.draft_model, draft_params, x,
                   a.max_decode_len, a.gamma, real_vocab_size=vocab.vocab_size, **kw)

  out_dir = pathlib.Path(a.output_dir)
  out_dir.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory() as tmp:
    base_wall, base_t, base_outs = profile(base, (m.target_params,), inputs, False,
                                           tmp + '/base')
    spec_wall, spec_t, spec_outs = profile(spec, (m.target_params, m.draft_params), inputs,
                                           True, tmp + '/spec')

  # Loop iterations: a batch's baseline loop runs until its longest row ends, its
  # speculative loop for its largest number of rounds (= target calls).
  tokens = sum(max(len(inputs_lib.tokens_until_eos(r, vocab.eos_id))
                   for r in np.asarray(o[0])[:, 0]) for o in base_outs)
  rounds = sum(int(np.max(np.asarray(o[2].target_calls))) for o in spec_outs)
  identical = all(np.array_equal(np.asarray(b[0]), np.asarray(s[0]))
                  for b, s in zip(base_outs, spec_outs))
  base_total, spec_total = sum(base_t.values()), sum(spec_t.values())
  step_ms = 1e3 * base_wall * sum(v for k, v in base_t.items()
                                  if k.startswith('step')) / base_total / tokens

  def rows(times, total, wall, per, unit):
    out = []
    for k, v in sorted(times.items(), key=lambda kv: -kv[1]):
      ms = 1e3 * wall * v / total / per
      out.append(dict(phase=k, op_ms=1e3 * v, share=v / total, wall_ms_per_unit=ms,
                      baseline_steps=ms / step_ms, unit=unit))
    return out

  res = dict(
      command=shlex.join(['python', 'scripts/profile_round.py'] + (argv or sys.argv[1:])),
      settings=vars(a), pair=pair.name,
      family='decoder_only' if decoder_only else 'encoder_decoder', sentences=len(inputs), tokens=tokens, rounds=rounds,
      tokens_per_round=tokens / rounds, identical=identical if a.temperature == 0 else None,
      baseline_wall_s=base_wall, speculative_wall_s=spec_wall, speedup=base_wall / spec_wall,
      baseline_step_ms=step_ms,
      baseline=rows(base_t, base_total, base_wall, tokens, 'token'),
      speculative=rows(spec_t, spec_total, spec_wall, rounds, 'round'),
      machine=benchmark.machine())

  md = [f'# Per-phase profile ({pair.name}, batch {a.batch_size}, γ={a.gamma}, T={a.temperature}, '
        f'{len(inputs)} Multi30K sentences, max_input_len {a.max_input_len})', '',
        f'Command: `{res["command"]}`', '',
        f'Baseline {base_wall * 1e3:.1f} ms, speculative {spec_wall * 1e3:.1f} ms '
        f'(speedup {res["speedup"]:.2f}); {tokens} tokens, {rounds} rounds '
        f'({res["tokens_per_round"]:.2f} tokens per round); one baseline decoder step '
        f'= {step_ms:.2f} ms.' + ('' if res['identical'] is None else
                                   f' Outputs identical: {identical}.'), '']
  for name, key in (('Baseline, per token', 'baseline'), ('Speculative, per round',
                                                          'speculative')):
    md += [f'## {name}', '', '| phase | share of op time | ms | baseline steps |',
           '|---|---|---|---|']
    md += [f'| {r["phase"]} | {100 * r["share"]:.1f} % | {r["wall_ms_per_unit"]:.3f} | '
           f'{r["baseline_steps"]:.2f} |' for r in res[key]]
    md.append('')
  text = '\n'.join(md)
  for fname, content in (('profile.json', json.dumps(res, indent=1)), ('profile.md', text)):
    atomic.write_text(out_dir / fname, content)
  print(text)
  return 0


if __name__ == '__main__':
  sys.exit(main())
