r"""Cost of a decoder-only model's prompt prefill against its single-token decode step.

  python scripts/prefill_cost.py --run_dir=runs/decoder_only_target_ende \
      [--prompt_len=30] [--batch=1] [--cache_len=96] [--iters=7] [--out=out/prefill_cost.json]

Both are timed the way the benchmark times a cached call (`benchmark.costs.step_costs`):
inside one jitted `lax.fori_loop` of LOOP_STEPS calls, median over `--iters` runs, divided
by LOOP_STEPS, so per-dispatch overhead is amortised. The step feeds its argmax back; each
prefill's prompt depends on the last layer's keys of the previous one (so XLA can neither
drop nor hoist any of it); the prefill writes a `--prompt_len`-token prompt (prefix LM when the run is one) into a cache of
`--cache_len` slots. Issue #39's goal: a 30-token prefill costs at most two steps.
Run it alone (nothing heavy beside it); it records the CPU.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax.benchmark import costs  # noqa: E402
from specdec_jax.benchmark import runner  # noqa: E402
from specdec_jax.util import atomic  # noqa: E402


def main(argv=None):
  p = argparse.ArgumentParser()
  p.add_argument('--run_dir', required=True, help='a decoder-only run or model folder')
  p.add_argument('--prompt_len', type=int, default=30)
  p.add_argument('--batch', type=int, default=1)
  p.add_argument('--cache_len', type=int, default=96)
  p.add_argument('--iters', type=int, default=7)
  p.add_argument('--bidirectional', type=int, default=1, help='prefix-LM prefill (1) or causal')
  p.add_argument('--out', default='out/prefill_cost.json')
  args = p.parse_args(argv)

  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from specdec_jax.decoding import sampling  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import decoder_only  # pylint: disable=g-import-not-at-top
  from specdec_jax.train import run_files  # pylint: disable=g-import-not-at-top

  config, params = run_files.load_run(args.run_dir)
  model = decoder_only.DecoderOnlyTransformer(config.replace(dropout_rate=0.0))
  b, n = args.batch, costs.LOOP_STEPS
  prompt = jnp.concatenate([jnp.zeros((b, 1), jnp.int32),
                            jnp.full((b, args.prompt_len), 5, jnp.int32)], axis=1)
  mask = jnp.ones_like(prompt)

  @jax.jit
  def prefill_loop(params, cache):
    def body(_, carry):
      cache, tok = carry
      x = prompt.at[:, 1].set(tok)  # depends on the previous iteration: not hoisted
      cache = model.apply({'params': params}, x, mask, cache, bool(args.bidirectional),
                          method=model.prefill)
      # The next prompt depends on the last layer's keys at the last prompt position,
      # which depend on every layer below at every prompt position: nothing of the
      # prefill can be dropped or hoisted out of the loop.
      last = jnp.sum(cache.self_k[-1][:, :, args.prompt_len], axis=(1, 2))
      return cache, (tok + (last > 0).astype(jnp.int32)) % 7 + 3
    return jax.lax.fori_loop(0, n, body, (cache, jnp.full((b,), 3, jnp.int32)))[1]

  cache0, _ = decoder_only.prefill_cache(model, params, prompt, args.cache_len,
                                         inputs_bidirectional_attention=bool(args.bidirectional))
  lengths = jnp.full((b,), args.prompt_len, jnp.int32)

  @jax.jit
  def step_loop(params, cache):
    step = decoder_only.make_step_fn(model, params)

    def body(_, carry):
      cache, tok = carry
      logits, cache = step(tok[:, None], lengths, cache)
      return cache, sampling.argmax(logits[:, -1])
    return jax.lax.fori_loop(0, n, body, (cache, jnp.ones((b,), jnp.int32)))[1]

  step_s = costs._median_time(lambda: step_loop(params, cache0), args.iters) / n  # pylint: disable=protected-access
  prefill_s = costs._median_time(lambda: prefill_loop(params, cache0), args.iters) / n  # pylint: disable=protected-access
  result = {'run_dir': args.run_dir, 'prompt_len': args.prompt_len, 'batch': b,
            'cache_len': args.cache_len, 'bidirectional': bool(args.bidirectional),
            'step_ms': round(step_s * 1e3, 3), 'prefill_ms': round(prefill_s * 1e3, 3),
            'prefill_in_steps': round(prefill_s / step_s, 3), 'loop_steps': n,
            'iters': args.iters, 'cpu': runner.cpu_info()}
  print(json.dumps(result, indent=2))
  pathlib.Path(args.out).parent.mkdir(parents=True, exist_ok=True)
  atomic.write_text(args.out, json.dumps(result, indent=2))
  return result


if __name__ == '__main__':
  main()
