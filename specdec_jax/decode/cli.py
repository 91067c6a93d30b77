"""`python -m specdec_jax.decode`: flags, gin, and the shared error path (`flags.run_cli`)."""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from specdec_jax.util import flags
from specdec_jax.decode import job
from specdec_jax.decode import outputs
from specdec_jax.decode import t5x_gin
from specdec_jax.decode.pair import DemoPairMissing

PROG = 'specdec_jax.decode'
EXIT_CONFIG_ERROR = flags.EXIT_CONFIG_ERROR  # 2
EXIT_DEMO_PAIR_MISSING = 3
EXIT_INTERRUPTED = flags.EXIT_INTERRUPTED  # 130

EXAMPLES = (
    'python -m specdec_jax.decode --gin_file=configs/runs/decode.gin',
    'python -m specdec_jax.decode --gin_file=configs/runs/decode.gin '
    "--gin.decode.input_path=\"'my.txt'\" --gin.decode.gamma=5",
    'python -m specdec_jax.decode --gin_file=configs/runs/decode.gin '
    "--gin.decode.task_name=\"'specdec_ende_multi30k'\" --gin.decode.max_examples=100",
    'python -m specdec_jax.decode --gin_file=specdec_jax/configs/t5x/speculative_model.gin '
    "--gin.CHECKPOINT_PATH=\"'/ckpt/target/checkpoint_1000'\" "
    "--gin.DRAFT_CHECKPOINT=\"'/ckpt/draft/checkpoint_1000'\" --gin.GAMMA=5   "
    '# a T5X model gin',
)


def parse_flags(argv: Sequence[str]) -> tuple[list[str], list[str], list[str], bool]:
  """(gin files, bindings, search paths, debug) from T5X-style flags (`specdec_jax.util.flags`)."""
  f = _flags(argv)
  return f.gin_files, f.bindings, f.search_paths, f.debug


def _flags(argv: Sequence[str]) -> flags.GinFlags:
  return flags.parse_gin_flags(
      argv, 'python -m specdec_jax.decode',
      'Speculative (or baseline) decoding of a T5 pair to JSONL, gin-configured: a pair '
      'folder / decode.* bindings (configs/runs/decode.gin) or a T5X model gin '
      '(MODEL, CHECKPOINT_PATH, DRAFT_CHECKPOINT, GAMMA, TEMPERATURE; '
      'specdec_jax/configs/t5x/speculative_model.gin).',
      '--gin.decode.gamma=5', examples=EXAMPLES,
      exit_status='3 the default demo pair is not shipped', compilation_cache_flags=True,
      parameters=flags.parameters_help(job.decode.__wrapped__, 'decode',
                                       denylist=('prepare_only', 'check_bindings')))


def parse_gin(files: Sequence[str], bindings: Sequence[str],
              search_paths: Sequence[str] = ()) -> None:
  """Clears gin, registers our configurables and parses files then bindings.

  Without `t5x` installed, the T5X-only names a T5X model gin may bind
  (`t5x_gin.T5X_ONLY`: T5X's optimizer and restore config) are skipped and an
  `OPTIMIZER` that refers to them is set to None (decoding does not use it), so the
  T5X model gin that serves `t5x.infer` also parses here.
  """
  import gin  # pylint: disable=g-import-not-at-top
  job.register_configurables()
  skip = () if t5x_gin.t5x_available() else t5x_gin.T5X_ONLY
  flags.parse_gin(files, bindings, search_paths, skip_unknown=skip, finalize=False)
  t5x_gin.drop_unavailable_optimizer()
  gin.finalize()


def run(argv: Sequence[str]) -> dict:
  """Parses flags and gin, then runs `decode()`; raises on any error (no sys.exit).

  Like `main`, a gin binding the job does not use is a ValueError.
  """
  f = _flags(argv)
  parse_gin(f.gin_files, f.bindings, f.search_paths)
  return outputs.run_decode(_configure(f.compilation_cache))


def _configure(compilation_cache: Optional[str] = None):
  """Starts `jax.distributed` when the environment asks (before any JAX backend is
  used), validates and loads the job (`job.decode(prepare_only=True)`), then turns JAX's
  persistent compilation cache on (`compile_cache.enable`; nothing is compiled before)."""
  from specdec_jax.generate import compile_cache  # pylint: disable=g-import-not-at-top
  from specdec_jax.sharding import distributed  # pylint: disable=g-import-not-at-top
  distributed.initialize_from_env()
  prepared = job.decode(prepare_only=True, check_bindings=True)  # config errors come first
  compile_cache.enable(compilation_cache, warn=flags.print_warning)
  return prepared


def main(argv: Optional[Sequence[str]] = None) -> int:
  """Command-line entry point; returns the exit status.

  0 success; 2 a configuration / input error (one message on stderr, before any
  compilation, nothing written); 3 the default demo pair is not in
  `specdec_jax/assets/`; 130 interrupted (Ctrl-C; no output written).
  """
  f = _flags(sys.argv[1:] if argv is None else argv)
  return flags.run_cli(
      f, PROG,
      parse=lambda: parse_gin(f.gin_files, f.bindings, f.search_paths),
      configure=lambda: _configure(f.compilation_cache),
      run=outputs.run_decode,
      exit_codes={DemoPairMissing: EXIT_DEMO_PAIR_MISSING},
      interrupted='no output written')
