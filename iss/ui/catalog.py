"""The checkpoint zoo as the app sees it, and the app's assets: which backbones, scales, ratios and methods
``checkpoints/zoo.json`` offers, the cell each tab opens on, notes on weak cells, and cached, sha256-checked
model loading. Shared by the Compare, Analysis and Sparsity tabs; plain values in and out, no gradio.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch
from torch import nn

import iss
import iss.data.reference

ASSETS = Path("assets").resolve()  # the app's photos and recordings: the repository's, the app runs there
EXAMPLES_DIR = ASSETS / "examples"
BICUBIC = "bicubic"
SCALES = iss.archs.SCALES
_FOLDERS = re.compile(r"(?<![\w:/.~])(?:~|\.{1,2})?/(?:[^\s/'\"]+/)+(?=[^\s/'\"])")  # a path's folders


def default_device() -> str:
    """``cuda`` when a GPU is present, else ``cpu``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def zoo(path: str | None = None) -> list[Any]:
    """The checkpoint zoo entries (empty when the manifest is missing, so the app still runs bicubic)."""
    try:
        return list(iss.zoo.load_zoo(path))
    except FileNotFoundError:
        return []


def zoo_entry(name: str, zoo_path: str | None = None) -> Any:
    """The zoo entry called ``name``; ``KeyError`` listing the names otherwise."""
    entries = {e.name: e for e in zoo(zoo_path)}
    if name not in entries:
        raise KeyError(f"no zoo entry '{name}'; the zoo has: {', '.join(entries) or 'nothing'}")
    return entries[name]


def backbones(zoo_path: str | None = None) -> list[str]:
    """Every backbone the zoo or the library has: those with zoo entries first, then the others."""
    in_zoo = sorted({e.arch for e in zoo(zoo_path)})
    return in_zoo + [a for a in iss.archs.list_archs() if a not in in_zoo]


def default_backbone(zoo_path: str | None = None) -> str:
    """The backbone the Compare tab opens on: SwinIR-light (the paper's main backbone) when listed."""
    archs = backbones(zoo_path)
    return "swinir-light" if "swinir-light" in archs else archs[0]


def bicubic_results(scale: int) -> dict[str, dict[str, float]]:
    """Our bicubic PSNR/SSIM per benchmark set at ``scale`` (empty for a scale without one)."""
    return iss.data.reference.bicubic_results(scale)


def default_cell(zoo_path: str | None = None) -> tuple[str, int, float | None]:
    """The backbone, scale and ratio the app opens on (Compare's first screen; the Analysis and Sparsity
    tabs follow it): SwinIR-light when the zoo has it, at its ``default_scale`` and ``default_ratio``."""
    arch = default_backbone(zoo_path)
    scale = default_scale(arch, zoo_path)
    return arch, scale, default_ratio(arch, scale, zoo_path)


HEADLINE_SCALE = 4  # the paper's Figure 2 and Table 1: the first look, when fully trained there


def default_scale(arch: str, zoo_path: str | None = None) -> int:
    """The scale of ``arch``'s strongest cell (``_strength``; x4 without checkpoints)."""
    cells = _strength(arch, zoo_path)
    return max(cells, key=cells.__getitem__)[0] if cells else HEADLINE_SCALE


def default_ratio(arch: str, scale: int, zoo_path: str | None = None) -> float | None:
    """The ratio the ratio box opens at for ``arch`` at ``scale``: its strongest cell there (``_strength``;
    else the highest ratio; None without checkpoints)."""
    cells = {ratio: key for (s, ratio), key in _strength(arch, zoo_path).items() if s == int(scale)}
    found = ratios(arch, scale, zoo_path)
    return max(cells, key=cells.__getitem__) if cells else (found[-1] if found else None)


def _strength(arch: str, zoo_path: str | None) -> dict[tuple[int, float], tuple[int, int, bool, float]]:
    """How strong a first look each (scale, ratio) cell of ``arch`` makes, as a sort key: the shortest
    training budget among its methods (methods trained alike), how many methods it compares, whether it is
    at ``HEADLINE_SCALE`` and beats bicubic there, then its best Set5 PSNR over bicubic."""
    budgets: dict[tuple[int, float], list[int]] = {}
    gains: dict[tuple[int, float], float] = {}
    methods: dict[tuple[int, float], set[str]] = {}
    for entry in zoo(zoo_path):
        key = (int(entry.scale), float(entry.ratio))
        score = entry.metrics.get("Set5", {}).get("psnr") if entry.arch == arch else None
        bicubic = bicubic_results(key[0]).get("Set5", {}).get("psnr")
        if score is None or bicubic is None:
            continue
        budgets.setdefault(key, []).append(iterations(entry))
        gains[key] = max(gains.get(key, -math.inf), score - bicubic)
        methods.setdefault(key, set()).add(entry.method)
    return {
        key: (min(budgets[key]), len(methods[key]), key[0] == HEADLINE_SCALE and gains[key] > 0, gains[key])
        for key in gains
    }


