#!/bin/bash
# Benchmarks the T5 demo pair and the decoder-only demo pair with the same settings
# (configs/runs/benchmark_families.gin), one after the other, nothing else running.
#   scripts/benchmark_families.sh [out_dir]       (default out/families)
set -euo pipefail
out=${1:-out/families}
lscpu | grep -E 'Model name|L2 cache|L3 cache' > /dev/null && lscpu | grep -E 'Model name|L2|L3'
for pair in demo_ende demo_ende_decoder_only; do
  python -m specdec_jax.benchmark --gin_file=configs/runs/benchmark_families.gin \
    --gin.benchmark.pair_dir="'$pair'" --gin.benchmark.output_dir="'$out/$pair'"
done
