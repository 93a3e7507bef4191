"""``python -m iss export``: spandrel detects and runs the SwinIR state dict, onnxruntime runs the ONNX of
every backbone at sizes other than the traced one, and both give what ``iss.load(MODEL)`` gives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch
from common import TINY_ARCHS, masked

import iss
from iss.cli import main

pytestmark = pytest.mark.usefixtures("isolated_hub", "offline")


def _spandrel():
    """spandrel, or a skip saying why it cannot be imported here (it imports torchvision, whose compiled ops
    must match the installed torch)."""
    try:
        import spandrel
    except Exception as e:  # torchvision built for another torch raises RuntimeError, not ImportError
        pytest.skip(f"spandrel cannot be imported with this torch: {type(e).__name__}: {e}")
    return spandrel


def _tiny_checkpoint(arch: str, folder: Path, scale: int = 2) -> Path:
    """A pruned tiny model of ``arch`` saved as an ISS-SR checkpoint (what ``iss.load`` reads by path)."""
    torch.manual_seed(0)
    model = masked(iss.archs.build(arch, scale, **TINY_ARCHS[arch]), ratio=0.9)
    meta = {"arch": arch, "scale": scale, "arch_kwargs": TINY_ARCHS[arch], "method": "scratch", "ratio": 0.9}
    return iss.checkpoint.save(model, folder / f"{arch}.safetensors", meta)


@pytest.mark.parametrize("arch", sorted(TINY_ARCHS))
def test_onnx_has_dynamic_size_and_matches_iss_load(arch: str, tmp_path: Path) -> None:
    source = _tiny_checkpoint(arch, tmp_path)
    assert main(["export", str(source), "--format", "onnx", "-o", str(tmp_path / "m.onnx")]) == 0
    reference = iss.load(source, sparse=False)
    session = onnxruntime.InferenceSession(tmp_path / "m.onnx", providers=["CPUExecutionProvider"])
    for shape in [(1, 3, 24, 20), (2, 3, 17, 31), (1, 3, 40, 12)]:  # the traced size, then others
        x = torch.rand(shape, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            expected = reference(x).numpy()
        (out,) = session.run(None, {"lr": x.numpy()})
        assert out.shape == expected.shape == (shape[0], 3, 2 * shape[2], 2 * shape[3])
        np.testing.assert_allclose(out, expected, atol=1e-4)  # float32 kernels in another order


def test_onnx_of_a_zoo_model_matches_iss_load(tmp_path: Path) -> None:
    name = "swinir-light_x4_iss-p_r0.95"
    assert main(["export", name, "--format", "onnx", "-o", str(tmp_path / "m.onnx")]) == 0
    session = onnxruntime.InferenceSession(tmp_path / "m.onnx", providers=["CPUExecutionProvider"])
    x = torch.rand(1, 3, 19, 26, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected = iss.load(name, sparse=False)(x).numpy()
    np.testing.assert_allclose(session.run(None, {"lr": x.numpy()})[0], expected, atol=1e-4)


@pytest.mark.parametrize("source", ["tiny", "swinir-light_x4_iss-p_r0.95"])
def test_spandrel_detects_swinir_and_gives_what_iss_load_gives(source: str, tmp_path: Path) -> None:
    spandrel = _spandrel()
    model = _tiny_checkpoint("swinir-light", tmp_path) if source == "tiny" else source
    out = tmp_path / "swinir.safetensors"
    assert main(["export", str(model), "--format", "spandrel", "-o", str(out)]) == 0
    descriptor = spandrel.ModelLoader().load_from_file(out)
    assert descriptor.architecture.id == "SwinIR"
    assert descriptor.scale == iss.load(model).scale
    x = torch.rand(1, 3, 21, 30, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        torch.testing.assert_close(
            descriptor.model.eval()(x), iss.load(model, sparse=False)(x), atol=1e-5, rtol=0
        )


@pytest.mark.parametrize("arch", ["edsr-l", "cat-r"])
def test_spandrel_export_of_other_backbones_is_one_line(
    arch: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _tiny_checkpoint(arch, tmp_path)
    assert main(["export", str(source), "--format", "spandrel", "-o", str(tmp_path / "x.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "spandrel has no" in err and "--format onnx" in err
    assert not list(tmp_path.glob("*x.safetensors*"))
