"""Zoo models for other tools: ``python -m iss export MODEL --format spandrel|onnx -o FILE``.

* ``spandrel``: the dense weights as a plain safetensors state dict under the official SwinIR key names, which
  spandrel (the loader of chaiNNer and OpenModelDB) detects as SwinIR and runs. spandrel has no EDSR and no
  CAT architecture, so only SwinIR-light models export this way.
* ``onnx``: the dense network as ONNX (opset 17), input ``lr`` and output ``sr`` both ``(N, 3, H, W)`` RGB
  in [0, 1], with N, H and W dynamic; every backbone exports.

Pruned weights are exported as exact zeros: these tools run the network dense, as ``iss.load(MODEL,
sparse=False)`` does.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from iss.archs.swinir import SwinIR
from iss.zoo import DEFAULT_ZOO
from iss.zoo.pretrained import load

__all__ = ["FORMATS", "ONNX_OPSET", "add_arguments", "export", "to_onnx", "to_spandrel"]

FORMATS = ("spandrel", "onnx")
ONNX_OPSET = 17


def export(
    model: str | os.PathLike, fmt: str, out: str | os.PathLike, *, manifest: str | os.PathLike | None = None
) -> Path:
    """Write zoo model (or checkpoint file) ``model`` to ``out`` in format ``fmt``; returns the path."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    net = load(model, sparse=False, manifest=manifest)
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"{out} is a folder; give the file to write, e.g. {out / Path(str(model)).stem}")
    out.parent.mkdir(parents=True, exist_ok=True)
    return to_spandrel(net, out) if fmt == "spandrel" else to_onnx(net, out)


def to_spandrel(net: nn.Module, out: Path) -> Path:
    """Save a SwinIR's dense state dict (official key names, every buffer) as safetensors for spandrel."""
    if not isinstance(net, SwinIR):
        raise ValueError(
            f"spandrel has no {type(net).__name__} architecture (it has SwinIR, not EDSR or CAT); "
            "export this model with --format onnx"
        )
    state = {k: v.detach().contiguous().cpu() for k, v in net.state_dict().items()}
    save_file(state, _temporary(out), metadata={"format": "pt"})
    os.replace(_temporary(out), out)
    return out


def to_onnx(net: nn.Module, out: Path, *, opset: int = ONNX_OPSET) -> Path:
    """Export ``net`` to ONNX with dynamic batch, height and width (traced on a 1x3x24x20 input)."""
    example = torch.rand(1, 3, 24, 20)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the tracer's notes on Python-level shape arithmetic
        torch.onnx.export(
            net.eval(), (example,), _temporary(out), dynamo=False, opset_version=opset,
            input_names=["lr"], output_names=["sr"],
            dynamic_axes={"lr": {0: "batch", 2: "height", 3: "width"},
                          "sr": {0: "batch", 2: "scaled_height", 3: "scaled_width"}},
        )  # fmt: skip
    os.replace(_temporary(out), out)
    return out


def _temporary(out: Path) -> Path:
    """Where a file is written before it replaces ``out``: a failed export leaves nothing half-written."""
    return out.with_name(f".{out.name}.tmp")


# --------------------------------------------------------------------------------------------- export command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``export MODEL --format spandrel|onnx -o FILE [--manifest PATH]``."""
    parser.add_argument(
        "model", metavar="MODEL", help="a zoo name (`python -m iss zoo list`) or an ISS-SR .safetensors file"
    )
    parser.add_argument(
        "--format", choices=FORMATS, required=True,
        help="spandrel: safetensors state dict for chaiNNer/spandrel (SwinIR only); onnx: ONNX, dynamic size",
    )  # fmt: skip
    parser.add_argument("-o", "--out", type=Path, required=True, metavar="FILE", help="file to write")
    parser.add_argument("--manifest", type=Path, default=None, help=f"zoo manifest (default {DEFAULT_ZOO})")


def run(args: argparse.Namespace) -> int:
    """Export one model and say where it went."""
    path = export(args.model, args.format, args.out, manifest=args.manifest)
    print(f"wrote {path} ({args.format}, {path.stat().st_size / 1e6:.1f} MB)")
    return 0
