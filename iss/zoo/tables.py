"""The zoo as tables: the terminal listing (``zoo list``), the per-cell markdown tables of docs/zoo.md and
the README's overview, each beside bicubic and the paper's numbers for the same cell."""

from __future__ import annotations

import itertools
import os
from typing import Any

from huggingface_hub import try_to_load_from_cache as _try_to_load_from_cache

from iss.data import reference

from .manifest import BENCHMARK_ORDER, METHOD_ORDER, ZooEntry


def format_table(entries: list[ZooEntry], *, cache_dir: str | os.PathLike | None = None) -> str:
    """The zoo as a text table: name, arch, scale, method, ratio, size, Set5 PSNR, where it is available."""
    header = ("name", "arch", "scale", "method", "ratio", "size", "Set5 PSNR", "local")
    rows = [header] + [
        (e.name, e.arch, f"x{e.scale}", e.method, f"{e.ratio:g}", human_size(e.size_bytes),
         f"{e.metrics['Set5']['psnr']:.2f}" if "psnr" in e.metrics.get("Set5", {}) else "–",
         _local_status(e, cache_dir))
        for e in entries
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) if entries else "(the zoo is empty)"


def markdown_table(entries: list[ZooEntry]) -> str:
    """The zoo in full (``docs/zoo.md``): per (arch, scale, ratio) group, each entry's PSNR/SSIM and training
    budget, then bicubic (``iss.data.reference``) and the paper's numbers for those cells."""
    paper = reference.paper_cells()
    sets = [s for s in BENCHMARK_ORDER if any(s in e.metrics for e in entries)]
    lines = []
    for key in dict.fromkeys((e.arch, e.scale, e.ratio) for e in entries):
        arch, scale, ratio = key
        group = [e for e in entries if (e.arch, e.scale, e.ratio) == key]
        lines += [
            f"**{arch} x{scale}, ratio {ratio:g}** (PSNR/SSIM on Y)",
            "",
            "| method | " + " | ".join(sets) + " | budget |",
            "|---|" + "---|" * (len(sets) + 1),
        ]
        for e in group:
            cells = " | ".join(metric_cell(e.metrics.get(s)).replace(" / ", "/") for s in sets)
            lines.append(f"| {e.method} | {cells} | {_budget_text(e.budget)} |")
        if values := reference.bicubic_results(scale):
            lines.append(
                "| bicubic | "
                + " | ".join(metric_cell(values.get(s)).replace(" / ", "/") for s in sets)
                + " | |"
            )
        methods = {e.method for e in group}
        for row in paper:
            if (row["arch"], row["scale"], row["ratio"], row["method"] in methods) == (
                arch,
                scale,
                ratio,
                True,
            ):
                cells = " | ".join(metric_cell(row["metrics"].get(s)).replace(" / ", "/") for s in sets)
                lines.append(f"| paper {row['method']} (table {row['table']}) | {cells} | official |")
        lines.append("")
    return "\n".join(lines).rstrip()


def overview_table(entries: list[ZooEntry], sets: tuple[str, str] = ("Set5", "Urban100")) -> str:
    """The README's zoo at a glance: one row per cell (backbone, scale, ratio) with PSNR on ``sets`` for
    bicubic and each method, and under it a row with the paper's numbers for the same cell. Where a row's
    methods trained for different numbers of iterations, each says its own (``36.10 / 28.20 (60k it)``), so
    that no one reads a longer budget as a better method; so does a cell shorter than its backbone's longest.
    """
    paper = reference.paper_cells()
    longest: dict[str, int] = {}
    for e in entries:
        longest[e.arch] = max(longest.get(e.arch, 0), e.budget.get("iterations") or 0)
    order = {m: i for i, m in enumerate(METHOD_ORDER)}
    methods = sorted({e.method for e in entries}, key=lambda m: (order.get(m, len(order)), m))
    lines = [
        "| cell | bicubic | " + " | ".join(methods) + " |",
        "|---|---|" + "---|" * len(methods),
    ]
    for cell in sorted({(e.arch, e.scale, e.ratio) for e in entries}):
        group = {e.method: e for e in entries if (e.arch, e.scale, e.ratio) == cell}
        mixed = len({e.budget.get("iterations") for e in group.values()}) > 1
        theirs = {r["method"]: r["metrics"] for r in paper if (r["arch"], r["scale"], r["ratio"]) == cell}
        bicubic = reference.bicubic_results(cell[1])
        row = [f"{cell[0]} x{cell[1]} r{cell[2]:g}", _psnrs(bicubic, sets)]
        for m in methods:
            entry = group.get(m)
            its = entry.budget.get("iterations") if entry else None
            budget = f" ({_short(its)} it)" if its and (mixed or its < longest[cell[0]]) else ""
            row.append(_psnrs(entry.metrics if entry else None, sets) + budget)
        lines.append("| " + " | ".join(row) + " |")
        if theirs:
            row = ["*paper*", "", *(f"*{_psnrs(theirs[m], sets)}*" if m in theirs else "" for m in methods)]
            lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


