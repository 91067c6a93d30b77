"""`scripts/adaptive_bound.py`: the replay of speculative rounds from agreement bits, and
the oracle dynamic programme that bounds every adaptive draft-length policy.

The replay must reproduce the decoder's own round count (checked here on the shipped
pair against `generate.t5_speculative_generate`, and in the script's output against a
benchmark run), and the oracle must be no worse than any fixed γ or the heuristic and
equal to brute force over every choice sequence on short sentences.
"""

from __future__ import annotations

import importlib.util
import itertools
import pathlib

import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location('adaptive_bound',
                                               REPO / 'scripts' / 'adaptive_bound.py')
bound = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bound)

# Costs of the shape the benchmark measures on this CPU (target-step units).
UNITS = dict(c=0.03, v={1: 1.22, 2: 1.27, 3: 1.26, 4: 1.24, 5: 1.34},
             a_spec={1: 0.004, 2: 0.006, 3: 0.009, 4: 0.02, 5: 0.016})


def _cost(rounds):
  return sum(bound.round_cost(g, UNITS) for g in rounds)


def test_replay_fixed_and_heuristic_by_hand():
  bits = np.array([1, 1, 0, 1, 1, 1, 1, 0, 1], bool)
  # γ=2: accepts 2 (+1) from 0, 2 (+1) from 3, 1 (+1) from 6, the last token alone from 8.
  assert bound.replay_fixed(bits, 2) == [2, 2, 2, 2]
  # γ=5: 2+1 from 0, 4+1 from 3, then 1 token left.
  assert bound.replay_fixed(bits, 5) == [5, 5, 5]
  # heuristic from γ_max=3: 3 (2 accepted: −1) → 2 (2 accepted: +2) → 3 ...
  assert bound.replay_heuristic(bits, 3) == [3, 2, 3, 2]
  assert bound.runs_of_agreement(bits).tolist() == [2, 1, 0, 4, 3, 2, 1, 0, 1, 0]


def test_oracle_no_worse_than_any_policy_and_equal_to_brute_force():
  rng = np.random.default_rng(0)
  for trial in range(200):
    n = int(rng.integers(1, 9))
    bits = rng.random(n) < rng.uniform(0.3, 0.95)
    oracle = bound.replay_oracle(bits, 5, UNITS)
    best = _cost(oracle)
    for g in range(1, 6):
      assert best <= _cost(bound.replay_fixed(bits, g)) + 1e-12
    assert best <= _cost(bound.replay_heuristic(bits, 5)) + 1e-12
    if n <= 5:  # brute force: every sequence of draft lengths that covers the sentence
      run = bound.runs_of_agreement(bits)
      brute = np.inf
      for seq in itertools.product(range(1, 6), repeat=n):
        p, cost = 0, 0.0
        for g in seq:
          if p >= n:
            break
          cost += bound.round_cost(g, UNITS)
          p += min(run[p], g) + 1
        brute = min(brute, cost)
      assert best == pytest.approx(brute), (trial, bits)


def test_iid_bound_is_one_when_drafting_is_free_and_verify_flat():
  flat = dict(c=0.0, v={g: 1.0 for g in range(1, 6)}, a_spec={g: 0.0 for g in range(1, 6)})
  b = bound.iid_bound(0.8, 5, flat)
  assert b['best_fixed_gamma'] == 5
  assert b['oracle_vs_best_fixed'] == pytest.approx(1.0)
  # With a cost per drafted token the clairvoyant policy gains (it never drafts a wasted token).
  assert bound.iid_bound(0.8, 5, UNITS)['oracle_vs_best_fixed'] > 1.02


@pytest.mark.slow
def test_replay_matches_the_decoder_on_the_shipped_pair():
  import jax.numpy as jnp
  from specdec_jax.train import data as data_lib
  from specdec_jax import generate
  from specdec_jax.text import vocabulary
  pair = bound.PAIR
  if not (pair / 'draft').is_dir():
    pytest.skip('demo pair not shipped')
  processor = vocabulary.load_processor(str(pair / 'vocab/ende8k.model'))
  src, _ = data_lib.read_parallel('ende/multi30k/test_2016_flickr', limit=4)
  inputs = data_lib.encode_inputs(processor, src)
  target, tparams = bound.load_model(pair / 'target')
  draft, dparams = bound.load_model(pair / 'draft')
  per_sentence = bound.agreement_bits(target, tparams, draft, dparams, inputs, 64)
  for i, (bits, _) in enumerate(per_sentence):
    enc = jnp.asarray(data_lib.pad_batch([inputs[i]], 32))
    _, _, stats = generate.t5_speculative_generate(target, tparams, draft, dparams, enc, 64, 3)
    assert int(np.asarray(stats.target_calls).reshape(-1)[0]) == len(bound.replay_fixed(bits, 3)), i
