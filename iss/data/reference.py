"""The numbers every result is held against, shipped as package data: the paper's tables and bicubic.

``paper_results.json`` holds Tables 1-5 of the paper (``rows`` of arch, scale, ratio, method, table and
PSNR/SSIM per set); ``bicubic_x{2,3,4}.json`` hold MATLAB-bicubic Y PSNR/SSIM per benchmark set, as
``python -m iss eval --model bicubic --scale S --json iss/data/bicubic_xS.json`` writes them.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any


def paper_results() -> dict[str, Any]:
    """The paper's Tables 1-5 (``{"rows": [...]}``)."""
    return _read("paper_results.json")


def paper_cells() -> list[dict[str, Any]]:
    """The paper's rows a zoo cell is held against: its benchmark Tables 1-4. Table 5, the ablation, trained
    at batch 16 for 300,000 iterations, and its x3/x4 rows are not at the scales it prints (x4 Set5 35.86)."""
    return [row for row in paper_results()["rows"] if row["table"] != 5]


def bicubic_results(scale: int) -> dict[str, dict[str, float]]:
    """Bicubic PSNR/SSIM per benchmark set at ``scale`` (empty for a scale without a file)."""
    name = f"bicubic_x{int(scale)}.json"
    return _read(name) if resources.files(__package__).joinpath(name).is_file() else {}


def _read(name: str) -> Any:
    return json.loads(resources.files(__package__).joinpath(name).read_text())