# IHT's Set5 PSNR span over four seeds (docs/reproduction.md#seeds): a gap one seed can move
SEED_SPREAD_DB = 0.22
NAMES = {"iss-p": "ISS-P", "iht": "IHT", "iss-r": "ISS-R", "l1": "L1-norm", "srp": "SRP", "assl": "ASSL",
         "swinir-light": "SwinIR-light", "edsr-l": "EDSR-L", "cat-r": "CAT-R"}  # fmt: skip
_COUNTS = {2: "both", 3: "all three", 4: "all four", 5: "all five", 6: "all six", 7: "all seven"}


def glance_table(entries: list[ZooEntry], spread: float = SEED_SPREAD_DB) -> str:
    """docs/zoo.md's zoo at a glance: per cell, its budget, its methods in Set5 order, the sets on which that
    order holds, ISS-P beside the paper and which methods beat bicubic on every set. Methods within
    ``spread`` dB on Set5 under the first of their tier are written ``~`` (one seed could swap them), the
    tiers ``>``; the order holds on a set where each tier's methods all beat those of the tiers below."""
    lines = [
        "| cell | iterations | order on Set5 | holds on | ISS-P Set5 (paper) | over bicubic on every set |",
        "|---|---|---|---|---|---|",
    ]
    for cell in sorted({(e.arch, e.scale, e.ratio) for e in entries}):
        group = {e.method: e for e in entries if (e.arch, e.scale, e.ratio) == cell}
        scored = {m: e for m, e in group.items() if "psnr" in e.metrics.get("Set5", {})}
        tiers = _tiers({m: e.metrics["Set5"]["psnr"] for m, e in scored.items()}, spread)
        order = " > ".join(" ~ ".join(_name(m) for m in tier) for tier in tiers)
        bicubic = reference.bicubic_results(cell[1])
        sets = [s for s in BENCHMARK_ORDER if s in bicubic and all(s in e.metrics for e in scored.values())]
        holds = [s for s in sets if _order_holds(tiers, {m: e.metrics[s]["psnr"] for m, e in scored.items()})]
        over = [m for m, e in scored.items() if all(e.metrics[s]["psnr"] > bicubic[s]["psnr"] for s in sets)]
        row = [
            f"{_name(cell[0])} x{cell[1]} r{cell[2]:g}",
            _budgets(group),
            order,
            "all five sets" if holds == list(BENCHMARK_ORDER) else (", ".join(holds) or "none"),
            _issp_text(group.get("iss-p"), cell),
            _COUNTS[len(over)] if len(over) == len(group) > 1 else (_names(over) or "none"),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def within_spread(higher: float, lower: float, spread: float = SEED_SPREAD_DB) -> bool:
    """Whether ``lower`` is less than ``spread`` dB under ``higher``, as the tables show them (to 0.01 dB)."""
    return round(100 * higher) - round(100 * lower) < round(100 * spread)


def _tiers(psnr: dict[str, float], spread: float) -> list[list[str]]:
    """Methods by PSNR, best first, in tiers: a method joins the tier above when ``within_spread`` of its
    first method."""
    tiers: list[list[str]] = []
    for m in sorted(psnr, key=psnr.__getitem__, reverse=True):
        if tiers and within_spread(psnr[tiers[-1][0]], psnr[m], spread):
            tiers[-1].append(m)
        else:
            tiers.append([m])
    return tiers


def _order_holds(tiers: list[list[str]], psnr: dict[str, float]) -> bool:
    """Whether every method of each tier beats every method of the tiers below it."""
    return all(
        min(psnr[m] for m in upper) > max(psnr[m] for m in lower)
        for upper, lower in itertools.pairwise(tiers)
    )


def _budgets(group: dict[str, ZooEntry]) -> str:
    """``60,000``, or ``60,000; ASSL, scratch 6,000`` where some methods trained for another budget."""
    count = {m: int(e.budget.get("iterations") or 0) for m, e in group.items()}
    # the most methods' budget; of equally common ones, the longest
    usual = max(sorted(set(count.values()), reverse=True), key=list(count.values()).count)
    others = sorted({n for n in count.values() if n != usual}, reverse=True)
    return "; ".join(
        [f"{usual:,}", *(f"{_names([m for m in group if count[m] == n])} {n:,}" for n in others)]
    )


def _issp_text(entry: ZooEntry | None, cell: tuple[str, int, float]) -> str:
    """``30.25 (31.16)``: ISS-P's Set5 PSNR and the paper's for the same cell (``none`` where it has none)."""
    if entry is None or "psnr" not in entry.metrics.get("Set5", {}):
        return "–"
    paper = [r for r in reference.paper_cells() if (r["arch"], r["scale"], r["ratio"]) == cell]
    theirs = next((r["metrics"]["Set5"]["psnr"] for r in paper if r["method"] == "iss-p"), None)
    return f"{entry.metrics['Set5']['psnr']:.2f} ({f'{theirs:.2f}' if theirs is not None else 'none'})"


def _name(key: str) -> str:
    """A method's or backbone's name as the paper writes it (``L1-norm``, ``SwinIR-light``; else ``key``)."""
    return NAMES.get(key, key)


def _names(methods: list[str]) -> str:
    """``ISS-P``, ``ISS-P and IHT``, ``ISS-P, IHT and SRP``."""
    names = [_name(m) for m in methods]
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


def _short(count: int) -> str:
    """``60k`` for 60,000, ``1,300`` for 1,300."""
    return f"{count // 1000}k" if count % 1000 == 0 else f"{count:,}"


def _psnrs(metrics: dict[str, Any] | None, sets: tuple[str, ...]) -> str:
    """``28.79 / 23.42``: PSNR on each of ``sets``, ``–`` where missing."""
    if not metrics:
        return "–"
    return " / ".join(f"{metrics[s]['psnr']:.2f}" if "psnr" in metrics.get(s, {}) else "–" for s in sets)


def _budget_text(budget: dict[str, Any]) -> str:
    """``12,000 it (K_p 6,000), batch 4, patch 16; cpu: ..., 130 min`` (pruner options after K_p)."""
    text = f"{budget.get('iterations', 0):,} it (K_p {budget.get('prune_iters', 0):,}), "
    options = budget.get("pruner_options") or {}
    text += "".join(
        f"{k.replace('_', ' ')} {f'{v:,}' if isinstance(v, int) else v}, " for k, v in options.items()
    )
    text += f"batch {budget.get('batch')}, patch {budget.get('patch')}; {device_text(budget)}"
    if "train_minutes" in budget:
        text += f", {budget['train_minutes']:g} min"
    return text


def device_text(budget: dict[str, Any]) -> str:
    """The device, or each way the cell trained when it changed: ``cpu: ... (1 threads) beside 1 other cell
    to 1,741, then cpu: ... (2 threads)``."""
    setups = budget.get("setups") or []
    if len(setups) < 2:
        return str(budget.get("device", "?"))
    parts = []
    for setup, following in zip(setups, [*setups[1:], None], strict=True):
        beside = setup["jobs"] - 1
        parts.append(
            setup["device"]
            + (f" beside {beside} other cell{'s' * (beside > 1)}" if beside else "")
            + (f" to {following['from']:,}" if following else "")
        )
    return ", then ".join(parts)


def _local_status(entry: ZooEntry, cache_dir: str | os.PathLike | None) -> str:
    """``bundled``, ``cached``, both, or ``no``: where a copy exists without the network (not verified)."""
    where = ["bundled"] if entry.bundled.is_file() else []
    if entry.hub is not None:
        cached = _try_to_load_from_cache(
            entry.hub.repo_id, entry.hub.filename, cache_dir=cache_dir, revision=entry.hub.revision
        )
        if isinstance(cached, str):
            where.append("cached")
    return "+".join(where) or "no"


def metric_cell(values: dict[str, float] | None) -> str:
    """``psnr / ssim`` for the metrics table, or a dash."""
    if not values or "psnr" not in values:
        return "–"
    return f"{values['psnr']:.2f} / {values['ssim']:.4f}" if "ssim" in values else f"{values['psnr']:.2f}"


def human_size(n: int) -> str:
    """A byte count as ``12.3 MB``."""
    size = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError("unreachable")
