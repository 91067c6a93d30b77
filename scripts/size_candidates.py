r"""Step time versus model size, on random weights: how the demo pair's sizes were chosen.

    python scripts/size_candidates.py [--iters 20] [--train_steps 0] [--output out/sizes.json]

For every target candidate (T5 1.1, vocabulary 8,192) this measures, inside a
compiled loop of cached calls (the benchmark's `step_costs`, batch 1, 32 encoder
tokens): the one-token step in ms, v(γ) = t((γ+1)-token call) / t(1-token call), and,
for every draft candidate, c = t(draft step) / t(target step). It also prints each
model's decoder parameters (layers + logits layer: what a one-token step reads) and
per-token decoder multiply-adds, so the draft's cost ratio can be read off directly.
With `--train_steps N` it also times N training steps (batch 64, lengths 32) of each
target, for the tokens/s a training run can expect.

Run it on a quiet machine (nothing else heavy): the numbers are wall-clock.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from specdec_jax.benchmark import costs as costs_lib
from specdec_jax.benchmark.runner import Models
from specdec_jax.models import t5
from specdec_jax.models.config import T5Config

TARGETS = {
    'e256_l4_m1024': dict(emb_dim=256, num_heads=4, num_encoder_layers=4,
                          num_decoder_layers=4, mlp_dim=1024),
    'e384_l6_m1536': dict(emb_dim=384, num_heads=6, num_encoder_layers=6,
                          num_decoder_layers=6, mlp_dim=1536),
    'e384_d8_m1536': dict(emb_dim=384, num_heads=6, num_encoder_layers=4,
                          num_decoder_layers=8, mlp_dim=1536),
    'e512_d4_m2048': dict(emb_dim=512, num_heads=8, num_encoder_layers=4,
                          num_decoder_layers=4, mlp_dim=2048),
    'e512_d3_m2048': dict(emb_dim=512, num_heads=8, num_encoder_layers=4,
                          num_decoder_layers=3, mlp_dim=2048),
    'e448_d5_m1792': dict(emb_dim=448, num_heads=7, num_encoder_layers=4,
                          num_decoder_layers=5, mlp_dim=1792),
}
DRAFTS = {
    'e96_d1_m256': dict(emb_dim=96, num_heads=2, head_dim=48, num_encoder_layers=2,
                        num_decoder_layers=1, mlp_dim=256),
    'e128_d1_m512': dict(emb_dim=128, num_heads=2, head_dim=64, num_encoder_layers=2,
                         num_decoder_layers=1, mlp_dim=512),
}


def config(**kw) -> T5Config:
  base = dict(vocab_size=8192, dtype=jnp.float32, head_dim=64,
              mlp_activations=('gelu', 'linear'), dropout_rate=0.0,
              logits_via_embedding=False)
  base.update(kw)
  return T5Config(**base)


def decoder_params(cfg: T5Config) -> int:
  """Params a one-token decoder step reads: decoder layers + final norm + logits layer."""
  shapes = t5.param_shapes(cfg)
  return int(sum(np.prod(s) for p, s in shapes.items() if "'decoder'" in p and
                 'relpos' not in p))


def decoder_macs(cfg: T5Config, enc_len: int = 16, dec_pos: int = 16) -> int:
  """Multiply-adds per decoded token: every decoder matmul + attention over the caches."""
  hd = cfg.num_heads * cfg.head_dim
  per_layer = (4 * cfg.emb_dim * hd            # self-attention q, k, v, out
               + 2 * cfg.emb_dim * hd          # cross-attention q, out (k, v cached)
               + len(cfg.mlp_activations) * cfg.emb_dim * cfg.mlp_dim + cfg.mlp_dim * cfg.emb_dim
               + 2 * hd * (dec_pos + enc_len))  # scores and weighted sums
  return per_layer * cfg.num_decoder_layers + cfg.emb_dim * cfg.vocab_size


def train_tokens_per_s(cfg: T5Config, steps: int) -> float:
  from specdec_jax.train import job as train_lib  # pylint: disable=g-import-not-at-top
  cfg = cfg.replace(dropout_rate=0.1)
  model = t5.Transformer(cfg)
  params = t5.init_params(cfg, jax.random.PRNGKey(0))
  opt = train_lib.make_optimizer(train_lib.make_schedule(1e-3, 10))
  state = train_lib.TrainState(step=jnp.array(0, jnp.int32), params=params,
                               opt_state=opt.init(params))
  step = train_lib.make_train_step(model, opt, mode='target', label_smoothing=0.1)
  rng = np.random.default_rng(0)
  tok = lambda: jnp.asarray(rng.integers(3, 8000, (64, 32)), jnp.int32)
  batch = dict(encoder_input_tokens=tok(), decoder_input_tokens=tok(),
               decoder_target_tokens=tok(), decoder_loss_weights=jnp.ones((64, 32)))
  state, m = step(state, batch, jax.random.PRNGKey(1), None)
  jax.block_until_ready(m)
  ts = []
  for _ in range(steps):
    t0 = time.perf_counter()
    state, m = step(state, batch, jax.random.PRNGKey(1), None)
    jax.block_until_ready(m)
    ts.append(time.perf_counter() - t0)
  return 64 * 32 / statistics.median(ts)


def main():
  ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  ap.add_argument('--iters', type=int, default=20)
  ap.add_argument('--train_steps', type=int, default=0)
  ap.add_argument('--targets', default=','.join(TARGETS))
  ap.add_argument('--output', default='out/sizes.json')
  args = ap.parse_args()
  tokens = np.random.default_rng(0).integers(3, 8000, (1, 32)).astype(np.int32)
  drafts = {n: config(**kw) for n, kw in DRAFTS.items()}
  draft_params = {n: t5.init_params(c, jax.random.PRNGKey(2)) for n, c in drafts.items()}
  rows = []
  for name in args.targets.split(','):
    cfg = config(**TARGETS[name])
    params = t5.init_params(cfg, jax.random.PRNGKey(1))
    row = dict(name=name, params=int(sum(x.size for x in jax.tree_util.tree_leaves(params))),
               decoder_params=decoder_params(cfg), decoder_macs=decoder_macs(cfg))
    for dname, dcfg in drafts.items():
      models = Models(t5.Transformer(cfg), params, t5.Transformer(dcfg), draft_params[dname])
      costs = costs_lib.step_costs(models, tokens, 64, [1, 2, 3, 4], args.iters)
      row['step_ms'] = 1e3 * costs['target_step_s']['1']
      row['v'] = {g: round(v, 3) for g, v in costs['v'].items()}
      row[f'c[{dname}]'] = round(costs['c'], 3)
      row[f'macs_ratio[{dname}]'] = round(decoder_macs(dcfg) / row['decoder_macs'], 4)
    if args.train_steps:
      row['train_tokens_per_s'] = round(train_tokens_per_s(cfg, args.train_steps))
    rows.append(row)
    print(json.dumps(row), flush=True)
  out = pathlib.Path(args.output)
  out.parent.mkdir(parents=True, exist_ok=True)
  out.write_text(json.dumps(dict(rows=rows, drafts={n: DRAFTS[n] for n in DRAFTS},
                                 draft_decoder_params={n: decoder_params(c)
                                                       for n, c in drafts.items()}), indent=2))


if __name__ == '__main__':
  main()
