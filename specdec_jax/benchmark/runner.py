"""Timed runs of one decoding method over a list of batches, and the pair they run on."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import platform
import statistics
import time
from typing import Any, Optional, Sequence

import numpy as np

from specdec_jax.text import inputs as inputs_lib
from specdec_jax.util import paths

STAT_FIELDS = ('target_calls', 'drafted', 'accepted', 'alpha_sum', 'alpha_count', 'tokens')


def stats(xs: Sequence[float]) -> dict:
  """median / min / max / n of a list of numbers."""
  xs = [float(x) for x in xs]
  return dict(median=statistics.median(xs), min=min(xs), max=max(xs), n=len(xs))


def ratio(a, b) -> float:
  return float(a) / float(b) if b else float('nan')


def read_sentences(path, n: int, binding: str = 'benchmark.datasets'
                   ) -> list[inputs_lib.Record]:
  """The first `n` lines of a text file (relative paths: under the shared data folder);
  errors name `binding`."""
  p = pathlib.Path(path)
  if not p.is_absolute() and not p.exists():
    p = paths.data_dir() / p
  return inputs_lib.read_file(p, 'text', binding=binding)[:n]


def timed(fn):
  """(seconds, result) of `fn()`, waiting for the result."""
  import jax  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  out = jax.block_until_ready(fn())
  return time.perf_counter() - t0, out


@dataclasses.dataclass
class Models:
  target_model: Any
  target_params: Any
  draft_model: Any
  draft_params: Any


class TopkTooLarge(ValueError):
  """`topk` exceeds a model's vocabulary (found from the configs, before loading)."""


def load_pair(pair_dir, target_config, draft_config, target_checkpoint, draft_checkpoint,
              vocab_path, extra_ids, checkpoint_dtype=None, plan=None, need_draft=True,
              topk: int = 0):
  """(PairSpec, vocabulary, Models) as the decode job resolves them; with a
  `sharding.ShardingPlan`, the params are restored straight into its shardings.
  `need_draft=False` (model-free drafters only) loads no draft: its Models fields are None.

  Raises:
    TopkTooLarge: `topk` exceeds a model's vocab_size (checked before any checkpoint is read).
  """
  import jax  # pylint: disable=g-import-not-at-top
  from specdec_jax import checkpoints  # pylint: disable=g-import-not-at-top
  from specdec_jax import decode as decode_lib  # pylint: disable=g-import-not-at-top
  from specdec_jax.models import family  # pylint: disable=g-import-not-at-top
  pair = decode_lib.resolve_pair(pair_dir, target_config=target_config,
                                 draft_config=draft_config,
                                 target_checkpoint=target_checkpoint,
                                 draft_checkpoint=draft_checkpoint, vocab_path=vocab_path,
                                 need_draft=need_draft)
  for role in ('target', 'draft') if need_draft else ('target',):
    cfg = getattr(pair, f'{role}_config')
    if topk > cfg.vocab_size:
      raise TopkTooLarge(f'topk={topk} exceeds the {role} model\'s vocab_size='
                         f'{cfg.vocab_size}; use a smaller topk (0 = off).')
  vocab = decode_lib.load_vocabulary(pair.vocab_path, extra_ids)
  loaded = {'draft': (None, None)}
  for role in ('target', 'draft') if need_draft else ('target',):
    cfg = getattr(pair, f'{role}_config')
    params = checkpoints.load_t5x_checkpoint(
        getattr(pair, f'{role}_checkpoint'), cfg,
        dtype=decode_lib._dtype(checkpoint_dtype),  # pylint: disable=protected-access
        shardings=None if plan is None else plan.param_shardings(cfg, role))
    family.check_params(params, cfg)
    if plan is None:  # Once, here: numpy params would be copied to the device per call.
      params = jax.device_put(params)
    loaded[role] = (family.build(cfg), params)
  return pair, vocab, Models(loaded['target'][0], loaded['target'][1], loaded['draft'][0],
                             loaded['draft'][1])


