"""Every method's masks and weights after 20 training steps on a tiny EDSR-L, pinned by digest.

The digests were taken from the implementation the tests in ``test_pruning.py`` check; a change to the
pruners' code that alters any selection, shrink, penalty or stage switch changes one of them. The steps run
in float64 and weights are compared to four decimals, masks bit for bit: float32's rounding, which differs
between CPUs' kernels, can move a weight across a fourth decimal; float64's stays far below it.
"""

from __future__ import annotations

import hashlib

import pytest
import torch
from test_pruning import MODE_CASES, RATIO, sr_step, tiny_edsr

import iss.pruning as pruning

PINNED = {
    "iss-p": "78005ac467dc420c",
    "iht": "d3a8cd9438387f81",
    "iss-r": "963a9183c22a9280",
    "srp": "bc096b7acc2d2c93",
    "assl": "0d4b6ba9f5234dd3",
    "l1": "59403a1460695238",
    "scratch": "ca319bb7d104c162",
    "iss-p-nm": "f3eaec8eeb4f311b",
    "iht-nm": "1bb5387d51e630ae",
    "iss-r-nm": "f6b802d29522c854",
    "srp-nm": "3521773f7f68d284",
    "assl-nm": "153ad8690a3cdf8f",
    "l1-nm": "c9cb482164370250",
    "scratch-nm": "aa7c51387b91b11a",
}


def digest(model: torch.nn.Module, pruner: pruning.Pruner) -> str:
    """sha256 of the stage, iteration, masks (bits) and weights (to four decimals)."""
    h = hashlib.sha256(f"{pruner.stage} {pruner.iteration}".encode())
    for name, mask in pruner.masks.items():
        h.update(name.encode() + mask.flatten().numpy().tobytes())
    for name, p in model.state_dict().items():
        h.update(name.encode() + torch.round(p.double() * 1e4).to(torch.int64).numpy().tobytes())
    return h.hexdigest()[:16]


def case_id(method: str, options: dict) -> str:
    return method + ("-nm" if "nm" in options else "")


@pytest.mark.parametrize(("method", "options"), MODE_CASES, ids=[case_id(*c) for c in MODE_CASES])
def test_twenty_steps_of_each_method_match_their_pinned_digest(method, options):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = tiny_edsr().double()
        pruner = pruning.build(method, model, RATIO, window=4, **options)
        opt = torch.optim.Adam(model.parameters(), 1e-2)
        for i in range(20):
            sr_step(model, opt, pruner, seed=i)
    finally:
        torch.set_num_threads(threads)
    assert digest(model, pruner) == PINNED[case_id(method, options)]
