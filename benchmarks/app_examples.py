"""How ISS-P ranks on every example the Compare tab offers, at the cell it opens at (HR mode, Y PSNR).

Runs the app's own ``compare`` on each bundled example (and, with ``--data-dir``, the extra Urban100 crops)
with bicubic and every method the zoo has at the default cell, and writes per example: each method's PSNR,
ISS-P's rank among the pruned methods, and its margin over bicubic and over the best other method. The app
opens on the bundled Urban100 crop where ISS-P leads the best other method by most
(``compare.FIRST_EXAMPLE``); docs/app.md quotes the table.

    PYTHONPATH=. python benchmarks/app_examples.py --data-dir ../shared/data \
        --out benchmarks/results/app_examples
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from iss.ui import catalog, compare

ARCH = "swinir-light"


def measure(example: str, scale: int, ratio: float | None, zoo_path: str | None) -> dict[str, float]:
    """Y PSNR of bicubic and each method of the cell on one example (HR mode, dense kernels, CPU)."""
    methods = catalog.method_choices(ARCH, scale, ratio, zoo_path)
    comp = compare.compare(
        example, ARCH, scale, ratio, methods, compare.MODE_HR, sparse=False, device="cpu", zoo_path=zoo_path
    )
    return {row[0]: row[1] for row in comp.rows if isinstance(row[1], float)}


def ranking(psnr: dict[str, float], method: str = "iss-p") -> dict[str, float | int]:
    """``method``'s rank among the pruned methods (1 = best), its margins over bicubic and the best other."""
    pruned = {m: v for m, v in psnr.items() if m != catalog.BICUBIC}
    others = [v for m, v in pruned.items() if m != method]
    return {
        "rank": 1 + sum(v > pruned[method] for v in others),
        "of": len(pruned),
        "over_bicubic": round(pruned[method] - psnr[catalog.BICUBIC], 2),
        "over_best_other": round(pruned[method] - max(others), 2) if others else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default=None, help="adds the extra Urban100 crops")
    parser.add_argument("--zoo", default=None, help="zoo manifest (default checkpoints/zoo.json)")
    parser.add_argument("--out", default="benchmarks/results/app_examples", help="writes OUT.json and OUT.md")
    parser.add_argument("--limit", type=int, default=None, help="measure only the first N examples")
    args = parser.parse_args(argv)
    scale = catalog.default_scale(ARCH, args.zoo)
    ratio = catalog.default_ratio(ARCH, scale, args.zoo)
    rows = []
    with tempfile.TemporaryDirectory() as crops:
        for path, label in compare.example_images(args.data_dir, crops)[: args.limit]:
            psnr = measure(path, scale, ratio, args.zoo)
            rows.append({"example": label, "file": Path(path).name, "psnr": psnr, **ranking(psnr)})
            print(label, rows[-1]["rank"], rows[-1]["over_bicubic"], rows[-1]["over_best_other"], flush=True)
    result = {"arch": ARCH, "scale": scale, "ratio": ratio, "examples": rows}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(table(result))
    print(table(result))


def table(result: dict) -> str:
    """A Markdown table: one example per row, ISS-P's rank and margins, then each method's PSNR."""
    methods = list(result["examples"][0]["psnr"]) if result["examples"] else []
    head = ["example", "ISS-P rank", "ISS-P - bicubic (dB)", "ISS-P - best other (dB)", *methods]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for row in result["examples"]:
        cells = [row["example"], f"{row['rank']} of {row['of']}", f"{row['over_bicubic']:+.2f}",
                 f"{row['over_best_other']:+.2f}", *(f"{row['psnr'][m]:.2f}" for m in methods)]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    cell = f"{result['arch']} x{result['scale']} r{result['ratio']}"
    return f"Y PSNR (dB) at {cell}, HR mode:\n\n" + "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
