"""`Prepared`: a decode job after preparation (steps 1–4), before decoding (5–6).

Its own module so that `job` (which makes it) and `outputs` (which runs it) do not
import each other.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any, Optional

from specdec_jax.decode import pair as pair_lib


@dataclasses.dataclass
class Prepared:
  """Everything `run_decode` needs: validated settings, loaded models and tokenized inputs.

  `vocab` decodes the outputs (and gives EOS); `input_vocab` (default `vocab`)
  tokenized the inputs.
  """
  settings: dict
  pair: pair_lib.PairSpec
  vocab: Any
  examples: list
  target_model: Any = None
  target_params: Any = None
  draft_model: Any = None
  draft_params: Any = None
  output_path: Optional[pathlib.Path] = None
  input_vocab: Any = None
  plan: Any = None  # specdec_jax.sharding.ShardingPlan, or None (one device)

  @property
  def eos_id(self) -> int:
    return self.pair.eos_id if self.pair.eos_id is not None else self.vocab.eos_id
