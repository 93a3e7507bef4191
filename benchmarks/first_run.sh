#!/usr/bin/env bash
# First real run (issue 3, item 5): SwinIR-light x4 at ratio 0.95 with iss-p, iht, l1 and scratch at one equal
# CPU budget: same seed (so the same initial weights and the same patch batches), same iterations, same
# schedule. The four runs go in parallel (one torch thread each, nice 10), so they share the CPU equally.
#
#   bash benchmarks/first_run.sh train   # train the four (resumable: rerun to continue after a kill)
#   bash benchmarks/first_run.sh eval    # Set5/Set14/B100/Urban100 with `python -m iss eval` (rerun: skips done)
#   bash benchmarks/first_run.sh zoo     # copy to checkpoints/ and write checkpoints/zoo.json
#
# ISS_DATA_DIR (default ../shared/data) must hold train/T91, train/BSD200, div2k/DIV2K_train_HR, benchmarks/.
set -euo pipefail
cd "$(dirname "$0")/.."

DATA=${ISS_DATA_DIR:-../shared/data}
OUT=${OUT:-runs/first_run}
METHODS=${METHODS:-"iss-p iht l1 scratch"}
ITERS=${ITERS:-1600}            # total iterations per method (the budget)
PRUNE_ITERS=${PRUNE_ITERS:-800}  # K_p = ITERS / 2 for iss-p and iht; l1/scratch fine-tune throughout
BATCH=${BATCH:-4}
PATCH=${PATCH:-16}               # LR patch (HR 64)
SEED=${SEED:-0}
TRAIN_DATA="$DATA/train/T91,$DATA/train/BSD200,$DATA/div2k/DIV2K_train_HR"

train() {
    mkdir -p "$OUT"
    for method in $METHODS; do
        resume=()
        [[ -f "$OUT/$method/state.pt" ]] && resume=(--resume)
        # Constant LR (no milestones): with milestones counted from the start of fine-tuning, l1/scratch would
        # decay from iteration 1/4 of the budget and iss-p/iht only after K_p, which is not an equal schedule.
        nice -n 10 python -m iss train --arch swinir-light --scale 4 --method "$method" --ratio 0.95 \
            --iters "$ITERS" --prune-iters "$PRUNE_ITERS" --batch "$BATCH" --patch "$PATCH" --milestones "" \
            --train-data "$TRAIN_DATA" --out "$OUT/$method" --seed "$SEED" --threads 1 \
            --save-every 25 --log-every 10 --no-progress "${resume[@]}" > "$OUT/$method.out" 2>&1 &
    done
    wait
}

evaluate() {
    # One chain per method (one thread each): the small sets first, then each big set, one JSON per group.
    for method in $METHODS; do
        (
            IFS=';'
            for group in ${EVAL_GROUPS:-Set5,Set14;B100;Urban100}; do
                [[ -f "$OUT/$method/eval_${group//,/+}.json" ]] && continue
                nice -n 10 env OMP_NUM_THREADS=1 python -m iss eval --model "$OUT/$method/model.safetensors" \
                    --datasets "$group" --data-dir "$DATA/benchmarks" --device cpu \
                    --json "$OUT/$method/eval_${group//,/+}.json"
            done
        ) > "$OUT/$method.eval.out" 2>&1 &
    done
    wait
    for method in $METHODS; do echo "== $method"; cat "$OUT/$method.eval.out"; done
}

case "${1:-train}" in
    train) train ;;
    eval) evaluate ;;
    zoo) python benchmarks/first_run_zoo.py --runs "$OUT" --methods "${METHODS// /,}" ;;
    *) echo "usage: $0 [train|eval|zoo]" >&2; exit 2 ;;
esac
