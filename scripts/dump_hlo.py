"""Writes the compiled (optimized) HLO of the demo pair's two decoders, for a kernel census.

    python scripts/dump_hlo.py --output_dir out/hlo [--gamma 3] [--batch_size 1]
        [--temperature 0 1] [--baseline_sampler gumbel inverse_cdf]
    python ../shared/tools/hlo_loop_census.py out/hlo/*.hlo

For each temperature it compiles `generate._speculative_generate` (fixed γ) and, for
each baseline sampler, `generate._generate` exactly as `t5_speculative_generate` /
`t5_generate` do on CPU (the decoders' compiler options included), with encoder
inputs of 32 tokens and max_decode_len 64 (the benchmark's shapes), and writes
`spec_T{t}_B{b}_g{γ}.hlo` and `base_{sampler}_T{t}_B{b}.hlo`. The census counts the
kernels each while-loop iteration launches (BENCHMARKS.md). Compiles only; runs nothing.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from specdec_jax.generate import t5 as generate  # noqa: E402
from specdec_jax.util import atomic
from specdec_jax.decoding import policies
from specdec_jax.decoding import sampling
from specdec_jax.benchmark import runner  # noqa: E402


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--output_dir', required=True)
  ap.add_argument('--gamma', type=int, default=3)
  ap.add_argument('--batch_size', type=int, default=1)
  ap.add_argument('--temperature', type=float, nargs='+', default=[0.0, 1.0])
  ap.add_argument('--baseline_sampler', nargs='+', default=['gumbel', 'inverse_cdf'],
                  choices=list(sampling.SAMPLERS))
  ap.add_argument('--max_decode_len', type=int, default=64)
  args = ap.parse_args(argv)
  if args.gamma < 1 or args.batch_size < 1 or min(args.temperature) < 0:
    ap.error('--gamma and --batch_size must be >= 1 and --temperature >= 0')
  out = pathlib.Path(args.output_dir)
  out.mkdir(parents=True, exist_ok=True)
  _, vocab, m = runner.load_pair('demo_ende', None, None, None, None, None, 100)
  b, length = args.batch_size, args.max_decode_len
  tok = jnp.ones((b, 32), jnp.int32)
  prompt = jnp.zeros((b, length), jnp.int32)
  key = jax.random.PRNGKey(0)
  common = dict(topp=0.0, max_decode_len=length, eos_id=vocab.eos_id, num_decodes=1, topk=0,
                max_decode_steps=None, rescale_log_probs=True, prompt_free=True,
                per_row_greedy=False)
  for t in args.temperature:
    static = 0.0 if t <= generate.decoding.MIN_TEMPERATURE else None
    text = generate._speculative_generate.lower(  # pylint: disable=protected-access
        m.target_model, m.target_params, m.draft_model, m.draft_params, tok, tok, prompt, key,
        jnp.float32(t), gamma=args.gamma, static_temperature=static,
        real_vocab_size=vocab.vocab_size, draft_policy=policies.as_policy(None),
        **common).compile().as_text()
    atomic.write_text(out / f'spec_T{t:g}_B{b}_g{args.gamma}.hlo', text)
    for sampler in args.baseline_sampler:
      text = generate._generate.lower(  # pylint: disable=protected-access
          m.target_model, m.target_params, tok, prompt, key, jnp.float32(t),
          static_temperature=static, sampler=sampler, **common).compile().as_text()
      atomic.write_text(out / f'base_{sampler}_T{t:g}_B{b}.hlo', text)
  print('wrote', ', '.join(sorted(os.listdir(out))))
  return 0


if __name__ == '__main__':
  raise SystemExit(main())
