r"""Reads the shipped demo checkpoints with T5X's own `t5x.checkpoints.load_t5x_checkpoint`.

    python scripts/check_t5x_loader.py --t5x_src=/path/to/t5x-checkout [--pair_dir=...]
        [--output=out/check_t5x_loader.json]                 (repo root; about 20 s)

`t5x` is not installable from the package registry, so this imports its `checkpoints`
module from a source checkout of google-research/t5x (`--t5x_src`, the folder holding
the `t5x/` package; 2026-12-06: commit cc342d4). Only that module and what it imports
are loaded: `t5x/__init__.py`, which imports the whole framework (trainer, seqio tasks,
...), is skipped. Three packages that `t5x.checkpoints` and `t5x.optimizers` import but
the loader never calls (tensorboard's event-file watcher, jestimator's Amos optimizer,
cached_property) are replaced by empty modules when they are not installed; nothing of
the loading path is replaced. Each model of the pair is loaded by T5X and by
`specdec_jax.checkpoints.load_t5x_checkpoint`, and the two are compared array by array
(names, shapes, dtypes, values); a pair without a draft (the correction pair) checks its
target alone. Prints the comparison, writes it as JSON (atomically),
exits 1 on any difference and 2 when `--t5x_src` holds no `t5x/checkpoints.py`.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import pathlib
import sys
import types

import numpy as np
from flax import traverse_util

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from specdec_jax import checkpoints  # noqa: E402
from specdec_jax.util import atomic
from specdec_jax.util import paths
from specdec_jax.train.run_files import config_from_dict  # noqa: E402

UNUSED_BY_THE_LOADER = {
    'tensorboard': ('tensorboard.backend', 'tensorboard.backend.event_processing',
                    'tensorboard.backend.event_processing.directory_watcher',
                    'tensorboard.backend.event_processing.event_file_loader',
                    'tensorboard.backend.event_processing.io_wrapper'),
    'jestimator': ('jestimator.amos', 'jestimator.amos_helper'),
    'cached_property': (),
}


def _empty_module(name: str) -> types.ModuleType:
  module = types.ModuleType(name)
  module.__getattr__ = lambda attr: (lambda *a, **k: None)  # any attribute: a no-op
  sys.modules[name] = module
  parent, _, child = name.rpartition('.')
  if parent:
    setattr(sys.modules[parent], child, module)
  return module


def import_t5x_checkpoints(t5x_src: pathlib.Path):
  """`t5x.checkpoints` from a source checkout, without running `t5x/__init__.py`."""
  stubbed = []
  for top, subs in UNUSED_BY_THE_LOADER.items():
    try:
      importlib.import_module(top)
    except ImportError:
      _empty_module(top)
      for sub in subs:
        _empty_module(sub)
      stubbed.append(top)
  if 'cached_property' in stubbed:
    sys.modules['cached_property'].cached_property = functools.cached_property
  package = types.ModuleType('t5x')
  package.__path__ = [str(t5x_src / 't5x')]
  sys.modules['t5x'] = package
  return importlib.import_module('t5x.checkpoints'), stubbed


def _flat(tree) -> dict:
  return {k: np.asarray(v) for k, v in traverse_util.flatten_dict(tree, sep='/').items()}


def main(argv=None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  ap.add_argument('--t5x_src', required=True,
                  help='folder holding the t5x/ package of a google-research/t5x checkout')
  ap.add_argument('--pair_dir', default=str(paths.ASSETS_DIR / 'demo_ende'))
  ap.add_argument('--output', default='out/check_t5x_loader.json')
  a = ap.parse_args(argv)
  t5x_src = pathlib.Path(a.t5x_src)
  if not (t5x_src / 't5x' / 'checkpoints.py').is_file():
    print(f'--t5x_src={a.t5x_src!r} has no t5x/checkpoints.py: pass the root of a '
          'google-research/t5x checkout.', file=sys.stderr)
    return 2
  t5x_checkpoints, stubbed = import_t5x_checkpoints(t5x_src)
  pair_dir = pathlib.Path(a.pair_dir)
  pair = json.loads((pair_dir / 'pair.json').read_text())
  res = dict(t5x_src=str(t5x_src), stubbed_unused_imports=stubbed, models={})
  ok = True
  # A target-only pair (the correction pair: no draft model) has no draft_config.
  for role in [r for r in ('target', 'draft') if f'{r}_config' in pair]:
    state = t5x_checkpoints.load_t5x_checkpoint(str(pair_dir / role))
    theirs = _flat(state['target'])
    ours = _flat(checkpoints.load_t5x_checkpoint(pair_dir / role,
                                                 config_from_dict(pair[f'{role}_config'])))
    same_names = set(theirs) == set(ours)
    mismatched = sorted(k for k in set(theirs) & set(ours)
                        if theirs[k].dtype != ours[k].dtype or theirs[k].shape != ours[k].shape
                        or not np.array_equal(theirs[k], ours[k]))
    res['models'][role] = dict(
        state_keys=sorted(state), state_state_keys=sorted(state.get('state', {})),
        arrays=len(theirs), params=int(sum(v.size for v in theirs.values())),
        dtypes=sorted({str(v.dtype) for v in theirs.values()}),
        only_in_t5x=sorted(set(theirs) - set(ours)), only_in_ours=sorted(set(ours) - set(theirs)),
        mismatched=mismatched, identical=same_names and not mismatched)
    ok &= res['models'][role]['identical']
    print(f'{role}: T5X read {len(theirs)} arrays ({res["models"][role]["params"]:,} params, '
          f'{", ".join(res["models"][role]["dtypes"])}), state keys {sorted(state)}; '
          f'identical to ours: {res["models"][role]["identical"]}')
  res['identical'] = ok
  atomic.write_text(a.output, json.dumps(res, indent=1))
  print(f'wrote {a.output}')
  return 0 if ok else 1


if __name__ == '__main__':
  sys.exit(main())