@dataclasses.dataclass
class Runner:
  """Runs one method over all batches of one (dataset, temperature, batch size).

  After `run_once`: `outputs` (per real example, tokens up to EOS), `stats` (per
  real example, the speculative statistics), and per batch over *all* its rows
  (padding rows included, as they keep the loop running): `row_tokens` (tokens
  each row emitted) and, for speculative decoding, `rounds` (the loop's rounds:
  the largest `target_calls` of the batch).
  """
  m: Models
  batches: list
  _: dataclasses.KW_ONLY
  method: str
  gamma: Optional[int]
  temperature: float
  max_decode_len: int
  eos_id: int
  seed: int
  real_vocab_size: Optional[int]
  policy: Any = None  # policies.DraftPolicy for adaptive draft lengths (γ = γ_max)
  sampler: str = 'gumbel'  # the baseline's sampler (decoding.temperature_sample)
  plan: Any = None  # sharding.ShardingPlan (None: one device)
  verification: str = 'token'  # speculative rows: 'token' (Algorithm 1) or 'block'
  topk: int = 0
  topp: float = 0.0
  drafter: str = 'model'  # speculative rows: generate.common.resolve_drafter's names
  ngram_table: Any = None  # (ids, log_probs) of a 'bigram' / 'unigram' drafter
  lenience: float = 1.0  # < 1: NOT exact (paper Appendix A.5)
  inputs_bidirectional_attention: bool = False  # decoder-only pairs: prefix-LM prefill
  times: list = dataclasses.field(default_factory=list)
  first_call_s: Optional[float] = None
  outputs: Optional[list] = None
  stats: Optional[dict] = None
  row_tokens: Optional[list] = None
  rounds: Optional[list] = None

  def _call(self, batch, i):
    import jax  # pylint: disable=g-import-not-at-top
    from specdec_jax import generate  # pylint: disable=g-import-not-at-top
    key = jax.random.fold_in(jax.random.PRNGKey(self.seed), i)
    kw = dict(eos_id=self.eos_id, temperature=self.temperature, decode_rng=key,
              topk=self.topk, topp=self.topp, sharding_plan=self.plan)
    if not hasattr(self.m.target_model, 'encode'):  # decoder-only: the input is the prompt
      kw['inputs_bidirectional_attention'] = self.inputs_bidirectional_attention
      if self.method == 'baseline':
        return generate.decoder_only_generate(self.m.target_model, self.m.target_params,
                                              batch.tokens, self.max_decode_len,
                                              sampler=self.sampler, **kw)
      return generate.decoder_only_speculative_generate(
          self.m.target_model, self.m.target_params, self.m.draft_model, self.m.draft_params,
          batch.tokens, self.max_decode_len, self.gamma, real_vocab_size=self.real_vocab_size,
          draft_policy=self.policy, verification=self.verification, drafter=self.drafter,
          ngram_table=self.ngram_table, lenience=self.lenience, **kw)
    if self.method == 'baseline':
      return generate.t5_generate(self.m.target_model, self.m.target_params, batch.tokens,
                                  self.max_decode_len, sampler=self.sampler, **kw)
    return generate.t5_speculative_generate(
        self.m.target_model, self.m.target_params, self.m.draft_model, self.m.draft_params,
        batch.tokens, self.max_decode_len, self.gamma, real_vocab_size=self.real_vocab_size,
        draft_policy=self.policy, verification=self.verification, drafter=self.drafter,
        ngram_table=self.ngram_table, lenience=self.lenience, **kw)

  def warm_up(self):
    """Compiles (and times) the first call; warms every other input shape untimed."""
    self.first_call_s, _ = timed(lambda: self._call(self.batches[0], 0))
    seen = {self.batches[0].tokens.shape}
    for i, batch in enumerate(self.batches):
      if batch.tokens.shape not in seen:
        seen.add(batch.tokens.shape)
        timed(lambda: self._call(batch, i))  # pylint: disable=cell-var-from-loop

  def run_once(self):
    import jax  # pylint: disable=g-import-not-at-top
    total = 0.0
    outputs, row_tokens, rounds = [], [], []
    st = {k: [] for k in STAT_FIELDS}
    for i, batch in enumerate(self.batches):
      dt, out = timed(lambda: self._call(batch, i))  # pylint: disable=cell-var-from-loop
      total += dt
      if self.outputs is None:
        out = jax.device_get(out)
        decodes = np.asarray(out[0])[:, 0]
        rows = [inputs_lib.tokens_until_eos(r, self.eos_id) for r in decodes]
        outputs.extend(rows[:batch.n_real])
        row_tokens.append([len(r) for r in rows])
        if self.method == 'speculative':
          for k in STAT_FIELDS:
            st[k].extend(np.asarray(getattr(out[2], k))[:batch.n_real, 0].tolist())
          rounds.append(int(np.max(np.asarray(out[2].target_calls))))
    if self.outputs is None:
      self.outputs, self.row_tokens = outputs, row_tokens
      if self.method == 'speculative':
        self.stats, self.rounds = st, rounds
    self.times.append(total)

  @property
  def num_tokens(self) -> int:
    return int(sum(len(o) for o in self.outputs))


