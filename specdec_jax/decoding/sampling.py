"""Standardized sampling: temperature, top-k and top-p turn logits into a distribution.

Paper §2.2 ("standardized sampling"): speculative decoding stays exact for any such
transform as long as it is applied to both the target's p and the draft's q. These
are pure functions on arrays, shared by `temperature_sample` and
`speculative_sample` so that both decoders use the very same distributions.

Temperature ≤ `MIN_TEMPERATURE` means greedy: the standardized distribution is the
one-hot of `argmax(logits)` over the *raw* logits (T5X ignores topk/topp there too).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

MIN_TEMPERATURE = 1e-4  # T5X: temperatures at or below take the argmax branch.
NEG_INF = -1.0e10  # logit of a masked token (exp underflows to exactly 0 in float32).


def check_int(name: str, value, minimum: int) -> int:
  """`value` as a Python int when it is an int (numpy ints too, not bools) >= minimum.

  Raises:
    ValueError: naming `name`, for anything else.
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or (
      value < minimum):
    raise ValueError(f'{name} must be an int >= {minimum}, got {value!r}.')
  return int(value)


SEED_LIMIT = 2**32


def check_seed(name: str, value) -> int:
  """A PRNG seed as a Python int in [0, 2**32) (what `jax.random.PRNGKey` keeps exactly).

  Raises:
    ValueError: naming `name`, for a bool, a non-int, a negative or too large value
      (`PRNGKey` would overflow or silently fold it).
  """
  if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or not (
      0 <= value < SEED_LIMIT):
    raise ValueError(f'{name} must be an int in [0, 2**32), got {value!r}.')
  return int(value)


def validate_sampling_args(temperature, topk, topp) -> None:
  """Raises ValueError (before any compilation) for inconsistent sampling args.

  Raises:
    ValueError: topk and topp both non-zero, topk negative or not an int, topp
      outside [0, 1], or a negative, infinite or NaN (concrete) temperature.
  """
  check_int('topk (0 = off)', topk, 0)
  if isinstance(topp, (int, float)) and not 0.0 <= topp <= 1.0:
    raise ValueError(f'topp must be in [0, 1] (0 = off), got {topp!r}.')
  if topk and (not isinstance(topp, (int, float)) or topp):
    raise ValueError(f'At most one of topk and topp may be non-zero (got topk={topk}, '
                     f'topp={topp}); set the other to 0.')
  if not isinstance(temperature, jax.core.Tracer):
    t = np.asarray(temperature, np.float64)
    if not bool(np.all((t >= 0) & np.isfinite(t))):  # also catches NaN and ±inf
      raise ValueError(f'temperature must be >= 0 and finite (0 = greedy), got '
                       f'{temperature!r}.')


def is_static_greedy(temperature) -> bool:
  """True when `temperature` is a Python number ≤ MIN_TEMPERATURE (greedy, known at trace time)."""
  return isinstance(temperature, (int, float)) and temperature <= MIN_TEMPERATURE


def topk_mask(logits, topk: int):
  """Keeps the `topk` largest logits per row (ties with the k-th kept), others → NEG_INF."""
  kth = jax.lax.top_k(logits, topk)[0][..., -1:]
  return jnp.where(logits < kth, NEG_INF, logits)


# Masses within this of `topp` count as reaching it (see `topp_mask`).
TOPP_TOLERANCE = 1e-6


