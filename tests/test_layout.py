"""The package's layering (docs/architecture.md), checked on the source's imports.

Every `import` / `from ... import` in every module of `specdec_jax` (function-level
imports included: a lazy import is still a dependency) gives an edge between modules.
The test fails on an import cycle and on an import that goes against the layers: the
decoding core imports only itself (no model family, job, gin, T5X or interop module),
a model family only `models`, and so on up to the jobs. A planted violation must make
each check fail (`test_checks_catch_planted_violations`).
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

PKG = pathlib.Path(__file__).resolve().parent.parent / 'specdec_jax'

# Layer of each top-level part of the package -> the parts it may import.
# Parts not listed may not be imported by anyone below the jobs.
JOBS = ('decode', 'benchmark', 'train', 'distill_data')
ALLOWED = {
    'decoding': {'decoding'},
    'models': {'models'},
    'util': {'util'},
    'checkpoints': {'checkpoints', 'models', 'util'},
    'sharding': {'sharding', 'decoding', 'models'},
    'generate': {'generate', 'decoding', 'models', 'sharding'},
    'text': {'text', 'util'},
    'drafters': {'drafters', 'text', 'util'},  # model-free drafters' tables and files
    'interop': {'interop', 'decoding', 'models', 'generate', 'sharding', 'checkpoints', 'text',
                'util', 'drafters'},
    'configs': set(),
    '__init__': set(),  # specdec_jax/__init__.py imports nothing of its own
}
for _job in JOBS:
  ALLOWED[_job] = set(ALLOWED) | set(JOBS) | {'__init__'}
# Third-party modules a layer must not import (the core is JAX, with flax.struct for its
# loop states as in T5X's decoding.py).
FORBIDDEN_EXTERNAL = {
    'decoding': {'gin', 't5x', 'seqio', 'tensorflow', 'transformers', 'torch', 'optax'},
    'models': {'gin', 't5x', 'seqio', 'tensorflow', 'transformers', 'torch'},
    'generate': {'gin', 't5x', 'seqio'},
    'sharding': {'gin', 't5x', 'seqio'},
}


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
  rel = path.relative_to(root.parent).with_suffix('')
  parts = list(rel.parts)
  if parts[-1] == '__init__':
    parts.pop()
  return '.'.join(parts)


def is_module(name: str, root: pathlib.Path) -> bool:
  rel = pathlib.Path(*name.split('.')[1:])
  base = root / rel
  return base.with_suffix('.py').exists() or (base / '__init__.py').exists()


def imports_of(path: pathlib.Path, root: pathlib.Path):
  """(internal module names, top-level external names) imported anywhere in `path`."""
  tree = ast.parse(path.read_text(), filename=str(path))
  pkg = root.name
  internal, external = set(), set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        (internal if a.name.split('.')[0] == pkg else external).add(
            a.name if a.name.split('.')[0] == pkg else a.name.split('.')[0])
    elif isinstance(node, ast.ImportFrom):
      if node.level:  # relative: resolve against this module's package
        base = module_name(path, root).split('.')
        if path.name != '__init__.py':
          base.pop()
        base = base[:len(base) - node.level + 1]
        mod = '.'.join(base + ([node.module] if node.module else []))
      else:
        mod = node.module or ''
      if mod.split('.')[0] != pkg:
        external.add(mod.split('.')[0])
        continue
      for a in node.names:
        sub = f'{mod}.{a.name}'
        internal.add(sub if is_module(sub, root) else mod)
  return internal, external


def graph(root: pathlib.Path):
  edges, externals = {}, {}
  for path in sorted(root.rglob('*.py')):
    name = module_name(path, root)
    edges[name], externals[name] = imports_of(path, root)
  return edges, externals


def part(name: str) -> str:
  parts = name.split('.')
  return parts[1] if len(parts) > 1 else '__init__'


def cycles(edges) -> list[list[str]]:
  """Strongly connected components with more than one module, or a self-import (Tarjan)."""
  index, low, stack, on, out = {}, {}, [], set(), []
  counter = [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in edges.get(v, ()):
      if w not in edges:
        continue
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1 or v in edges.get(v, ()):
        out.append(sorted(comp))

  sys.setrecursionlimit(10000)
  for v in sorted(edges):
    if v not in index:
      visit(v)
  return out


def layer_violations(edges, externals) -> list[str]:
  bad = []
  for mod, deps in sorted(edges.items()):
    p = part(mod)
    allowed = ALLOWED.get(p)
    if allowed is None:
      bad.append(f'{mod}: its part {p!r} has no layer in ALLOWED (add it to the architecture)')
      continue
    for dep in sorted(deps):
      q = part(dep)
      if q != p and q not in allowed:
        bad.append(f'{mod} imports {dep} ({p} may import only {sorted(allowed)})')
    for ext in sorted(externals[mod] & FORBIDDEN_EXTERNAL.get(p, set())):
      bad.append(f'{mod} imports {ext} (forbidden in {p})')
  return bad


def test_no_import_cycle():
  edges, _ = graph(PKG)
  assert cycles(edges) == []


def test_layers_respected():
  edges, externals = graph(PKG)
  assert layer_violations(edges, externals) == []


def test_checks_catch_planted_violations(tmp_path):
  """A copy of the package with a planted cycle and a core → job import fails both checks."""
  import shutil
  root = tmp_path / 'specdec_jax'
  shutil.copytree(PKG, root, ignore=shutil.ignore_patterns('assets', '__pycache__'))
  with open(root / 'decoding' / 'accept.py', 'a') as f:
    f.write('\ndef _planted():\n  from specdec_jax.decode import job  # noqa\n')
  with open(root / 'decode' / 'pair.py', 'a') as f:
    f.write('\ndef _planted():\n  from specdec_jax.decode import cli  # noqa\n')
  with open(root / 'models' / 't5.py', 'a') as f:
    f.write('\nimport gin  # noqa\n')
  edges, externals = graph(root)
  found = cycles(edges)
  assert any('specdec_jax.decode.pair' in c and 'specdec_jax.decode.cli' in c for c in found)
  bad = layer_violations(edges, externals)
  assert any(b.startswith('specdec_jax.decoding.accept imports specdec_jax.decode.job')
             for b in bad)
  assert 'specdec_jax.models.t5 imports gin (forbidden in models)' in bad


# The documented entry points (README, docs/architecture.md), each importable in a fresh
# interpreter (so an import that only works after another module was imported fails).
ENTRY_POINTS = [
    'from specdec_jax.decoding import temperature_sample, speculative_sample, '
    'SpeculativeStats, DraftPolicy',
    'from specdec_jax import decoding; decoding.speculative_sample; decoding.temperature_sample',
    'from specdec_jax import generate; generate.t5_generate; generate.t5_speculative_generate; '
    'generate.cache_length',
    'from specdec_jax.models import t5, config, cache, layers',
    'from specdec_jax.checkpoints import load_t5x_checkpoint, save_t5x_checkpoint, '
    'save_orbax_checkpoint, read_t5x_arrays',
    'from specdec_jax.interop.t5x import decoding as t5x_decoding; '
    't5x_decoding.speculative_sample; t5x_decoding.temperature_sample',
    'from specdec_jax.interop.t5x.model import SpeculativeEncoderDecoderModel',
    'from specdec_jax.interop.t5x import restore; restore.add_draft_params',
    'import specdec_jax.interop.t5x.gin_registry',
    'from specdec_jax.interop.hf.t5 import import_hf_t5, load_hf_t5, export_hf_t5',
    'from specdec_jax.sharding import ShardingPlan, make_mesh',
    'from specdec_jax.generate import compile_cache; compile_cache.enable',
    'from specdec_jax.decode import main, run, decode',
    'from specdec_jax.benchmark import job; job.main; job.benchmark',
    'from specdec_jax.train import job; job.main; job.train',
    'import specdec_jax.distill_data',
    'from specdec_jax.decoding import drafters; drafters.LookupDrafter; '
    'drafters.NgramTableDrafter; drafters.LookupThenModel; drafters.ModelDrafter',
    'from specdec_jax.generate import resolve_drafter, needs_draft_model',
    'from specdec_jax.models import decoder_only, family; decoder_only.DecoderOnlyTransformer; '
    'decoder_only.prefill_cache; family.build',
    'from specdec_jax import generate; generate.decoder_only_generate; '
    'generate.decoder_only_speculative_generate',
    'from specdec_jax.interop.t5x.decoder_only_model import SpeculativeDecoderOnlyModel',
    'from specdec_jax.drafters import tables; tables.estimate; tables.load; tables.main',
    'from specdec_jax.text import gleu; gleu.corpus_gleu; gleu.read_jfleg; gleu.main',
    'from specdec_jax.train import gec_data; gec_data.build; gec_data.main',
    'from specdec_jax.train import jfleg_split; jfleg_split.build; jfleg_split.main',
]


@pytest.mark.parametrize('code', ENTRY_POINTS)
def test_documented_entry_points_import(code):
  r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]


def test_every_module_imports():
  """Every module of the package imports, all in one fresh interpreter (gin registrations
  included: in this process gin's config may already be locked by other tests)."""
  names = [module_name(p, PKG) for p in sorted(PKG.rglob('*.py'))
           if not p.name == '__main__.py']
  code = 'import importlib\nfor n in %r:\n  importlib.import_module(n)\n' % (names,)
  r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]


