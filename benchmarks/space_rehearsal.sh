#!/usr/bin/env bash
# Rehearse a Space build on this machine: export the Space folder, install it into a fresh venv with only
# `pip install -r requirements.txt` (plus the gradio its README's sdk_version names, as a Space does), start
# its app.py and wait until it answers, then stop it. Prints the installed torch and the startup time.
#
#   benchmarks/space_rehearsal.sh [WORKDIR] [PORT]
#
# Needs a package index (PyPI or a local mirror) and a C compiler (packages.txt). The zoo must be published
# (`python -m iss zoo push`) for Compare to find checkpoints: the Space folder bundles none.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-$(mktemp -d -t iss-space-XXXXXX)}
port=${2:-$((20000 + RANDOM % 40000))}
python -m iss space export "$work/space"
python -m venv "$work/venv"
sdk=$(sed -n 's/^sdk_version: *//p' "$work/space/README.md")
"$work/venv/bin/pip" install -q -r "$work/space/requirements.txt" "gradio==$sdk"
"$work/venv/bin/python" -c 'import torch, gradio; print(f"torch {torch.__version__}, gradio {gradio.__version__}")'
start=$(date +%s)
(cd "$work/space" && exec "$work/venv/bin/python" app.py --port "$port") >"$work/app.log" 2>&1 &
app=$!
trap 'kill "$app" 2>/dev/null || true' EXIT
for _ in $(seq 600); do
    if curl -fs "http://127.0.0.1:$port/gradio_api/info" >/dev/null; then
        echo "the Space app answered on port $port after $(($(date +%s) - start)) s (log: $work/app.log)"
        exit 0
    fi
    kill -0 "$app" 2>/dev/null || { echo "the Space app exited:"; tail -20 "$work/app.log"; exit 1; }
    sleep 1
done
echo "the Space app did not answer in 600 s (log: $work/app.log)"
exit 1
