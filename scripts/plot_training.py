r"""Training curves of the demo pair for its model card: loss and dev BLEU per step.

    python scripts/plot_training.py --target_run=runs/target_ende_v3 --draft_run=runs/draft_ende_v3_qls \
        --output=specdec_jax/assets/demo_ende/training_curves.png

Reads each run's `train_log.jsonl` (written by `specdec_jax.train.job`): the training loss
(every `log_every_steps`, one batch each, so it is noisy) and the greedy dev BLEU on the
first 500 Multi30K validation sentences (every `eval_every_steps`); for the draft also
its greedy agreement with the target along the target's dev outputs (α at T = 0) and
Σ min(p, q) (α at T = 1). Writes one PNG (atomically). An empty `--target_run=` plots the
draft alone (the v3.1 draft's fine-tuning run:
`--target_run= --draft_run=runs/draft_ende_v31 --output=.../training_curves_draft_v31.png`).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax.util import atomic  # noqa: E402


def read_log(run_dir):
  train, dev = [], []
  for line in pathlib.Path(run_dir, 'train_log.jsonl').read_text().splitlines():
    r = json.loads(line)
    (dev if 'dev_bleu' in r else train).append(r)
  return train, dev


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--target_run', default='runs/target_ende_v3')
  p.add_argument('--draft_run', default='runs/draft_ende_v3_qls')
  p.add_argument('--output', default='specdec_jax/assets/demo_ende/training_curves.png')
  args = p.parse_args(argv)
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  runs = [(role, run) for role, run in (('target', args.target_run), ('draft', args.draft_run))
          if run]
  if not runs:
    p.error('--target_run and --draft_run are both empty: nothing to plot.')
  fig, axes = plt.subplots(1, len(runs), figsize=(5.5 * len(runs) + 1.5 * (len(runs) == 1), 4),
                           squeeze=False)
  for ax, (role, run) in zip(axes[0], runs):
    train, dev = read_log(run)
    ax.plot([r['step'] for r in train], [r['loss'] for r in train], color='tab:blue', lw=0.8,
            label='training loss (one batch)')
    ax.set_xlabel('step')
    ax.set_ylabel('loss', color='tab:blue')
    ax2 = ax.twinx()
    ax2.plot([r['step'] for r in dev], [r['dev_bleu'] for r in dev], 'o-', color='tab:red',
             label='dev BLEU (greedy, 500 val sentences)')
    ax2.set_ylabel('dev BLEU', color='tab:red')
    if dev and 'dev_greedy_agreement' in dev[0]:
      ax3 = ax.twinx()
      ax3.spines['right'].set_position(('axes', 1.15))
      ax3.plot([r['step'] for r in dev], [r['dev_greedy_agreement'] for r in dev], 's--',
               color='tab:green', label='agreement with the target (α, T=0)')
      ax3.plot([r['step'] for r in dev], [r['dev_beta_t1'] for r in dev], '^--',
               color='tab:olive', label='Σ min(p, q) (α, T=1)')
      ax3.set_ylabel('α', color='tab:green')
      ax3.set_ylim(0, 1)
      ax3.legend(loc='center right', fontsize=7)
    ax.set_title(f'{role} ({run})')
    ax.legend(loc='upper right', fontsize=7)
    ax2.legend(loc='lower right', fontsize=7)
  fig.tight_layout()
  out = pathlib.Path(args.output)
  atomic.write_with(out, lambda tmp: fig.savefig(tmp, dpi=90))
  print(out)


if __name__ == '__main__':
  main()
