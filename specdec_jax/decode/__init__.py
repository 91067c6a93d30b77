r"""The gin-configured decode job: speculative (or baseline) decoding of a T5 pair to JSONL.

  python -m specdec_jax.decode --gin_file=configs/runs/decode.gin \
      [--gin_file=configs/pairs/t5_1_1_small_to_xxl.gin] [--gin.decode.gamma=5] \
      [--gin.decode.input_path="'my_inputs.txt'"] [--gin.decode.output_path="'out/x.jsonl'"]

  python -m specdec_jax.decode --gin_file=specdec_jax/configs/t5x/speculative_model.gin \
      --gin.CHECKPOINT_PATH="'/ckpt/target/checkpoint_<step>'" [--gin.GAMMA=5]

Flags: `--gin_file=F` (repeatable; resolved against the working directory, then the
repository root), `--gin.KEY=VALUE` / `--gin_bindings='KEY = VALUE'` (repeatable,
applied after the files, T5X style), `--gin_search_paths=DIR` (repeatable),
`--debug` (show Python tracebacks for configuration errors too); `--help` lists
examples and every `decode.*` parameter.

What it does, in order (everything that can be checked is checked before any
model is loaded or compiled):

1. parses the gin files and bindings — an unknown configurable or parameter is
   reported as gin words it (file / line included) and the job exits with status 2;
2. resolves the model pair (`decode.pair_dir` with `pair.json`, `target/`, `draft/`,
   `vocab/`, or explicit `decode.target_config` / `target_checkpoint` / ... bindings,
   which win; or a T5X model gin — `MODEL`, `CHECKPOINT_PATH`, `DRAFT_CHECKPOINT`,
   `GAMMA`, `TEMPERATURE`, see `specdec_jax.decode.t5x_gin`), checks that every gin
   binding is used by the job (one that is not is an error, never silently
   ignored), checks the vocabulary and checkpoint paths exist, validates the
   decoding arguments;
3. reads and tokenizes the inputs (`specdec_jax.text.inputs`: text / TSV / JSONL file,
   seqio task, or the built-in examples) — a missing file, an empty line, ... is an
   error naming the file (and line);
4. loads both checkpoints, checking every param's shape against the T5Config
   before reading data (a mismatch names the param and both shapes);
5. decodes in fixed-shape batches (`batch_size × max_input_len`; the last batch is
   padded with copies of a real row, so one program is compiled), timing a warm-up
   call on the first batch separately (`compile_s`) from the run itself (`run_s`);
6. writes `output_path` (JSONL, one line per input in input order: `inputs`,
   `prediction`, `targets` when known, `target_calls`, `drafted`, `accepted`,
   `tokens`, and `truncated: true` on truncated inputs) and
   `<output_path>.summary.json`, each through a temporary file in the same folder
   renamed into place at the end — an error leaves no partial output; prints the
   summary (examples/s, tokens/s, α = Σ alpha_sum / Σ alpha_count, acceptance rate,
   tokens per target call, compile time, BLEU when every input has a reference).

Exit status: 0 on success, 2 for a configuration / input error (clean one-paragraph
message on stderr), 3 when the default demo pair is not in `specdec_jax/assets/`,
130 when interrupted (Ctrl-C: one line, no output written).

Modules: `pair` (pair folder / bindings → `PairSpec`, vocabulary, checkpoint
checks), `t5x_gin` (a T5X model gin as the description; unused-binding check),
`job` (the `decode` gin configurable, settings, preparation), `outputs` (decoding,
atomic JSONL + summary), `cli` (flags, `main`). The names below are re-exported here.

Randomness: with `method='speculative'` row i uses the key
`fold_in(PRNGKey(seed), i)` (i = the example's index in the input), so a sample does
not depend on batch size or on the other inputs. The baseline follows T5X's
`temperature_sample`, which takes one key per batch: `fold_in(PRNGKey(seed),
batch_index)`. At temperature 0 both are greedy and need no randomness; speculative
decoding then reproduces the baseline token for token.

Per-example statistics: `tokens` counts emitted tokens (EOS included);
`target_calls` counts target forward calls while the row was active (the baseline
makes one per token); `drafted` / `accepted` count draft tokens proposed / accepted
(0 for the baseline).
"""

from specdec_jax.decode.pair import (DEMO_PAIR, DemoPairMissing, PairSpec,  # noqa: F401
                                     _as_config, _check_checkpoint, _config_from_dict,
                                     _dtype, _is_url, _pair_json_config, check_checkpoint,
                                     load_vocabulary, resolve_pair, resolve_path)
from specdec_jax.decode import t5x_gin  # noqa: F401
from specdec_jax.decode.job import (METHODS, TRANSLATE_PREFIX, Prepared,  # noqa: F401
                                    _validate_settings, check_output_path, decode, prepare,
                                    register_configurables)
from specdec_jax.decode.outputs import (_decode_batch,  # noqa: F401
                                        print_summary, run_decode, summary_path_for)
from specdec_jax.decode.cli import (EXIT_CONFIG_ERROR, EXIT_DEMO_PAIR_MISSING,  # noqa: F401
                                    EXIT_INTERRUPTED, main, parse_flags, parse_gin, run)
