"""Sharded decoding: the mesh suite (tests/sharded, in a child process with 8 simulated
CPU devices) and a two-process `jax.distributed` run of the decode job on localhost.

JAX fixes its device count when it starts, so these run in child processes: the
suite here keeps its one device.
"""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import re
import socket
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
MULTI30K = REPO.parent / 'shared' / 'data' / 'ende' / 'multi30k' / 'test_2016_flickr.en.gz'


def _env(**extra):
  env = dict(os.environ)
  env.pop('XLA_FLAGS', None)
  env.update(extra)
  return env


@pytest.mark.slow
def test_mesh_suite_on_eight_simulated_devices():
  proc = subprocess.run(
      [sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider', 'tests/sharded'],
      cwd=REPO, capture_output=True, text=True, timeout=1200,
      env=_env(SPECDEC_SHARDED_TESTS='1',
               XLA_FLAGS='--xla_force_host_platform_device_count=8'))
  print(proc.stdout[-6000:], proc.stderr[-3000:])
  assert proc.returncode == 0, proc.stdout[-6000:]
  assert ' passed' in proc.stdout and 'skipped' not in proc.stdout


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def _decode_cmd(tmp_path, name, *extra):
  return [sys.executable, '-m', 'specdec_jax.decode', '--gin_file=configs/runs/decode.gin',
          f"--gin.decode.input_path='{tmp_path / 'in.txt'}'",
          f"--gin.decode.output_path='{tmp_path / name}'", '--gin.decode.batch_size=5',
          '--gin.decode.max_decode_len=24', '--gin.decode.print_predictions=0',
          '--gin.decode.warmup=False', '--gin.decode.temperature=1.0', *extra]


@pytest.mark.slow
def test_two_processes_write_the_one_process_output(tmp_path):
  """2 processes × 4 simulated CPU devices (gloo collectives), mesh (2, 4), 7 inputs
  (batches of 5 padded to 6 for the data axis), sampling at temperature 1: the output
  file equals the one-process single-device run's byte for byte, and only process 0
  writes."""
  with gzip.open(MULTI30K, 'rt', encoding='utf-8') as f:
    (tmp_path / 'in.txt').write_text(''.join(next(f) for _ in range(7)), encoding='utf-8')
  one = subprocess.run(_decode_cmd(tmp_path, 'one.jsonl'), cwd=REPO, capture_output=True,
                       text=True, timeout=600, env=_env())
  assert one.returncode == 0, one.stderr[-3000:]

  port = _free_port()
  procs = [subprocess.Popen(
      _decode_cmd(tmp_path, 'multi.jsonl', '--gin.decode.mesh_shape=(2, 4)'), cwd=REPO,
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      env=_env(JAX_NUM_CPU_DEVICES='4', JAX_COORDINATOR_ADDRESS=f'localhost:{port}',
               JAX_NUM_PROCESSES='2', JAX_PROCESS_ID=str(i))) for i in range(2)]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  assert (tmp_path / 'multi.jsonl').read_bytes() == (tmp_path / 'one.jsonl').read_bytes()
  summary = json.loads((tmp_path / 'multi.jsonl.summary.json').read_text())
  assert summary['sharding']['mesh_shape'] == {'data': 2, 'model': 4}
  assert summary['sharding']['processes'] == 2 and summary['sharding']['devices'] == 8
  assert 'summary' in outs[0][0] and 'summary' not in outs[1][0]  # only process 0 reports
  assert sorted(q.name for q in tmp_path.iterdir()) == [
      'in.txt', 'multi.jsonl', 'multi.jsonl.summary.json', 'one.jsonl', 'one.jsonl.summary.json']


def test_distributed_env_errors(monkeypatch):
  from specdec_jax.sharding import distributed
  monkeypatch.setenv('JAX_COORDINATOR_ADDRESS', 'localhost:1')
  monkeypatch.delenv('JAX_NUM_PROCESSES', raising=False)
  with pytest.raises(ValueError, match='JAX_NUM_PROCESSES'):
    distributed.initialize_from_env()
  monkeypatch.setenv('JAX_NUM_PROCESSES', '2')
  monkeypatch.setenv('JAX_PROCESS_ID', 'x')
  with pytest.raises(ValueError, match='JAX_PROCESS_ID'):
    distributed.initialize_from_env()
  monkeypatch.setenv('JAX_PROCESS_ID', '2')
  with pytest.raises(ValueError, match=r'JAX_PROCESS_ID=2 must be in \[0'):
    distributed.initialize_from_env()


@pytest.mark.parametrize('bindings,message', [
    (['--gin.decode.mesh_shape=(2, 4)'], r'decode\.mesh_shape=\(2, 4\) needs 8 devices but 1'),
    (["--gin.decode.draft_sharding='like_target'"],
     'decode.draft_sharding is set but decode.mesh_shape is None'),
    (['--gin.decode.mesh_shape=(1, 1)', "--gin.decode.draft_sharding='sharded'"],
     'decode.draft_sharding must be one of'),
    (['--gin.decode.logical_axis_rules=@specdec_jax.standard_logical_axis_rules()',
      "--gin.specdec_jax.standard_logical_axis_rules.additional_rules=(('mlp', 'tensor'),)"],
     'standard_logical_axis_rules.additional_rules: each rule must be'),
])
def test_decode_job_sharding_errors_before_loading(tmp_path, capsys, bindings, message):
  """Each bad sharding setting exits 2 with one line naming it; nothing is written."""
  from specdec_jax.decode import cli
  code = cli.main(['--gin_file=configs/runs/decode.gin', *bindings,
                   f"--gin.decode.output_path='{tmp_path / 'o.jsonl'}'"])
  err = capsys.readouterr().err
  assert code == 2 and not list(tmp_path.iterdir())
  assert re.search(message, err), err
