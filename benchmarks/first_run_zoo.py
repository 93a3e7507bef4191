"""Bundle the first run's checkpoints: copy each run's model.safetensors to checkpoints/ and write zoo.json.

    python benchmarks/first_run_zoo.py --runs runs/first_run --methods iss-p,iht,l1,scratch

Each ``<runs>/<method>/`` must hold ``model.safetensors`` (from ``python -m iss train``) and ``eval*.json``
(from ``python -m iss eval --json``, merged); the budget comes from the checkpoint's own metadata. Also writes
``benchmarks/results/first_run.json`` (the table, for the README).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from iss import checkpoint
from iss.data import BENCHMARKS

ROOT = Path(__file__).resolve().parents[1]
HUB_REPO = "iss-sr/zoo"


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (what iss.zoo.resolve checks after a download)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def entry(run: Path, dest: Path) -> dict[str, Any]:
    """Copy ``run/model.safetensors`` to ``dest`` and describe it as a zoo entry."""
    source = run / "model.safetensors"
    meta = checkpoint.read_meta(source)  # also verifies the checkpoint's own sha256
    metrics = {}
    for part in sorted(run.glob("eval*.json")):  # one file per group of sets (see first_run.sh)
        metrics.update(json.loads(part.read_text()))
    metrics = {name: metrics[name] for name in BENCHMARKS if name in metrics}
    name = f"{meta['arch']}_x{meta['scale']}_{meta['method']}_r{meta['ratio']}"
    file = dest / f"{name}.safetensors"
    shutil.copyfile(source, file)
    budget = dict(meta.get("budget", {}))
    budget.update(data=meta["data"], device="cpu")
    return {
        "name": name,
        "arch": meta["arch"],
        "scale": meta["scale"],
        "method": meta["method"],
        "ratio": meta["ratio"],
        "file": file.name,
        "sha256": sha256_file(file),
        "size_bytes": file.stat().st_size,
        "hub": {"repo_id": HUB_REPO, "revision": "main", "filename": file.name},
        "budget": budget,
        "metrics": {
            s: {"psnr": round(r["psnr"], 4), "ssim": round(r["ssim"], 6)} for s, r in metrics.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=ROOT / "runs" / "first_run")
    parser.add_argument("--methods", default="iss-p,iht,l1,scratch")
    parser.add_argument("--dest", type=Path, default=ROOT / "checkpoints")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    entries = [entry(args.runs / method, args.dest) for method in args.methods.split(",")]
    manifest = args.dest / "zoo.json"
    manifest.write_text(json.dumps({"version": 1, "entries": entries}, indent=2) + "\n")
    results = ROOT / "benchmarks" / "results" / "first_run.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    table = {e["method"]: {"budget": e["budget"], "metrics": e["metrics"]} for e in entries}
    results.write_text(json.dumps(table, indent=2) + "\n")
    sets = list(entries[0]["metrics"])
    print("method   " + "  ".join(f"{s:>15}" for s in sets))
    for e in entries:
        cells = "  ".join(f"{e['metrics'][s]['psnr']:7.2f}/{e['metrics'][s]['ssim']:.4f}" for s in sets)
        print(f"{e['method']:<8} {cells}")
    print(f"wrote {manifest} and {results}")


if __name__ == "__main__":
    main()
