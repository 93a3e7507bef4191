"""Publishing the zoo: the model card the Hub shows (metadata, ``model-index`` results, a table per cell),
staging and pushing the bundled files, and pinning the manifest to the commit a push made."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, HfApi, ModelCardData

from .manifest import BENCHMARK_ORDER, DEFAULT_ZOO, ZooEntry, _write_manifest, load_zoo, verify
from .tables import device_text, human_size, metric_cell

METHOD_DESCRIPTIONS = {
    "iss-p": "Iterative Soft Shrinkage-Percentage (the paper's method): from random init, every iteration "
    "of the pruning stage ranks each layer's weights by magnitude and multiplies the unimportant fraction "
    "`ratio` by `alpha` instead of zeroing it, so masks keep evolving; the mask is then fixed and the "
    "network fine-tuned.",
    "iss-r": "Iterative Soft Shrinkage-Regularization: the unimportant weights get a growing L2 penalty "
    "during the pruning stage, then are removed and the network fine-tuned.",
    "iht": "Iterative Hard Thresholding: every iteration of the pruning stage zeroes each layer's "
    "unimportant weights (they may grow back), then the mask is fixed and the network fine-tuned.",
    "l1": "One-shot L1-norm (magnitude) pruning of each layer, then fine-tuning of the sparse network.",
    "scratch": "A random mask at the target ratio, fixed from the start, and the sparse network trained "
    "from scratch.",
    "srp": "Structure-regularized pruning (SRP, Zhang et al. 2022), run with unstructured masks as in the "
    "paper.",
    "assl": "Aligned structured sparsity learning (ASSL, Zhang et al. 2021), run with unstructured masks as "
    "in the paper.",
    "dense": "The dense network, trained without pruning (reference).",
}


CITATION = """@inproceedings{wang2023iss,
  title     = {Iterative Soft Shrinkage Learning for Efficient Image Super-Resolution},
  author    = {Wang, Jiamian and Wang, Huan and Zhang, Yulun and Fu, Yun and Tao, Zhiqiang},
  booktitle = {IEEE/CVF International Conference on Computer Vision (ICCV)},
  year      = {2023}
}"""


def model_card(entries: list[ZooEntry], repo_id: str) -> str:
    """README.md for the zoo repo: front matter, checkpoints, metrics, methods, training budgets, usage."""
    archs = sorted({e.arch for e in entries})
    methods = sorted({e.method for e in entries})
    front = ModelCardData(
        library_name="iss-sr", license="apache-2.0", pipeline_tag="image-to-image", model_name=repo_id,
        tags=["super-resolution", "image-super-resolution", "pruning", "sparse", *archs, *methods],
        eval_results=eval_results(entries) or None,
    ).to_yaml()  # fmt: skip
    sets = [s for s in BENCHMARK_ORDER if any(s in e.metrics for e in entries)]
    sets += sorted({s for e in entries for s in e.metrics} - set(sets))
    lines = [
        f"---\n{front}\n---",
        "# ISS-SR checkpoint zoo",
        "",
        "Sparse image super-resolution networks from *Iterative Soft Shrinkage Learning for Efficient Image "
        "Super-Resolution* (ICCV 2023), trained and published with "
        "ISS-SR (`python -m iss zoo push`). Each file is a safetensors checkpoint holding the "
        "kept weights and their compressed mask; `ratio` is the fraction of each pruned layer's weights "
        "removed.",
        "",
        "## Checkpoints",
        "",
        "| name | arch | scale | method | ratio | file | size | sha256 |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {e.name} | {e.arch} | x{e.scale} | {e.method} | {e.ratio:g} | `{e.file}` "
            f"| {human_size(e.size_bytes)} | `{e.sha256[:16]}…` |"
            for e in entries
        ),
        "",
        "## Metrics",
        "",
        "PSNR (dB) / SSIM on the Y channel (BT.601), border cropped by the scale, LR by MATLAB bicubic.",
        "",
        "| name | " + " | ".join(sets) + " |",
        "|---|" + "---|" * len(sets),
        *(f"| {e.name} | " + " | ".join(metric_cell(e.metrics.get(s)) for s in sets) + " |" for e in entries),
        "",
        "## Methods",
        "",
        *(f"- **{m}**: {METHOD_DESCRIPTIONS.get(m, 'see the ISS-SR documentation.')}" for m in methods),
        "",
        "## Training configuration",
        "",
        "| name | " + " | ".join(_budget_keys(entries)) + " |",
        "|---|" + "---|" * len(_budget_keys(entries)),
        *(
            f"| {e.name} | " + " | ".join(_budget_field(e.budget, k) for k in _budget_keys(entries)) + " |"
            for e in entries
        ),
        "",
        "## Usage",
        "",
        "```python",
        "from iss import checkpoint, zoo",
        f'entry = next(e for e in zoo.load_zoo() if e.name == "{entries[0].name if entries else "..."}")',
        "model, meta = checkpoint.load(zoo.resolve(entry))  # download, check sha256, else bundled copy",
        "```",
        "",
        f"`zoo.json` in this repo ({repo_id}) is the manifest the files were published with. The training "
        "data (T91, BSD200, DIV2K) and the benchmark sets are for academic research only.",
        "",
        "## Citation",
        "",
        "```bibtex",
        CITATION,
        "```",
        "",
    ]
    return "\n".join(lines)


def eval_results(entries: Iterable[ZooEntry]) -> list[EvalResult]:
    """The card's ``model-index``: PSNR and SSIM (Y channel) of every checkpoint on every set it was measured
    on; the metric name says which checkpoint, the dataset which set at which scale."""
    return [
        EvalResult(
            task_type="image-to-image",
            task_name="Image super-resolution",
            dataset_type=name.lower(),
            dataset_name=f"{name} x{e.scale}",
            dataset_config=f"x{e.scale}",
            metric_type=metric,
            metric_value=values[metric],
            metric_name=f"{metric.upper()} (Y) {e.name}",
        )
        for e in entries
        for name, values in e.metrics.items()
        for metric in ("psnr", "ssim")
        if metric in values
    ]


def _budget_keys(entries: Iterable[ZooEntry]) -> list[str]:
    """Budget fields used by any entry, in first-seen order (``setups`` goes into the device's column)."""
    return list(dict.fromkeys(k for e in entries for k in e.budget if k != "setups"))


def _budget_field(budget: dict[str, Any], key: str) -> str:
    """One budget field as the model card shows it (the device with every way the cell trained)."""
    return device_text(budget) if key == "device" else str(budget.get(key, ""))


def stage_push(manifest: Path, repo_id: str, revision: str, folder: Path) -> list[Path]:
    """Write what ``zoo push`` uploads into ``folder``: the bundled files, README.md and zoo.json."""
    entries = load_zoo(manifest)
    if not entries:
        raise ValueError(f"{manifest}: the zoo has no entries to publish")
    for e in entries:
        if not e.bundled.is_file():
            raise FileNotFoundError(f"checkpoint {e.name}: no bundled file at {e.bundled} to publish")
        verify(e.bundled, e, origin="bundled copy")
    folder.mkdir(parents=True, exist_ok=True)
    for e in entries:
        shutil.copyfile(e.bundled, folder / e.file)
    (folder / "README.md").write_text(model_card(entries, repo_id))
    raw = json.loads(manifest.read_text())
    for item in raw["entries"]:
        item["hub"] = {"repo_id": repo_id, "revision": revision, "filename": item["file"]}
    (folder / "zoo.json").write_text(json.dumps(raw, indent=2) + "\n")
    return sorted(folder / name for name in ["README.md", "zoo.json", *(e.file for e in entries)])


def push_zoo(
    manifest: str | os.PathLike | None,
    repo_id: str,
    *,
    revision: str = "main",
    token: str | None = None,
    endpoint: str | None = None,
    private: bool | None = None,
) -> str:
    """Publish the bundled zoo to ``repo_id`` in one commit, pin the manifest to it; return the commit sha."""
    manifest = Path(manifest) if manifest is not None else DEFAULT_ZOO
    api = HfApi(endpoint=endpoint, token=token)
    with tempfile.TemporaryDirectory(prefix="iss-zoo-push-") as tmp:
        stage_push(manifest, repo_id, revision, Path(tmp))
        api.create_repo(repo_id, repo_type="model", exist_ok=True, private=private)
        if revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=tmp,
            revision=revision,
            commit_message="Publish the ISS-SR checkpoint zoo",
        )
    commit = info.oid
    pin_manifest(manifest, repo_id, commit)
    return commit


def pin_manifest(manifest: Path, repo_id: str, commit: str) -> None:
    """Point every entry's ``hub`` at ``repo_id`` at ``commit``, rewriting the manifest atomically."""
    raw = json.loads(manifest.read_text())
    for item in raw["entries"]:
        item["hub"] = {"repo_id": repo_id, "revision": commit, "filename": item["file"]}
    _write_manifest(manifest, raw)
