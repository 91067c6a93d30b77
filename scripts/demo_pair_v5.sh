#!/usr/bin/env bash
# The demo pair v5 recipe after its target has trained, as one resumable chain (issue #11):
#
#   python -m specdec_jax.train --gin_file=configs/train/target_ende_v5.gin   # first, alone
#   bash scripts/demo_pair_v5.sh                                              # then this, alone
#
# 1. evaluates target v5 (float32 params) on all 1,000 Multi30K test_2016 sentences and stops
#    unless its BLEU is >= 30 and at most 10 outputs (1 %) reach the max decode length;
# 2. exports it in bfloat16 into out/pair_v5 (a copy of the shipped folder; the shipped assets
#    are not touched) and evaluates that export the same way;
# 3. writes the distillation data from the export: greedy outputs for the 29,000 training
#    sources, then samples at temperature 1 with seeds 1, 2, 3;
# 4. fine-tunes the shipped v3.2 draft on them (configs/train/draft_ende_v5.gin), exports it
#    into out/pair_v5, and measures alpha with the decode job at T = 0 and T = 1 (gamma = 4,
#    all 1,000 sentences).
# Each stage whose output exists is skipped, so rerunning after an interruption continues (the
# draft's training resumes from its newest train state). Shipping is a separate step, done by
# hand once the numbers are read: python scripts/export_demo.py --target_run=runs/target_ende_v5
# --draft_run=runs/draft_ende_v5 (into specdec_jax/assets/demo_ende).
set -euo pipefail
cd "$(dirname "$0")/.."
PAIR=out/pair_v5
EVAL=out/eval
mkdir -p "$EVAL" runs/distill_v5

if [[ ! -f runs/target_ende_v5/summary.json ]]; then
  echo "runs/target_ende_v5 has not finished: run the target_ende_v5.gin training first." >&2
  exit 2
fi

gate() {  # gate FILE: BLEU >= 30 and <= 10 of the 1,000 outputs at the length limit
  python - "$1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
ok = r['sentences'] == 1000 and r['bleu'] >= 30 and r['outputs_reaching_max_decode_len'] <= 10
print(f"{sys.argv[1]}: BLEU {r['bleu']}, {r['outputs_reaching_max_decode_len']} at the length "
      f"limit of {r['sentences']}: {'passes' if ok else 'FAILS'} the gate (BLEU >= 30, <= 10)")
sys.exit(0 if ok else 1)
EOF
}

[[ -f $EVAL/test2016_v5_f32.json ]] || python scripts/eval_bleu.py --run_dir=runs/target_ende_v5 \
    --num=1000 --output=$EVAL/test2016_v5_f32.json
gate $EVAL/test2016_v5_f32.json

if [[ ! -f $PAIR/.target_v5_exported ]]; then  # the marker is written after the export
  rm -rf "$PAIR" && cp -r specdec_jax/assets/demo_ende "$PAIR"
  python scripts/export_demo.py --target_run=runs/target_ende_v5 --draft_run= --out=$PAIR
  touch $PAIR/.target_v5_exported
fi
[[ -f $EVAL/test2016_v5_bf16.json ]] || python scripts/eval_bleu.py --run_dir=$PAIR/target \
    --num=1000 --output=$EVAL/test2016_v5_bf16.json
gate $EVAL/test2016_v5_bf16.json

[[ -f runs/distill_v5/greedy_train.ids ]] || python -m specdec_jax.distill_data \
    --gin_file=configs/train/distill_data_v5.gin
for s in 1 2 3; do
  [[ -f runs/distill_v5/sampled_train_s$s.ids ]] || python -m specdec_jax.distill_data \
      --gin_file=configs/train/distill_data_sampled_v5.gin --gin.distill_data.seed=$s \
      --gin.distill_data.output_path="'runs/distill_v5/sampled_train_s$s.ids'"
done

[[ -f runs/draft_ende_v5/summary.json ]] || python -m specdec_jax.train \
    --gin_file=configs/train/draft_ende_v5.gin
python scripts/export_demo.py --target_run= --draft_run=runs/draft_ende_v5 --out=$PAIR

[[ -f $EVAL/test2016_v5_pair.json ]] || python scripts/eval_bleu.py --run_dir=$PAIR/target \
    --draft_run_dir=$PAIR/draft --num=1000 --output=$EVAL/test2016_v5_pair.json
for t in 0.0 1.0; do
  [[ -f $EVAL/decode_v5_t$t.jsonl.summary.json ]] || python -m specdec_jax.decode \
      --gin_file=configs/runs/decode.gin --gin.decode.task_name="'specdec_ende_multi30k'" \
      --gin.decode.pair_dir="'$PAIR'" --gin.decode.temperature=$t --gin.decode.gamma=4 \
      --gin.decode.output_path="'$EVAL/decode_v5_t$t.jsonl'"
done
python - <<'EOF'
import json
for t in ('0.0', '1.0'):
  s = json.load(open(f'out/eval/decode_v5_t{t}.jsonl.summary.json'))
  print(f'T = {t}:', {k: v for k, v in s.items() if 'accept' in k or 'alpha' in k or k == 'bleu'})
EOF
