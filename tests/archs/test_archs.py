"""Backbones: official parameter counts and key layouts, any-size forward, official-checkpoint loading."""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_type_hints

import pytest
import torch
from common import TINY_ARCHS
from torch import nn

from iss import archs
from iss.archs.common import (
    pad_to_multiple,
    relative_position_index,
    shifted_window_mask,
    window_partition,
    window_reverse,
)

# All nn.Parameters of the official models (reference notes, measured on the official code).
PARAMS = {
    "swinir-light": {2: 910_152, 3: 918_267, 4: 929_628},
    "edsr-l": {2: 40_729_603, 3: 43_680_003, 4: 43_089_923},
    "edsr-baseline": {2: 1_369_859, 3: 1_554_499, 4: 1_517_571},
    "cat-r": {2: 16_456_103, 3: 16_640_743, 4: 16_603_815},
}


def tiny(name: str, scale: int, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return archs.build(name, scale, **TINY_ARCHS[name]).eval()


def meta_build(name: str, scale: int) -> nn.Module:
    """Full-size model with parameters on the meta device: shapes only, built in milliseconds."""
    with torch.device("meta"):
        return archs.build(name, scale)


def test_registry_names() -> None:
    assert archs.list_archs() == ["cat-r", "edsr-l", "edsr-baseline", "swinir-light"]
    assert set(TINY_ARCHS) == set(archs.list_archs()) == set(PARAMS)


@pytest.mark.parametrize("name", archs.list_archs())
@pytest.mark.parametrize("scale", [2, 3, 4])
def test_parameter_count_matches_official(name: str, scale: int) -> None:
    model = meta_build(name, scale)
    assert sum(p.numel() for p in model.parameters()) == PARAMS[name][scale]
    assert model.scale == scale


@pytest.mark.parametrize("name", archs.list_archs())
@pytest.mark.parametrize("scale", [0, 1, 5, 8, "2"])
def test_unsupported_scale_raises(name: str, scale: object) -> None:
    with pytest.raises(ValueError, match="scale"):
        archs.build(name, scale)


def test_unknown_name_and_override() -> None:
    with pytest.raises(KeyError, match="swinir-light"):
        archs.build("swinir", 2)
    with pytest.raises(TypeError):
        archs.build("edsr-baseline", 2, num_blocks=3)


@pytest.mark.parametrize("name", archs.list_archs())
@pytest.mark.parametrize("scale", [2, 3, 4])
def test_forward_any_size(name: str, scale: int) -> None:
    model = tiny(name, scale)
    assert model.scale == scale
    with torch.no_grad():
        for h, w in [(7, 13), (3, 2)]:
            y = model(torch.rand(1, 3, h, w))
            assert y.shape == (1, 3, scale * h, scale * w)
            assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", archs.list_archs())
def test_backward_reaches_every_parameter(name: str) -> None:
    model = tiny(name, 2).train()
    model(torch.rand(2, 3, 9, 10)).abs().mean().backward()
    # CAT's position-bias MLP ends in a bias that adds one constant to every logit of a head: softmax
    # ignores it, so its gradient is zero up to rounding (sometimes exactly). It must still get a gradient.
    shift_invariant = {k for k, _ in model.named_parameters() if k.endswith("pos.pos3.2.bias")}
    missing = [
        k
        for k, p in model.named_parameters()
        if p.grad is None or (k not in shift_invariant and not p.grad.abs().sum())
    ]
    assert not missing


@pytest.mark.parametrize(
    ("name", "multiple", "mode"), [("swinir-light", 8, "reflect"), ("cat-r", 16, "symmetric")]
)
def test_padding_is_cropped_back(name: str, multiple: int, mode: str) -> None:
    """A non-multiple input gives the crop of the output for the explicitly padded input."""
    model = tiny(name, 2)
    x = torch.rand(1, 3, 13, 21)
    with torch.no_grad():
        full = model(pad_to_multiple(x, multiple, mode))
        assert torch.allclose(model(x), full[..., :26, :42], atol=1e-6)


def test_pad_to_multiple_modes() -> None:
    x = torch.arange(3.0).view(1, 1, 1, 3).expand(1, 1, 3, 3)
    assert pad_to_multiple(x, 4, "reflect")[0, 0, 0].tolist() == [0, 1, 2, 1]
    assert pad_to_multiple(x, 4, "symmetric")[0, 0, 0].tolist() == [0, 1, 2, 2]
    assert pad_to_multiple(x, 8, "reflect")[0, 0, 0].tolist() == [
        0,
        1,
        2,
        2,
        1,
        0,
        0,
        1,
    ]  # too small to reflect
    assert pad_to_multiple(x, 3) is x


def test_relative_position_index_addresses_offsets() -> None:
    """Square windows: the index of (dy, dx) is (dy + 7) * 15 + (dx + 7), as in the official Swin code."""
    index = relative_position_index((8, 8))
    assert index.shape == (64, 64)
    assert index[0, 63] == 0 and index[63, 0] == 224 and (index.diagonal() == 112).all()
    assert index[9, 0] == (1 + 7) * 15 + (1 + 7)  # token 9 is (1, 1), token 0 is (0, 0)


def test_window_partition_roundtrip() -> None:
    x = torch.rand(2, 8, 12, 5)
    windows = window_partition(x, (4, 6))
    assert windows.shape == (2 * 2 * 2, 24, 5)
    assert torch.equal(windows[1], x[0, :4, 6:].reshape(24, 5))  # second window: top row, right half
    assert torch.equal(window_reverse(windows, (4, 6), (8, 12)), x)


def test_shifted_window_mask_regions() -> None:
    """Interior windows are unmasked; the bottom-right window splits into 4 regions of 4x4 tokens."""
    mask = shifted_window_mask((16, 16), (8, 8), (4, 4), torch.device("cpu"))
    assert mask.shape == (4, 64, 64)
    assert not mask[0].any()
    assert ((mask[3] == 0).sum(1) == 16).all()
    assert set(mask.unique().tolist()) == {-100.0, 0.0}
    rect = shifted_window_mask((16, 32), (4, 16), (2, 8), torch.device("cpu"))
    assert rect.shape == (8, 64, 64) and ((rect[-1] == 0).sum(1) == 16).all()


@pytest.mark.parametrize(("name", "other"), [("swinir-light", 32), ("cat-r", 32)])
def test_masks_for_other_sizes_match_stored_buffers(name: str, other: int) -> None:
    """The mask computed on the fly for a size equals the stored one of a model built for that size."""
    model = tiny(name, 2)
    same = archs.build(name, 2, img_size=other, **TINY_ARCHS[name]).eval()
    learned = {k: v for k, v in model.state_dict().items() if "attn_mask" not in k}
    same.load_state_dict(learned, strict=False)
    x = torch.rand(1, 3, other, other)
    with torch.no_grad():
        assert torch.allclose(model(x), same(x), atol=1e-6)


def test_swinir_light_layout() -> None:
    model = meta_build("swinir-light", 4)
    layers = [m for m in model.modules() if isinstance(m, nn.Conv2d | nn.Linear)]
    assert len(layers) == 103  # what the pruners see, as in the official code
    sd = model.state_dict()
    assert len(sd) == 366
    buffers = {k: v.shape for k, v in sd.items() if k.endswith(("attn_mask", "relative_position_index"))}
    assert len(buffers) == 36
    assert buffers["layers.3.residual_group.blocks.5.attn.relative_position_index"] == (64, 64)
    assert buffers["layers.0.residual_group.blocks.1.attn_mask"] == (64, 64, 64)
    assert "layers.0.residual_group.blocks.0.attn_mask" not in sd
    assert sd["layers.2.residual_group.blocks.4.attn.relative_position_bias_table"].shape == (225, 6)
    assert sd["upsample.0.weight"].shape == (48, 60, 3, 3)
    assert {"patch_embed.norm.weight", "conv_after_body.bias", "norm.bias", "layers.1.conv.weight"} <= set(sd)
    assert "mean" not in sd


def test_cat_r_layout() -> None:
    model = meta_build("cat-r", 4)
    sd = model.state_dict()
    assert len(sd) == 1720
    block = "layers.5.blocks.3."
    assert sd[block + "attns.0.rpe_biases"].shape == (217, 2)
    assert sd[block + "attns.1.relative_position_index"].shape == (64, 64)
    assert sd[block + "attn_mask_0"].shape == sd[block + "attn_mask_1"].shape == (64, 64, 64)
    assert "layers.5.blocks.2.attn_mask_0" not in sd
    assert sd[block + "get_v.weight"].shape == (180, 1, 3, 3)
    assert sd[block + "attns.0.pos.pos3.2.weight"].shape == (3, 5)
    expected = {"before_RG.1.weight", "conv_before_upsample.0.weight", "upsample.2.weight", "conv_last.bias"}
    assert expected <= set(sd)


def test_cat_buffers_match_official_construction() -> None:
    """rpe_biases rows enumerate (dy, dx) row-major; the index addresses them as the official code does."""
    attn = tiny("cat-r", 2).layers[0].blocks[0].attns[1]  # V-Rwin: 16 rows x 4 columns
    assert attn.rpe_biases[0].tolist() == [-15.0, -3.0] and attn.rpe_biases[-1].tolist() == [15.0, 3.0]
    index = attn.relative_position_index
    # token 0 is (0, 0), token 5 is (1, 1): offset (-1, -1) from 5 to 0
    assert attn.rpe_biases[index[0, 5]].tolist() == [-1.0, -1.0]
    assert attn.rpe_biases[index[5, 0]].tolist() == [1.0, 1.0]


def test_edsr_layout() -> None:
    sd = meta_build("edsr-l", 4).state_dict()
    assert len(sd) == 2 + 32 * 4 + 2 + 4 + 2
    assert sd["body.31.conv2.weight"].shape == (256, 256, 3, 3)
    assert sd["upsample.2.weight"].shape == (1024, 256, 3, 3)
    assert {"conv_first.bias", "conv_after_body.weight", "conv_last.weight"} <= set(sd)


@pytest.mark.parametrize("name", ["swinir-light", "cat-r"])
def test_drop_path_only_in_training(name: str) -> None:
    torch.manual_seed(0)
    model = archs.build(name, 2, drop_path_rate=0.5, **TINY_ARCHS[name])
    x = torch.rand(8, 3, 8, 8)
    with torch.no_grad():
        assert not torch.equal(model.train()(x), model(x))
        assert torch.equal(model.eval()(x), model(x))


def _to_edsr_pytorch(state_dict: dict[str, torch.Tensor], num_block: int) -> dict[str, torch.Tensor]:
    """Our (BasicSR) names -> EDSR-PyTorch names, plus its frozen MeanShift convs."""
    rules = [
        (r"^conv_first\.", "head.0."),
        (r"^body\.(\d+)\.conv([12])\.", lambda m: f"body.{m[1]}.body.{2 * int(m[2]) - 2}."),
        (r"^conv_after_body\.", f"body.{num_block}."),
        (r"^upsample\.(\d+)\.", r"tail.0.\1."),
        (r"^conv_last\.", "tail.1."),
    ]
    out = {}
    for key, value in state_dict.items():
        for pattern, repl in rules:
            key = re.sub(pattern, repl, key)
        out[key] = value
    for name, sign in (("sub_mean", -1), ("add_mean", 1)):
        out[f"{name}.weight"] = torch.eye(3).view(3, 3, 1, 1)
        out[f"{name}.bias"] = sign * 255 * torch.tensor([0.4488, 0.4371, 0.4040])
    return out


@pytest.mark.parametrize(
    ("name", "wrap"),
    [
        ("swinir-light", lambda sd, n: {"params": {f"module.{k}": v for k, v in sd.items()}}),
        ("cat-r", lambda sd, n: {"params_ema": sd, "params": {}}),
        ("edsr-baseline", lambda sd, n: {"params": sd}),
        ("edsr-l", lambda sd, n: _to_edsr_pytorch(sd, n)),
    ],
)
def test_load_official_roundtrip(tmp_path: Path, name: str, wrap) -> None:
    source, target = tiny(name, 4, seed=1), tiny(name, 4, seed=2)
    path = tmp_path / "official.pth"
    torch.save(wrap(source.state_dict(), TINY_ARCHS[name].get("num_block")), path)
    assert archs.load_official(target, path) is target
    x = torch.rand(1, 3, 9, 7)
    with torch.no_grad():
        assert torch.equal(source(x), target(x))


def test_load_official_rejects_mismatch_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "x2.pth"
    torch.save({"params": tiny("edsr-baseline", 2).state_dict()}, path)
    with pytest.raises(ValueError, match="does not fit"):
        archs.load_official(tiny("edsr-baseline", 4), path)
    with pytest.raises(FileNotFoundError):
        archs.load_official(tiny("edsr-baseline", 2), tmp_path / "absent.pth")
    torch.save({"params": [1, 2]}, path)
    with pytest.raises(ValueError, match="no state dict"):
        archs.load_official(tiny("edsr-baseline", 2), path)


_UNPICKLED: list[str] = []


def _record_unpickling() -> dict:
    _UNPICKLED.append("ran")
    return {}


class _Payload:
    """Unpickling this calls a function: exactly what weights_only must refuse."""

    def __reduce__(self):
        return (_record_unpickling, ())


def test_load_official_refuses_code_in_pickle(tmp_path: Path) -> None:
    path = tmp_path / "evil.pth"
    torch.save({"params": tiny("edsr-baseline", 2).state_dict(), "extra": _Payload()}, path)
    with pytest.raises(ValueError, match="refusing"):
        archs.load_official(tiny("edsr-baseline", 2), path)
    assert not _UNPICKLED


def _worst_options(name: str) -> dict:
    """Every option ``name`` declares, at the top of its sane range (sequences at their longest)."""
    options = get_type_hints(archs.ARCHS.get(name))["return"].OPTIONS
    top = {key: o.kind(o.high) if o.kind is not bool else True for key, o in options.items()}
    return {key: [top[key]] * o.max_len if o.max_len else top[key] for key, o in options.items()}


@pytest.mark.parametrize("name", archs.list_archs())
def test_sane_option_ranges_bound_the_model_size(name: str) -> None:
    """Whatever a checkpoint's arch_kwargs say within the ranges, the model stays small."""
    worst = _worst_options(name)
    archs.check_overrides(name, worst)
    with torch.device("meta"):  # sizes only: nothing is allocated for parameters
        model = archs.build(name, 4, **worst)
    size = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    assert size < 400e6, f"{name} at the top of every range holds {size / 1e6:.0f} MB"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"embed_dim": 6000}, "embed_dim = 6000 is outside its sane range [1, 240]"),
        ({"depths": [2] * 20}, "depths must be a list of 1 to 8 values"),
        ({"img_range": float("nan")}, "img_range = nan is outside"),
        ({"qkv_bias": 1}, "qkv_bias must be bool"),
        ({"embed_dim": 12.5}, "embed_dim must be int"),
        ({"colour": "red"}, "swinir-light has no option colour; it takes img_size"),
        (["embed_dim"], "options must be a JSON object"),
    ],
)
def test_check_overrides_refuses_unknown_or_insane_options(overrides, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        archs.check_overrides("swinir-light", overrides)
    archs.check_overrides("swinir-light", {"embed_dim": 12, "depths": [2], "num_heads": [2], "mlp_ratio": 2})
    for name, tiny in TINY_ARCHS.items():  # the tests' tiny configurations are sane too
        archs.check_overrides(name, {k: list(v) if isinstance(v, tuple) else v for k, v in tiny.items()})