def iterations(entry: Any) -> int:
    """The iterations a zoo entry was trained for (0 when the manifest does not say)."""
    found = entry.budget.get("iterations")
    return int(found) if isinstance(found, int | float) else 0


def ratios(arch: str, scale: int, zoo_path: str | None = None) -> list[float]:
    """Pruning ratios present in the zoo for ``arch`` at ``scale`` (for the ratio dropdown)."""
    return sorted({float(e.ratio) for e in zoo(zoo_path) if e.arch == arch and int(e.scale) == int(scale)})


def _matches(entry: Any, arch: str, scale: int, ratio: float | None) -> bool:
    """Whether a zoo entry is for ``arch`` at ``scale`` and (unless None) ``ratio``."""
    same_ratio = ratio is None or abs(float(entry.ratio) - float(ratio)) < 1e-9
    return entry.arch == arch and int(entry.scale) == int(scale) and same_ratio


def method_choices(arch: str, scale: int, ratio: float | None, zoo_path: str | None = None) -> list[str]:
    """Bicubic plus the method of every zoo entry for backbone, scale and ratio (the default selection), in
    ``iss.zoo.METHOD_ORDER``."""
    return [BICUBIC, *in_order(e.method for e in zoo(zoo_path) if _matches(e, arch, scale, ratio))]


def all_methods(zoo_path: str | None = None) -> list[str]:
    """Bicubic plus every method the zoo has for some backbone and scale (what the API accepts)."""
    return [BICUBIC, *in_order(e.method for e in zoo(zoo_path))]


def in_order(methods: Iterable[str]) -> list[str]:
    """``methods`` once each in the app's one order (``iss.zoo.METHOD_ORDER``: ISS-P first; bicubic before
    all, unknown names after, alphabetically)."""
    order = {m: i for i, m in enumerate((BICUBIC, *iss.zoo.METHOD_ORDER))}
    return sorted(dict.fromkeys(methods), key=lambda m: (order.get(m, len(order)), m))


def find_entry(arch: str, scale: int, ratio: float | None, method: str, zoo_path: str | None = None) -> Any:
    """The zoo entry for (backbone, scale, ratio, method); the last one listed if several (the manifest's
    order is the newest last). ``FileNotFoundError`` saying what the zoo has otherwise."""
    found = [e for e in zoo(zoo_path) if _matches(e, arch, scale, ratio) and e.method == method]
    if not found:
        ratio_text = f" r{ratio}" if ratio is not None else ""
        raise FileNotFoundError(
            f"no {arch} x{scale}{ratio_text} {method} checkpoint in the zoo; it has: {zoo_summary(zoo_path)}"
        )
    return found[-1]


def zoo_summary(zoo_path: str | None = None) -> str:
    """What the zoo holds, per backbone, scale and ratio: ``swinir-light x4 r0.95 (iss-p, iht)``."""
    groups: dict[tuple, list[str]] = {}
    for e in zoo(zoo_path):
        groups.setdefault((e.arch, int(e.scale), float(e.ratio)), []).append(e.method)
    parts = [f"{a} x{s} r{r:g} ({', '.join(dict.fromkeys(m))})" for (a, s, r), m in sorted(groups.items())]
    return "; ".join(parts) or "nothing yet"


def availability(arch: str, scale: int, zoo_path: str | None = None) -> str:
    """A warning when the zoo has no pruned checkpoint for ``arch`` at ``scale`` (only bicubic can run)."""
    if ratios(arch, scale, zoo_path):
        return ""
    scales = sorted({int(e.scale) for e in zoo(zoo_path) if e.arch == arch})
    if scales:
        has = ", ".join(f"x{s}" for s in scales)
        return f"⚠️ No pruned {arch} x{scale} checkpoint yet: only bicubic runs (it has {has})."
    others = sorted({e.arch for e in zoo(zoo_path)})
    return f"⚠️ No {arch} checkpoint yet: only bicubic runs (the zoo has {', '.join(others) or 'none'})."