def config_dict(cfg) -> dict:
  """A T5Config as JSON-ready dict (`models.config.to_dict`)."""
  from specdec_jax.models import config as config_lib  # pylint: disable=g-import-not-at-top
  return config_lib.to_dict(cfg)


# CPU features that decide which matmul kernels XLA:CPU can use (AVX-512, AMX tiles).
MATMUL_FLAGS = ('avx2', 'fma', 'avx512f', 'avx512_bf16', 'avx512_fp16', 'amx_tile', 'amx_bf16')


def cpu_info(cpuinfo: str = '/proc/cpuinfo',
             cache_dir: str = '/sys/devices/system/cpu/cpu0/cache') -> dict:
  """The CPU model, its cache sizes and matmul-relevant ISA flags (Linux; {} elsewhere).

  Whether a model's weights fit the last-level cache decides whether a one-token step is
  memory-bound (BENCHMARKS.md): the same 2-core VM has come on hosts with a 32 MiB and a
  480 MiB L3, so every run records it.

  Returns:
    `{'model': str, 'caches_kib': {'L1d': int, 'L2': int, 'L3': int, ...},
    'flags': [the MATMUL_FLAGS present]}` with whatever of it could be read.
  """
  info = {}
  try:
    text = pathlib.Path(cpuinfo).read_text()
  except OSError:
    text = ''
  for line in text.splitlines():
    key, _, value = line.partition(':')
    key = key.strip()
    if key == 'model name' and 'model' not in info:
      info['model'] = value.strip()
    elif key == 'flags' and 'flags' not in info:
      present = set(value.split())
      info['flags'] = [f for f in MATMUL_FLAGS if f in present]
  caches = {}
  for index in sorted(pathlib.Path(cache_dir).glob('index*')):
    try:
      level = (index / 'level').read_text().strip()
      kind = (index / 'type').read_text().strip()
      size = (index / 'size').read_text().strip()
    except OSError:
      continue
    if kind == 'Instruction':
      continue
    scale = {'K': 1, 'M': 1024}.get(size[-1:], None)  # sysfs writes e.g. '48K', '491520K'
    if scale is None or not size[:-1].isdigit():
      continue
    caches[f'L{level}' + ('d' if kind == 'Data' else '')] = int(size[:-1]) * scale
  if caches:
    info['caches_kib'] = caches
  return info


def machine() -> dict:
  """Platform, CPU (model, caches, ISA flags), CPU count, library versions, devices, load."""
  import flax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  m = dict(platform=platform.platform(), processor=platform.processor() or platform.machine(),
           cpu=cpu_info(), cpu_count=os.cpu_count(), python=platform.python_version(),
           jax=jax.__version__, flax=flax.__version__,
           devices=[str(d) for d in jax.devices()])
  try:
    m['load_average_at_start'] = os.getloadavg()
  except OSError:
    pass
  for mod in ('torch', 'transformers'):
    try:
      m[mod] = __import__(mod).__version__
    except ImportError:
      m[mod] = None
  return m