def topp_mask(logits, topp):
  """Nucleus mask: keeps the smallest set of most likely tokens whose mass reaches `topp`.

  Rule (T5X's, `t5x/binary_search.py:topp_mask`, up to float32 rounding): sort the
  probabilities `softmax(logits)` in descending order; a token is kept when the mass
  strictly before it is below `topp − TOPP_TOLERANCE`, so the kept prefix is the
  shortest one whose mass is at least `topp` (within the tolerance); every token at
  least as likely as the least likely kept one (its ties) is kept too; the most likely
  token always is. T5X searches the largest threshold t with
  `Σ p[p ≥ t] ≥ topp` and keeps `p ≥ t` — the same set in exact arithmetic — but
  compares float32 sums with no tolerance, so a nucleus that reaches `topp` exactly
  (e.g. 0.5 + 0.3 for topp = 0.8) may gain or lose the next token depending on how
  the sum rounds. Here the prefix masses are summed directly (no `cumsum − p`
  cancellation) and a mass within `TOPP_TOLERANCE` (1e-6, ≈ 17 float32 ulps at 1.0)
  of `topp` counts as reaching it: exact boundary cases give the exact nucleus; a
  nucleus whose true mass falls short of `topp` by less than 1e-6 may be one token
  smaller than in exact arithmetic.

  `topp ≥ 1` keeps every token and `topp ≤ 0` is "off" (keeps every token), also when
  `topp` is traced.

  Args:
    logits: float `[..., vocab]` (already divided by the temperature).
    topp: float scalar (may be traced), or an array broadcastable to
      `logits.shape[:-1]`.
  Returns:
    `logits` with the tokens outside the nucleus set to `NEG_INF`.
  """
  logits = jnp.asarray(logits)
  probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
  sorted_probs = -jnp.sort(-probs, axis=-1)
  cum = jnp.cumsum(sorted_probs, axis=-1)
  mass_before = jnp.concatenate([jnp.zeros_like(cum[..., :1]), cum[..., :-1]], axis=-1)
  topp = jnp.asarray(topp, jnp.float32)
  topp_b = topp[..., None] if topp.ndim else topp
  keep_sorted = mass_before < topp_b - TOPP_TOLERANCE
  keep_sorted = keep_sorted.at[..., 0].set(True)
  # Threshold = smallest kept probability; keep everything at least that likely.
  threshold = jnp.min(jnp.where(keep_sorted, sorted_probs, jnp.inf), axis=-1, keepdims=True)
  keep = (probs >= threshold) | (topp_b >= 1.0) | (topp_b <= 0.0)
  return jnp.where(keep, logits, jnp.asarray(NEG_INF, logits.dtype))


def standardize(logits, temperature, topk: int = 0, topp=0.0, may_be_greedy: bool = True):
  """Logits → standardized log-weights (softmax of the result is the sampling distribution).

  Args:
    logits: float `[..., vocab]`.
    temperature: scalar or array broadcastable to `logits.shape[:-1]` (e.g. `[batch]`
      with logits `[batch, vocab]`, or `[batch, 1]` with `[batch, k, vocab]`).
    topk: static int, 0 = off.
    topp: float in [0, 1], 0 = off, 1 = keeps every token (may be traced); see
      `topp_mask` for the rule at the boundary.
    may_be_greedy: static; False promises that no temperature is ≤ MIN_TEMPERATURE
      (the greedy one-hot branch is then not computed — a speed option).
  Returns:
    float32 `[..., vocab]`: `logits / temperature` with masked tokens at NEG_INF; for
    greedy rows (temperature ≤ MIN_TEMPERATURE) 0 at `argmax(logits)` and NEG_INF elsewhere.
  """
  logits = logits.astype(jnp.float32)

  def greedy_std():
    return jnp.where(jax.nn.one_hot(argmax(logits), logits.shape[-1], dtype=jnp.bool_),
                     0.0, NEG_INF)
  if is_static_greedy(temperature):
    return greedy_std()
  temperature = jnp.asarray(temperature, jnp.float32)
  scaled = logits / jnp.maximum(temperature, MIN_TEMPERATURE)[..., None]
  if topk:
    scaled = topk_mask(scaled, topk)
  if not isinstance(topp, (int, float)) or 0.0 < topp < 1.0:  # arrays / traced: always
    scaled = topp_mask(scaled, topp)
  if not may_be_greedy:
    return scaled
  return jnp.where((temperature <= MIN_TEMPERATURE)[..., None], greedy_std(), scaled)


def probs_from_logits(std_logits):
  """Standardized log-weights → probabilities (float32, sums to 1 on the last axis)."""
  return jax.nn.softmax(std_logits, axis=-1)


