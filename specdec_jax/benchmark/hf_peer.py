"""The Hugging Face peer: transformers `generate` without / with `assistant_model`.

The pair is exported with `hf_t5.export_hf_t5` and timed on the same inputs as the
JAX rows (batch 1, greedy, `torch.set_num_threads(threads)`). Skipped with a note when
torch / transformers are missing.
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings

import numpy as np

from specdec_jax.text import inputs as inputs_lib
from specdec_jax.benchmark.runner import stats as _stats


def run(models, datasets, *, max_decode_len, repeats, threads, num_assistant_tokens,
                eos_id) -> dict:
  """Times HF `generate` without / with `assistant_model` (batch 1, greedy).

  Args:
    datasets: list of `(name, examples, jax_greedy_outputs or None)`.
  """
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    return dict(skipped=True, note=f'HF peer skipped: {e} (install torch and transformers).')
  from specdec_jax.interop.hf import t5 as hf_t5  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(threads)
  with tempfile.TemporaryDirectory(prefix='specdec_hf_') as tmp:
    tdir = hf_t5.export_hf_t5(models.target_params, models.target_model.config,
                              os.path.join(tmp, 'target'))
    ddir = hf_t5.export_hf_t5(models.draft_params, models.draft_model.config,
                              os.path.join(tmp, 'draft'))
    cls = transformers.T5ForConditionalGeneration
    target = cls.from_pretrained(tdir).eval()
    draft = cls.from_pretrained(ddir).eval()
  if num_assistant_tokens is not None:
    draft.generation_config.num_assistant_tokens = int(num_assistant_tokens)
    draft.generation_config.num_assistant_tokens_schedule = 'constant'

  def generate(inputs, assisted):
    outs = []
    total = 0.0
    for ids in inputs:
      # A fresh cache without a config: transformers sizes a config-built decoder cache
      # by num_hidden_layers (= the ENCODER's layers for T5), which breaks targets with
      # more decoder than encoder layers (transformers#40120; IndexError in 5.x).
      kw = dict(max_new_tokens=max_decode_len, do_sample=False, num_beams=1,
                attention_mask=torch.ones_like(ids),
                past_key_values=transformers.EncoderDecoderCache(transformers.DynamicCache(),
                                                                 transformers.DynamicCache()))
      if assisted:
        kw['assistant_model'] = draft
      t0 = time.perf_counter()
      with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter('ignore', FutureWarning)  # 5.x renames past_key_values
        out = target.generate(ids, **kw)
      total += time.perf_counter() - t0
      outs.append(inputs_lib.tokens_until_eos(out[0, 1:].numpy(), eos_id))
    return total, outs

  names = ('hf_baseline', 'hf_assisted')
  runs = []
  for dname, examples, jax_greedy in datasets:
    inputs = [torch.tensor([list(ex.tokens)], dtype=torch.long) for ex in examples]
    generate(inputs, False)  # warm-up
    generate(inputs, True)
    res = {name: dict(times=[]) for name in names}
    outs = {}
    for _ in range(repeats):
      for name in names:
        t, o = generate(inputs, name == 'hf_assisted')
        res[name]['times'].append(t)
        outs[name] = o
    for name in names:
      ntok = int(sum(len(o) for o in outs[name]))
      st = _stats(res[name]['times'])
      res[name].update(time_s=st, tokens=ntok, tokens_per_s=ntok / st['median'])
    same = all(np.array_equal(a, b) for a, b in zip(outs['hf_baseline'], outs['hf_assisted']))
    same_jax = (None if jax_greedy is None else
                all(np.array_equal(a, b) for a, b in zip(outs['hf_baseline'], jax_greedy)))
    runs.append(dict(dataset=dname, sentences=len(inputs),
                     # tokens/s ratio, as the JAX rows (the time ratio when the
                     # outputs are identical, as they are at temperature 0)
                     speedup=res['hf_assisted']['tokens_per_s'] /
                     res['hf_baseline']['tokens_per_s'],
                     identical_hf_baseline_vs_assisted=same,
                     identical_hf_vs_jax_baseline=same_jax, **res))
  return dict(skipped=False, batch_size=1, temperature=0.0, torch_threads=threads,
              torch=torch.__version__, transformers=transformers.__version__,
              num_assistant_tokens=(num_assistant_tokens if num_assistant_tokens is not None
                                    else 'HF default (heuristic schedule)'),
              runs=runs)
