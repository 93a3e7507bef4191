"""benchmarks/fusion_ab.py: a sparsified model with and without one fusion, equal outputs, timed."""

from __future__ import annotations

import re

import pytest
import torch
from common import TINY_ARCHS, load_benchmark, masked

from iss import archs
from iss.sparse import kernels


@pytest.fixture(autouse=True)
def _needs_c() -> None:
    if kernels.load() is None:
        pytest.skip("no C compiler: the fusions need the compiled kernels (CI installs gcc)")


def test_without_unread_channels_the_upsampler_computes_every_channel() -> None:
    model = masked(archs.build("edsr-l", 2, **{**TINY_ARCHS["edsr-l"], "num_feat": 32}), 0.99)
    plain = load_benchmark("fusion_ab").without("unread-channels", model)
    assert plain.upsample[-2].conv.out_channels == 4 * 32 and plain.conv_last.in_channels == 32
    with pytest.raises(ValueError, match="unknown fusion"):
        load_benchmark("fusion_ab").without("everything", model)


def test_patch_embed_run_prints_both_models(capsys: pytest.CaptureFixture[str]) -> None:
    torch_threads = torch.get_num_threads()
    args = ["swinir-light", "0.95", "16", "--without", "patch-embed", "--reps", "1", "--pause", "0"]
    load_benchmark("fusion_ab").main(args)
    torch.set_num_threads(torch_threads)
    out = capsys.readouterr().out
    assert re.search(r"^  with +\d+\.\d.*patch_embed \d", out, re.M)
    assert re.search(r"^  without +\d+\.\d.*patch_embed \d", out, re.M)


def test_without_cat_block_the_blocks_are_plain() -> None:
    from iss.archs.cat import CATBlock
    from iss.sparse.fused import FusedCATBlock

    model = masked(archs.build("cat-r", 2, **TINY_ARCHS["cat-r"]), 0.95)
    plain = load_benchmark("fusion_ab").without("cat-block", model)
    assert not any(isinstance(m, FusedCATBlock) for m in plain.modules())
    assert sum(isinstance(m, CATBlock) for m in plain.modules()) == 2
    x = torch.rand(1, 3, 16, 16)
    with torch.inference_mode():
        torch.testing.assert_close(plain(x), model(x), atol=1e-4, rtol=0)