def argmax(x):
  """Index of the largest entry on the last axis, int32 `x.shape[:-1]`.

  Same result as `jnp.argmax(x, axis=-1)` (first index on ties; the first NaN if any)
  but built from two plain reductions (max, then the smallest index attaining it)
  instead of XLA's variadic (value, index) reduction, which XLA:CPU does not
  vectorize: 5–7× faster for one row of 8k logits on CPU (scripts/bench_kernels.py).
  """
  m = jnp.max(x, axis=-1, keepdims=True)
  iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
  hit = (x == m) | jnp.isnan(x)
  return jnp.min(jnp.where(hit, iota, x.shape[-1]), axis=-1).astype(jnp.int32)


def categorical(key, logits):
  """One sample from softmax(logits) over the last axis: Gumbel-max, int32.

  Draws the very same sample as `jax.random.categorical(key, logits)` (the same
  Gumbel noise, then `argmax` above), only faster on CPU.
  """
  return argmax(logits + jax.random.gumbel(key, logits.shape, logits.dtype))


def sample_rows(keys, std_logits):
  """One categorical sample per row with its own key.

  Args:
    keys: `[batch]` PRNG keys (or `[batch, 2]` raw uint32 keys).
    std_logits: `[batch, vocab]`.
  Returns:
    int32 `[batch]`, equal to `vmap(jax.random.categorical)(keys, std_logits)`.
  """
  return jax.vmap(categorical)(keys, std_logits)


# Block size of `inverse_cdf`: the vocabulary is cut into blocks of this many ids.
CDF_BLOCK = 128
SAMPLERS = ('gumbel', 'inverse_cdf')


def check_sampler(sampler) -> str:
  """`sampler` when it names one of `SAMPLERS`; ValueError naming the argument otherwise."""
  if sampler not in SAMPLERS:
    raise ValueError(f"sampler must be one of {SAMPLERS} ('gumbel' draws T5X's samples, "
                     f"'inverse_cdf' is faster on CPU), got {sampler!r}.")
  return sampler


def _last_positive(x):
  """Index of the last entry > 0 on the last axis (0 when there is none), int32."""
  iota = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
  return jnp.max(jnp.where(x > 0, iota, 0), axis=-1)