def test_every_module_imports_after_a_job_locked_gin():
  """A job locks gin's config (`gin.finalize`, as T5X's CLIs); importing any module with
  gin registrations afterwards in the same process (a notebook, a test session) still
  works (`util.gin_config`), and leaves the lock as it was. Planted check: the same
  import with a plain `gin.configurable` raises gin's "locked" error."""
  names = [module_name(p, PKG) for p in sorted(PKG.rglob('*.py'))
           if not p.name == '__main__.py']
  # T5X registers its own configurables at import and is not lock-tolerant; in a real
  # session it is imported by the first job, before any lock, so it is imported first here.
  code = ('import gin, importlib\ntry:\n  import t5x.models\nexcept ImportError:\n  pass\n'
          'gin.finalize()\nfor n in %r:\n  importlib.import_module(n)\n'
          'assert gin.config_is_locked()\n'
          'def planted_after_lock(x=1):\n  return x\n'
          'try:\n  gin.configurable(planted_after_lock)\n'
          'except RuntimeError as e:\n  assert "locked" in str(e), e\n'
          'else:\n  raise AssertionError("gin accepted a registration while locked")\n' % (names,))
  r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]


def test_every_gin_file_parses_and_binds_registered_names():
  """Every gin file under configs/ and specdec_jax/configs/ parses with the jobs' modules
  imported: each binding names a registered configurable (gin raises on an unknown one).
  T5X's own files (they import t5x), and files including them, are parsed only when t5x
  is installed."""
  repo = PKG.parent
  files = sorted(str(p.relative_to(repo)) for root in (repo / 'configs', PKG / 'configs')
                 for p in root.rglob('*.gin'))
  code = '''
import importlib.util, json, sys
import gin
import specdec_jax.decode, specdec_jax.train.job, specdec_jax.train.distill_data
import specdec_jax.benchmark.job
import specdec_jax.interop.t5x.gin_registry
import re
has_t5x = importlib.util.find_spec('t5x') is not None

def needs_t5x(f, seen=()):
  # T5X's own files, and files that include one (transitively).
  text = open(f).read()
  if 'from t5x' in text or 't5x/adafactor' in text or 'restore_draft' in text:
    return True
  return any(needs_t5x(inc, seen + (f,)) for inc in re.findall(r"^include '([^']+)'", text, re.M)
             if inc not in seen and inc.startswith(('configs/', 'specdec_jax/')))

bad, parsed = {}, 0
for f in json.loads(sys.argv[1]):
  if not has_t5x and needs_t5x(f):
    continue
  gin.clear_config()
  try:
    gin.parse_config_file(f)
    parsed += 1
  except Exception as e:  # noqa
    bad[f] = f'{type(e).__name__}: {e}'
print(json.dumps({'bad': bad, 'parsed': parsed}))
'''
  import json
  r = subprocess.run([sys.executable, '-c', code, json.dumps(files)], capture_output=True,
                     text=True, timeout=600, cwd=repo)
  assert r.returncode == 0, r.stderr[-3000:]
  out = json.loads(r.stdout.strip().splitlines()[-1])
  assert out['bad'] == {}, out['bad']
  assert out['parsed'] >= 30, out  # configs/train, runs, pairs and the model sizes
