"""Start-up cost with JAX's persistent compilation cache cold and warm.

`measure` runs a child process (`python -m specdec_jax.benchmark.startup`) twice on one
fresh, empty cache folder: the first finds the cache cold (it compiles and writes), the
second warm (it reads the compiled programs). Each child loads the pair, then calls the
baseline (`t5_generate`) and the speculative decoder (`t5_speculative_generate`, γ) on
one batch-1 input twice; its compile time is the first call's time less the second's.
The parent also times each child from start to exit (interpreter, imports, loading,
compiling, decoding). Only the pair's files and the cache folder are shared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Optional

from specdec_jax.benchmark.runner import Models, Runner, load_pair, read_sentences
from specdec_jax.text import inputs as inputs_lib


def _child(spec: dict) -> dict:
  """In the child: load, then time the first and second call of each method (seconds)."""
  t0 = time.perf_counter()
  pair, vocab, models = load_pair(spec['pair_dir'], spec['target_config'],
                                  spec['draft_config'], spec['target_checkpoint'],
                                  spec['draft_checkpoint'], spec['vocab_path'],
                                  spec['extra_ids'], spec['checkpoint_dtype'])
  load_s = time.perf_counter() - t0
  records = read_sentences(spec['dataset'], 1)
  examples = inputs_lib.tokenize(records, vocab, prefix=spec['prefix'],
                                 max_input_len=spec['max_input_len'])
  batches = list(inputs_lib.batches(examples, 1, spec['max_input_len'],
                                    spec['input_length_buckets']))
  out: dict[str, Any] = dict(load_s=load_s)
  for method, gamma in (('baseline', None), ('speculative', spec['gamma'])):
    r = Runner(Models(models.target_model, models.target_params, models.draft_model,
                      models.draft_params), batches, method=method, gamma=gamma,
               temperature=0.0, max_decode_len=spec['max_decode_len'], eos_id=vocab.eos_id,
               seed=0, real_vocab_size=vocab.vocab_size)
    r.warm_up()
    r.run_once()
    out[method] = dict(first_call_s=r.first_call_s, second_call_s=r.times[0],
                       compile_s=max(r.first_call_s - r.times[0], 0.0))
  return out


def measure(spec: dict, *, timeout_s: float = 900.0) -> dict:
  """Cold and warm start-up on a fresh cache folder (see the module docstring).

  Args:
    spec: what the child loads and runs: pair_dir, target_config / draft_config (dicts
      or None), target_checkpoint, draft_checkpoint, vocab_path, extra_ids,
      checkpoint_dtype, dataset (a text file, relative to the shared data), prefix,
      max_input_len, input_length_buckets, max_decode_len, gamma; optionally
      min_compile_time_s (JAX's threshold for writing a program to the cache).
    timeout_s: per child.
  Returns:
    `{'cold': {...}, 'warm': {...}, 'note': ...}`; each has `process_wall_s`, `load_s`,
    `cache_entries` (files in the cache folder after that child: a warm child that read
    every program adds none) and per method `first_call_s`, `second_call_s`, `compile_s`. On a failing child:
    `{'skipped': True, 'note': <its stderr's last lines>}` (the benchmark goes on).
  """
  result: dict[str, Any] = dict(
      note='two child processes on one fresh cache folder: cold (compiles, writes), '
           'then warm (reads); compile_s = first call - second call, batch 1, T = 0')
  with tempfile.TemporaryDirectory(prefix='specdec_startup_cache_') as cache:
    env = {k: v for k, v in os.environ.items() if k != 'JAX_COMPILATION_CACHE_DIR'}
    spec = dict(spec, cache_dir=cache)  # the child uses this folder and no other
    for label in ('cold', 'warm'):
      t0 = time.perf_counter()
      try:
        p = subprocess.run([sys.executable, '-m', 'specdec_jax.benchmark.startup'],
                           input=json.dumps(spec), capture_output=True, text=True, env=env,
                           timeout=timeout_s, check=False)
      except subprocess.TimeoutExpired:
        return dict(skipped=True, note=f'start-up child ({label}) ran past {timeout_s:.0f} s')
      wall = time.perf_counter() - t0
      if p.returncode != 0:
        return dict(skipped=True, note=f'start-up child ({label}) failed: '
                    + ' | '.join(p.stderr.strip().splitlines()[-3:]))
      child = json.loads(p.stdout.strip().splitlines()[-1])
      entries = len(os.listdir(child['cache_dir'])) if child.get('cache_dir') else 0
      result[label] = dict(child, process_wall_s=wall, cache_entries=entries)
  return result


def main(argv: Optional[list] = None) -> int:
  """The child: reads the spec (JSON) from stdin, prints its timings (JSON) last."""
  del argv
  from specdec_jax.generate import compile_cache  # pylint: disable=g-import-not-at-top
  spec = json.loads(sys.stdin.read())
  folder = compile_cache.enable(spec['cache_dir'])
  if spec.get('min_compile_time_s') is not None:  # tests: cache the tiny models' programs too
    import jax  # pylint: disable=g-import-not-at-top
    jax.config.update('jax_persistent_cache_min_compile_time_secs',
                      float(spec['min_compile_time_s']))
  out = _child(spec)
  out['cache_dir'] = folder
  print(json.dumps(out), flush=True)
  return 0


if __name__ == '__main__':
  sys.exit(main())
