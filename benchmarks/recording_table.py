"""How far each run's mask drifts in a recorded ISS-P vs IHT run: the README's table of a recording.

    python benchmarks/recording_table.py assets/recordings/swinir-light_x4_r0.95_cpu --every 500

Prints, per run, the mask's Hamming distance to its first selection (per mille of the pruned weights) every
``--every`` iterations of the pruning stage, the quick validation PSNR at the end, and the first iteration
from which ISS-P's distance stays above IHT's to the end of the pruning stage; then what the hard freeze at
K_p did to each run's quick validation PSNR (last 1,000 pruning iterations, first after, end).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from iss.train.recording import RunTrace, load_recording


def prune_stage(trace: RunTrace) -> list[tuple[int, float]]:
    """(iteration, distance to the first mask) over the pruning stage, iterations with a value only."""
    end = trace.finetune_from or math.inf
    return [
        (i, d)
        for i, d in zip(trace.iterations, trace.distance_first, strict=True)
        if i < end and not math.isnan(d)
    ]


def overtakes(leader: list[tuple[int, float]], other: list[tuple[int, float]]) -> int | None:
    """First iteration from which ``leader``'s distance stays strictly above ``other``'s, if any."""
    others = dict(other)
    since = None
    for iteration, distance in leader:
        if iteration not in others:
            continue
        ahead = distance > others[iteration]
        since = (since or iteration) if ahead else None
    return since


def around_freeze(trace: RunTrace, before: int = 1000) -> tuple[float, float, float] | None:
    """Quick validation PSNR: mean over the last ``before`` pruning iterations, first after K_p, last."""
    if not trace.val_psnr or not trace.finetune_from:
        return None
    k, points = trace.finetune_from, list(zip(trace.val_iterations, trace.val_psnr, strict=True))
    ahead = [p for i, p in points if k - before < i < k]
    after = [p for i, p in points if i >= k]
    if not ahead or not after:
        return None
    return sum(ahead) / len(ahead), after[0], points[-1][1]


def table(folder: Path, every: int) -> str:
    """The Markdown table and the overtaking sentence for the recording in ``folder``."""
    _, traces = load_recording(folder)
    stages = {run: prune_stage(trace) for run, trace in traces.items()}
    last = min(stage[-1][0] for stage in stages.values())
    columns = list(range(every, last + 1, every))
    if columns[-1] != last:
        columns.append(last)
    lines = [
        "| iteration | " + " | ".join(f"{c:,}" for c in columns) + " | validation PSNR at the end |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for run, stage in stages.items():
        at = dict(stage)
        psnr = traces[run].val_psnr[-1] if traces[run].val_psnr else math.nan
        cells = " | ".join(f"{at[c]:.2f}" if c in at else "–" for c in columns)
        lines.append(f"| {run.upper()} | {cells} | {psnr:.2f} dB |")
    since = overtakes(stages["iss-p"], stages["iht"])
    lines.append("")
    end = f"the end of the pruning stage ({last:,})"
    lines.append(
        f"ISS-P's distance stays above IHT's from iteration {since:,} to {end}."
        if since is not None
        else f"ISS-P's distance does not stay above IHT's through {end}."
    )
    for run, trace in traces.items():
        if (freeze := around_freeze(trace)) is not None:
            ahead, after, last = freeze
            lines.append(
                f"{run.upper()} quick validation PSNR: {ahead:.2f} dB in the last 1,000 pruning iterations, "
                f"{after:.2f} right after the freeze at {trace.finetune_from:,}, {last:.2f} at the end."
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a recording folder (run.json, series.npz)")
    parser.add_argument("--every", type=int, default=500, help="iterations between table columns")
    args = parser.parse_args()
    print(table(args.folder, args.every))


if __name__ == "__main__":
    main()
