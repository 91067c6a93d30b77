#!/usr/bin/env bash
# The GPU (or TPU) rows of BENCHMARKS.md in one call on a lent accelerator, in ≤ 8 minutes:
# every phase's cost (c, v(γ), encoders, loop work) and baseline vs speculative decoding of
# the demo pair on Multi30K test_2016 (20 sentences, γ 1–5, T 0 and 1, batch 1 and 8,
# 3 repeats), with the adaptive draft-length policies at batch 1 and 8.
#
# Prepare on this machine (once; .gpu/ is ignored by git, never committed):
#   echo /.gpu/ >> .git/info/exclude
#   mkdir -p .gpu/data/ende/multi30k .gpu/whl
#   cp ../shared/data/ende/multi30k/test_2016_flickr.en.gz .gpu/data/ende/multi30k/
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux2014_x86_64 -d .gpu/whl gin-config
# then, with the device tool:  run(command="bash scripts/gpu_benchmark.sh", carry=[".gpu"])
# The accelerator image has JAX (CUDA), flax, optax, orbax, tensorstore, sentencepiece,
# sacrebleu and matplotlib but not gin-config (carried as a wheel) or seqio (the jobs then
# tokenize with sentencepiece alone, `vocabulary.SentencePieceVocab`, the same ids).
# Results: $OUT/benchmark/{results.json,results.md,*.png} and $OUT/log.txt (or out/gpu/).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-out/gpu}"
mkdir -p "$OUT"
if compgen -G ".gpu/whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .gpu/whl/*.whl
  export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
export SPECDEC_DATA="${SPECDEC_DATA:-$PWD/.gpu/data}"
python3 -c 'import jax; print("devices:", jax.devices())' 2>&1 | tee "$OUT/log.txt"
python3 -m specdec_jax.benchmark --gin_file=configs/runs/benchmark.gin \
    --gin.benchmark.output_dir="'$OUT/benchmark'" \
    --gin.benchmark.datasets="(('multi30k_test2016', 'ende/multi30k/test_2016_flickr.en.gz'),)" \
    --gin.benchmark.num_sentences=20 --gin.benchmark.gammas="(1, 2, 3, 4, 5)" \
    --gin.benchmark.batch_sizes="(1, 8)" --gin.benchmark.temperatures="(0.0, 1.0)" \
    --gin.benchmark.repeats=3 --gin.benchmark.hf_peer=False \
    --gin.benchmark.policies="('heuristic', 'confidence', 'optimal')" \
    2>&1 | tee -a "$OUT/log.txt"
