#!/usr/bin/env bash
# One device call of a 15-minute GPU lease: measure the plan's first group, size its budget to the
# time left, train its first cells at once, evaluate them on Set5 and bring them back under $OUT.
#   device run, carry [".gpu"]:  bash benchmarks/gpu_round.sh
# Environment: ROUND_SECONDS (wall time of the whole script, default 540), PLAN (default
# checkpoints/zoo_plan.json), ARCH and JOBS (default: the plan's first group's backbone and its number of
# methods, all trained at once), CONFIG (batch x LR patch, default the first group's), WORK (default
# /root/zoo), DATA (default .gpu/data). CELLS (comma-separated cells of PLAN, say of the CPU plan): train
# those at the plan's own budget and recipe, JOBS (default 1) at a time, without steps 1 and 2; with
# STATES=1, also bring back the training state of each of them that did not finish, in 15 MiB parts
# (states.tar.part-NN), to go on training on the CPU: cat "$OUT"/states.tar.part-* | tar -x -C WORK.
set -u
start=$SECONDS jobs_given=${JOBS:-}
ROUND_SECONDS=${ROUND_SECONDS:-540} PLAN=${PLAN:-checkpoints/zoo_plan.json}
WORK=${WORK:-/root/zoo} DATA=${DATA:-.gpu/data}
OUT=${OUT:?set OUT to the folder whose files come back}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 ISS_GIT_COMMIT=${ISS_GIT_COMMIT:-$(cat .gpu/COMMIT 2>/dev/null)}
python=$(command -v python3 || command -v python)
read -r first_arch first_size first_config < <("$python" -c "import json, sys; p = json.load(open(sys.argv[1]))
g = {'batch': 32, 'patch': 64, **p['defaults'], **p['groups'][0]}
print(g['arch'], len(g['methods']), f\"{g['batch']}x{g['patch']}\")" "$PLAN")
ARCH=${ARCH:-$first_arch} JOBS=${JOBS:-$first_size} CONFIG=${CONFIG:-$first_config}
left() { echo $((ROUND_SECONDS - (SECONDS - start))); }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null
"$python" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
mkdir -p "$WORK"

if [[ -n ${CELLS:-} ]]; then
    minutes=$("$python" -c "print(($(left) - 25) / 60)")
    timeout $(( $(left) - 15 )) "$python" -m iss zoo train --plan "$PLAN" --work "$WORK" --data-dir "$DATA" \
        --cells "$CELLS" --jobs "${jobs_given:-1}" --minutes "$minutes" --keep-going 2>&1 | tee "$OUT/train.log"
    "$python" -m iss zoo status --plan "$PLAN" --work "$WORK" | grep -E "^($(tr , '|' <<< "$CELLS")) "
    unfinished=$(cd "$WORK" && for cell in ${CELLS//,/ }; do
        [[ -f $cell/state.pt && ! -f $cell/model.safetensors ]] && echo "$cell/state.pt"
    done)
    parts=0
    if [[ -n ${STATES:-} && -n $unfinished ]]; then
        (cd "$WORK" && tar -c $unfinished) | split -b 15M -d - "$OUT/states.tar.part-"
        parts=$(ls "$OUT"/states.tar.part-* | wc -l)
    fi
    "$python" -m iss zoo export --plan "$PLAN" --work "$WORK" --out "$OUT" --max-files $((7 - parts))
    echo "round took $((SECONDS - start)) s"
    exit 0
fi

# 1. Throughput of the group's configuration, one process and JOBS at once (the budget's input).
timeout $(( $(left) / 3 )) "$python" benchmarks/train_throughput.py --archs "$ARCH" --configs "$CONFIG" \
    --modes fast --concurrency "$JOBS" --seconds 15 --steps 10 --warmup 5 --data "$DATA/train/BSD200" \
    --json "$OUT/train_throughput.json" || exit 1

# 2. Budget: the training minutes left after start-up, evaluation and export (about 100 s with compiling).
cell_minutes=$("$python" -c "print(max(0.5, ($(left) - 100) / 60))")
"$python" -m iss zoo budget --plan "$PLAN" --work "$WORK" --throughput "$OUT/train_throughput.json" \
    --cell-minutes "$cell_minutes" --jobs "$JOBS" || exit 1
cp "$PLAN" "$OUT/zoo_plan.json"

# 3. Train the first JOBS cells at once, evaluate them, stop cleanly before the call's end.
minutes=$("$python" -c "print(($(left) - 25) / 60)")
timeout $(( $(left) - 15 )) "$python" -m iss zoo train --plan "$PLAN" --work "$WORK" --data-dir "$DATA" \
    --jobs "$JOBS" --minutes "$minutes" 2>&1 | tee "$OUT/train.log"

# 4. Bring back what finished.
"$python" -m iss zoo status --plan "$PLAN" --work "$WORK"
"$python" -m iss zoo export --work "$WORK" --out "$OUT" --max-files 5  # beside the three files above
echo "round took $((SECONDS - start)) s"