def inverse_cdf(u, probs):
  """Maps two uniforms per row to a token drawn from `probs`, by a two-level inverse CDF.

  The vocabulary is cut into blocks of `CDF_BLOCK` ids (zero-padded). `u[..., 0]`
  picks block b with probability mass_b / Σ mass (inverse CDF over the block masses),
  `u[..., 1]` picks id j within it with probability p_j / mass_b (inverse CDF over
  that block only), so P(j) = p_j / Σ p exactly in real arithmetic (chain rule). An id
  of probability 0 is never returned: the search skips every id whose inclusive
  cumulative sum does not exceed the threshold, and float32 rounding past the last
  positive block or id is clamped back onto it.

  Distributed as `categorical(key, log(probs))` (other draws): two uniforms per row
  instead of one Gumbel variate per vocabulary id, which on CPU at an 8k vocabulary
  makes a sample from given probabilities about 13× cheaper than `categorical` for 1
  and 4 rows (`scripts/bench_kernels.py`, BENCHMARKS.md). The sampler of
  `speculative_sample`.

  Args:
    u: float32 `[..., 2]` in [0, 1).
    probs: float `[..., vocab]`, non-negative, not all zero (need not sum to 1).
  Returns:
    int32 `[...]` ids.
  """
  probs = probs.astype(jnp.float32)
  vocab = probs.shape[-1]
  block = min(CDF_BLOCK, vocab)
  num_blocks = -(-vocab // block)
  if num_blocks * block != vocab:
    pad = [(0, 0)] * (probs.ndim - 1) + [(0, num_blocks * block - vocab)]
    probs = jnp.pad(probs, pad)
  blocks = probs.reshape(probs.shape[:-1] + (num_blocks, block))
  mass = jnp.sum(blocks, axis=-1)  # [..., num_blocks]
  outer = jnp.cumsum(mass, axis=-1)
  b = jnp.sum(outer <= (u[..., 0] * outer[..., -1])[..., None], axis=-1)
  b = jnp.minimum(b, _last_positive(mass))
  row = jnp.take_along_axis(blocks, b[..., None, None], axis=-2)[..., 0, :]  # [..., block]
  inner = jnp.cumsum(row, axis=-1)
  j = jnp.sum(inner <= (u[..., 1] * inner[..., -1])[..., None], axis=-1)
  j = jnp.minimum(j, _last_positive(row))
  return (b * block + j).astype(jnp.int32)


def check_suppress_ids(suppress_ids, vocab_size: int | None = None,
                       eos_id: int | None = None) -> tuple[int, ...]:
  """`suppress_ids` (ids a model must never emit) as a sorted tuple of distinct ints.

  Args:
    suppress_ids: None or an iterable of token ids.
    vocab_size: optional; every id must be below it (and `eos_id`, when given).
    eos_id: optional; it may not be suppressed (no row could end), and must be below
      `vocab_size` (no row could emit it).
  Returns:
    the ids as a static, hashable tuple (empty: nothing suppressed).
  Raises:
    ValueError: a non-integer or negative id, one at or beyond `vocab_size`, the EOS id
      among them, or an `eos_id` outside the vocabulary.
  """
  if eos_id is not None and vocab_size is not None and not 0 <= eos_id < vocab_size:
    raise ValueError(f'eos_id={eos_id} is outside the vocabulary [0, {vocab_size}): no row '
                     'could ever end; pass the vocabulary\'s EOS id.')
  if suppress_ids is None:
    return ()
  try:
    ids = list(suppress_ids)
  except TypeError:
    raise ValueError(f'suppress_ids must be a sequence of token ids, got {suppress_ids!r}.'
                     ) from None
  for i in ids:
    if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or i < 0:
      raise ValueError(f'suppress_ids must hold token ids (ints >= 0), got {i!r}.')
    if vocab_size is not None and i >= vocab_size:
      raise ValueError(f'suppress_ids holds {int(i)}, outside the vocabulary [0, {vocab_size}); '
                       'list only ids the models have.')
  if eos_id is not None and eos_id in ids:
    raise ValueError(f'suppress_ids holds the EOS id {eos_id}: no row could ever end (every '
                     'output would run to max_decode_len); remove it.')
  return tuple(sorted({int(i) for i in ids}))


def suppress(logits, suppress_ids: tuple[int, ...]):
  """`logits [..., V]` with the ids of `suppress_ids` set to NEG_INF (probability 0 under
  every standardization; never the argmax unless every id is suppressed). Ids at or
  beyond V are ignored (a draft with a smaller vocabulary)."""
  if not suppress_ids:
    return logits
  mask = jnp.zeros((logits.shape[-1],), bool).at[jnp.asarray(suppress_ids)].set(
      True, mode='drop')
  return jnp.where(mask, NEG_INF, logits)


def suppressing(logits_fn, suppress_ids: tuple[int, ...]):
  """A step function (`(...) -> (logits [..., V], cache)`: a k-token cached call or T5X's
  `tokens_to_logits`) whose logits have `suppress_ids` set to NEG_INF (`suppress`)."""
  if not suppress_ids:
    return logits_fn

  def fn(*args, **kwargs):
    logits, cache = logits_fn(*args, **kwargs)
    return suppress(logits, suppress_ids), cache
  return fn


def match_vocab(logits, vocab_size: int, real_vocab_size: int | None = None):
  """Pads (with NEG_INF) or truncates the last axis of `logits` to `vocab_size`.

  Used to put a draft whose embedding is padded differently onto the target's ids;
  ids at or beyond `real_vocab_size` (when given) get NEG_INF, i.e. probability 0.
  """
  have = logits.shape[-1]
  if have < vocab_size:
    pad = [(0, 0)] * (logits.ndim - 1) + [(0, vocab_size - have)]
    logits = jnp.pad(logits, pad, constant_values=NEG_INF)
  elif have > vocab_size:
    logits = logits[..., :vocab_size]
  if real_vocab_size is not None and real_vocab_size < vocab_size:
    ids = jnp.arange(vocab_size)
    logits = jnp.where(ids >= real_vocab_size, NEG_INF, logits)
  return logits