def cell_note(arch: str, scale: int, ratio: float | None, zoo_path: str | None = None) -> str:
    """One line when the zoo's cell (``arch``, ``scale``, ``ratio``) is weak: methods under bicubic, trained
    for a shorter budget than the zoo's longest, or ISS-P not ahead on Set5; with the budgets and the paper's
    ISS-P figure for the cell. Empty for a strong cell (or one without checkpoints)."""
    cell = [e for e in zoo(zoo_path) if ratio is not None and _matches(e, arch, scale, ratio)]
    set5 = {e.method: e.metrics["Set5"]["psnr"] for e in cell if "psnr" in e.metrics.get("Set5", {})}
    if not set5:
        return ""
    bicubic = bicubic_results(scale).get("Set5", {}).get("psnr", -math.inf)
    longest = max((iterations(e) for e in zoo(zoo_path) if e.arch == arch), default=0)
    short = in_order(e.method for e in cell if 0 < iterations(e) < longest)
    under = in_order(m for m, v in set5.items() if v < bicubic)
    best = max(set5, key=set5.__getitem__)
    issues = []
    if under:
        issues.append(f"{', '.join(under)} under bicubic ({bicubic:.2f} dB)")
    if short:
        budget = min(iterations(e) for e in cell if e.method in short)
        issues.append(f"{', '.join(short)} trained {budget:,} iterations, not the zoo's {longest:,}")
    if best != "iss-p":
        issp = f"ISS-P's {set5['iss-p']:.2f}" if "iss-p" in set5 else "no ISS-P checkpoint"
        within = "iss-p" in set5 and iss.zoo.tables.within_spread(set5[best], set5["iss-p"])
        seed = f", within the {iss.zoo.tables.SEED_SPREAD_DB} dB one seed moves" if within else ""
        issues.append(f"{best} ahead ({set5[best]:.2f} dB vs {issp}{seed})")
    if not issues:
        return ""
    paper = paper_psnr(arch, scale, ratio, "iss-p")
    ours = next((e for e in cell if e.method == "iss-p" and "iss-p" in set5), None)
    paper_text = f"; the paper's ISS-P here: {paper:.2f} dB" if paper is not None else ""
    if paper is not None and ours is not None:
        paper_text += f", ours {set5['iss-p']:.2f} dB after {iterations(ours):,} iterations"
    return f"⚠️ A weak cell of the zoo (Set5): {'; '.join(issues)}{paper_text}."


def paper_psnr(
    arch: str, scale: int, ratio: float | None, method: str, dataset: str = "Set5"
) -> float | None:
    """The paper's PSNR for a cell and method (``paper_results.json``, Tables 1-4), or None."""
    for row in _paper_rows():
        same = (row["arch"], int(row["scale"]), row["method"]) == (arch, int(scale), method)
        if same and ratio is not None and abs(row["ratio"] - ratio) < 1e-9:
            return row["metrics"].get(dataset, {}).get("psnr")
    return None


@functools.cache
def _paper_rows() -> list[dict]:
    """The rows of the paper's Tables 1-4 (read once)."""
    return iss.data.reference.paper_cells()


def backbone_label(arch: str, zoo_path: str | None = None) -> str:
    """The backbone's name in the choice, marked when the zoo has no checkpoint of it."""
    return arch if any(e.arch == arch for e in zoo(zoo_path)) else f"{arch} (no checkpoints yet)"


@functools.lru_cache(maxsize=4)
def resolved_zoo(zoo_path: str | None = None) -> dict[str, Any]:
    """Every zoo entry's verified local file (``iss.zoo.Resolved``) or the error saying why there is none.

    Resolved once per process, all entries at once within one Hub deadline (``iss.zoo.locate_all``), so a
    slow or failing Hub costs the first request at most that long, and no later request anything.
    """
    entries = zoo(zoo_path)
    return dict(zip((e.name for e in entries), iss.zoo.locate_all(entries), strict=True))


@functools.lru_cache(maxsize=16)
def load_model(
    name: str, device: str = "cpu", sparse: bool = False, zoo_path: str | None = None
) -> tuple[nn.Module, dict]:
    """Load (Hub or bundled, sha256-checked) zoo entry ``name``, cached per (name, device, sparse)."""
    zoo_entry(name, zoo_path)  # KeyError listing the names for an unknown one
    found = resolved_zoo(zoo_path)[name]
    if isinstance(found, Exception):
        raise found.with_traceback(None)
    path = found.path
    model, meta = iss.checkpoint.load(path, device=device)
    model.eval()
    kept, total = kept_weights(model)  # before sparsify: converted layers no longer hold a dense weight
    meta = {**meta, "size_bytes": Path(path).stat().st_size, "kept": kept, "total": total}
    if sparse:
        model = iss.sparse.sparsify(model)
    return model, meta


def kept_weights(model: nn.Module) -> tuple[int, int]:
    """(non-zero, total) entries of the model's conv/linear weights: what pruning acts on."""
    kept = total = 0
    for module in model.modules():
        if isinstance(module, nn.Conv2d | nn.Linear):
            kept += int(torch.count_nonzero(module.weight).item())
            total += module.weight.numel()
    return kept, total


def short_reason(error: BaseException | str, limit: int = 140) -> str:
    """An error as one line for the UI: no server folders (file names only), no digests, <= ``limit``."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    text = re.sub(r"^refusing checkpoint \S+: ", "", re.sub(r"\b[0-9a-f]{64}\b", "<sha256>", str(text)))
    line = " ".join(_FOLDERS.sub("", text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
