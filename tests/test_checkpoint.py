"""Sparse safetensors checkpoints: round trip, exact sparsity, integrity checks, size at ratio 0.95."""

from __future__ import annotations

import io
import json
import math
import re
import time
from pathlib import Path

import pytest
import torch
from common import TINY, as_format_1, rewrite_checkpoint
from safetensors.torch import save as st_save
from torch import nn

from iss import checkpoint


class TinySR(nn.Module):
    """A small conv + linear SR net with a derived buffer, built like an architecture from the registry."""

    def __init__(self, scale: int, width: int = 8) -> None:
        super().__init__()
        self.scale = scale
        self.head = nn.Conv2d(3, width, 3, padding=1)
        self.mix = nn.Linear(width, width)
        self.tail = nn.Conv2d(width, 3 * scale * scale, 3, padding=1)
        self.register_buffer("index", torch.arange(16).reshape(4, 4))  # recomputed on build: not stored

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.head(x)
        y = self.mix(y.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return nn.functional.pixel_shuffle(self.tail(y), self.scale)


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> nn.Module:
    """A TinySR whose masks prune 75% of each weight; checkpoint.load rebuilds TinySR."""
    monkeypatch.setattr(checkpoint, "_build_model", lambda arch, scale, kwargs: TinySR(scale, **kwargs))
    torch.manual_seed(0)
    model = TinySR(2, width=8)
    with torch.no_grad():
        for module in (model.head, model.mix, model.tail):
            w = module.weight
            k = int(0.75 * w.numel())
            threshold = w.abs().flatten().kthvalue(k).values
            w.mul_(w.abs() > threshold)
    return model


META = {
    "arch": "tiny",
    "scale": 2,
    "arch_kwargs": {"width": 8},
    "method": "iht",
    "ratio": 0.75,
    "alpha": None,
}


def _masks(model: nn.Module) -> dict[str, torch.Tensor]:
    return {f"{n}.weight": getattr(model, n).weight != 0 for n in ("head", "mix", "tail")}


def test_round_trip_is_exact_and_as_sparse(tiny: nn.Module, tmp_path) -> None:
    path = checkpoint.save(tiny, tmp_path / "m.safetensors", {**META, "metrics": {"Set5": {"psnr": 30.5}}})
    model, meta = checkpoint.load(path)
    for name, tensor in tiny.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    for name in ("head", "mix", "tail"):
        assert torch.equal(getattr(model, name).weight == 0, getattr(tiny, name).weight == 0)
    assert meta["arch"] == "tiny" and meta["scale"] == 2 and meta["ratio"] == 0.75 and meta["alpha"] is None
    assert meta["arch_kwargs"] == {"width": 8} and meta["metrics"] == {"Set5": {"psnr": 30.5}}
    assert meta["format_version"] == "3" and len(meta["sha256"]) == 64
    assert not model.training


def test_at_75_percent_pruned_masks_are_bitmasks(tiny: nn.Module, tmp_path) -> None:
    """1 bit per weight beats a byte per kept weight (2 bits per weight here)."""
    masks = _masks(tiny)
    path = checkpoint.save(tiny, tmp_path / "m.safetensors", META, masks)
    tensors, metadata = checkpoint.read(path)
    packed = tensors["tail.weight::mask"]
    assert packed.dtype == torch.uint8 and packed.numel() == (masks["tail.weight"].numel() + 7) // 8
    assert torch.equal(checkpoint.unpack_mask(packed, masks["tail.weight"].shape), masks["tail.weight"])
    assert tensors["tail.weight::values"].numel() == int(masks["tail.weight"].sum())
    assert "tail.weight" not in tensors and "tail.bias" in tensors
    assert "index" not in tensors and json.loads(metadata["derived"]) == ["index"]


def test_fp16_values_are_half_and_close(tiny: nn.Module, tmp_path) -> None:
    path = checkpoint.save(tiny, tmp_path / "m.safetensors", META, _masks(tiny), dtype="fp16")
    tensors, metadata = checkpoint.read(path)
    assert tensors["head.weight::values"].dtype == torch.float16 and metadata["values_dtype"] == "float16"
    model, _ = checkpoint.load(path)
    assert model.head.weight.dtype == torch.float32
    assert torch.equal(model.head.weight == 0, tiny.head.weight == 0)
    torch.testing.assert_close(model.head.weight, tiny.head.weight, rtol=1e-3, atol=1e-4)


def test_mask_that_drops_nonzero_weights_is_refused(tiny: nn.Module, tmp_path) -> None:
    masks = _masks(tiny)
    masks["head.weight"] = torch.zeros_like(masks["head.weight"])
    with pytest.raises(ValueError, match="non-zero values where its mask is False"):
        checkpoint.save(tiny, tmp_path / "m.safetensors", META, masks)
    with pytest.raises(KeyError, match=r"nope\.weight"):
        checkpoint.save(tiny, tmp_path / "m.safetensors", META, {"nope.weight": masks["mix.weight"]})


def test_tampered_file_fails_integrity_check(tiny: nn.Module, tmp_path) -> None:
    path = checkpoint.save(tiny, tmp_path / "m.safetensors", META)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # one bit of the last tensor's payload
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="failed its integrity check"):
        checkpoint.load(path)


@pytest.mark.parametrize(
    ("derived", "expected"),
    [(["index", "head.bias"], r"lists learned weights as derived: head\.bias"),
     (["index"], r"misses tensors that TinySR needs: head\.bias")],
)  # fmt: skip
def test_a_rehashed_file_missing_a_weight_is_refused(tiny: nn.Module, tmp_path, derived, expected) -> None:
    """A forger drops a weight (and may call it derived), then re-hashes: refused, never
    loaded with the freshly built model's random values."""
    path = checkpoint.save(tiny, tmp_path / "m.safetensors", META)
    rewrite_checkpoint(path, drop=["head.bias"], meta={"derived": json.dumps(derived)})
    with pytest.raises(ValueError, match=expected):
        checkpoint.load(path)


def test_truncated_or_foreign_file_is_a_clear_error(tiny: nn.Module, tmp_path) -> None:
    path = checkpoint.save(tiny, tmp_path / "m.safetensors", META)
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        checkpoint.load(path)
    pickled = tmp_path / "p.safetensors"
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2)}, buffer)
    pickled.write_bytes(buffer.getvalue())
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        checkpoint.load(pickled)
    with pytest.raises(FileNotFoundError):
        checkpoint.load(tmp_path / "missing.safetensors")


def test_checkpoint_of_another_architecture_is_refused(tiny: nn.Module, tmp_path, monkeypatch) -> None:
    path = checkpoint.save(tiny, tmp_path / "m.safetensors", META)
    monkeypatch.setattr(checkpoint, "_build_model", lambda arch, scale, kwargs: nn.Conv2d(3, 8, 3))
    with pytest.raises(ValueError, match=r"does not have: head\.bias"):
        checkpoint.load(path)


def test_meta_needs_arch_and_scale(tiny: nn.Module, tmp_path) -> None:
    with pytest.raises(ValueError, match="arch"):
        checkpoint.save(tiny, tmp_path / "m.safetensors", {"scale": 2})
    with pytest.raises(ValueError, match="dtype"):
        checkpoint.save(tiny, tmp_path / "m.safetensors", META, dtype="int8")


def test_pack_unpack_odd_length() -> None:
    mask = torch.rand(3, 5, 7) > 0.5
    packed = checkpoint.pack_mask(mask)
    assert packed.numel() == (105 + 7) // 8
    assert torch.equal(checkpoint.unpack_mask(packed, mask.shape), mask)


@pytest.mark.parametrize(
    "kept",
    [[], [0], [1199], [254], [255], [256], [0, 255, 510, 511], [300, 1199], list(range(1200))],
    ids=["none", "first", "last", "run254", "run255", "run256", "escapes", "long-runs", "all"],
)
def test_gaps_round_trip_every_run_length(kept: list[int]) -> None:
    """Runs of 254, 255 and 256 pruned weights (one 255 byte, then the rest), both ends, none, all."""
    mask = torch.zeros(1200, dtype=torch.bool)
    mask[kept] = True
    codes = checkpoint.pack_gaps(mask.view(30, 40))
    assert codes.dtype == torch.uint8 and int((codes != 255).sum()) == len(kept)
    assert torch.equal(checkpoint.unpack_gaps(codes, (30, 40)), mask.view(30, 40))
    assert checkpoint.pack_gaps(torch.zeros(600, dtype=torch.bool)).numel() == 0  # trailing runs: implicit
    assert checkpoint.pack_gaps(mask[:1]).numel() == int(mask[0])


def test_at_99_percent_pruned_masks_are_gaps_a_tenth_of_the_bitmask(tmp_path) -> None:
    """The format-3 code: at high ratios one byte per kept weight instead of one bit per weight; the loaded
    weights are identical."""
    torch.manual_seed(0)
    conv = nn.Conv2d(64, 64, 3)
    with torch.no_grad():
        conv.weight.mul_(torch.rand_like(conv.weight) > 0.99)
    code = checkpoint.encode_mask("weight", conv.weight != 0)
    assert list(code) == ["weight::gaps"]
    assert code["weight::gaps"].numel() < checkpoint.pack_mask(conv.weight != 0).numel() / 10
    assert torch.equal(checkpoint.decode_mask("weight", code, conv.weight.shape), conv.weight != 0)


def test_gaps_past_the_end_or_two_masks_are_refused(swinir_file: str) -> None:
    tensors, _ = checkpoint.read(swinir_file)
    name = next(k for k in tensors if k.endswith(checkpoint.MASK_SUFFIX)).removesuffix(checkpoint.MASK_SUFFIX)
    numel = tensors[name + checkpoint.MASK_SUFFIX].numel() * 8
    rewrite_checkpoint(
        swinir_file, tensors={name + checkpoint.GAPS_SUFFIX: torch.tensor([0], dtype=torch.uint8)}
    )
    with pytest.raises(ValueError, match=f"{re.escape(name)} has two masks"):
        checkpoint.load(swinir_file)
    tensors, metadata = checkpoint.read(swinir_file)
    del tensors[name + checkpoint.MASK_SUFFIX]
    tensors[name + checkpoint.GAPS_SUFFIX] = torch.full((numel // 255 + 2,), 255, dtype=torch.uint8)
    metadata["sha256"] = checkpoint.payload_sha256(tensors, metadata)  # re-signed, as a forger would
    Path(swinir_file).write_bytes(st_save(tensors, metadata=metadata))
    with pytest.raises(ValueError, match=r"mask codes cover \d+ weights, the weight has"):
        checkpoint.load(swinir_file)
    with pytest.raises(ValueError, match="mask codes cover"):
        checkpoint.read_masks(swinir_file)


def test_format_2_files_load_as_they_are_and_upgrade_to_gaps(tmp_path) -> None:
    """Format 2 (bitmasks only) is read without upgrading; ``upgrade`` re-codes its masks, same weights."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 32, 3), nn.Conv2d(32, 3, 3))
    with torch.no_grad():
        model[1].weight.mul_(torch.rand_like(model[1].weight) > 0.97)
    path = tmp_path / "old.safetensors"
    tensors = {"0.weight": model[0].weight.detach(), "0.bias": model[0].bias.detach()}
    tensors |= {
        "1.weight::mask": checkpoint.pack_mask(model[1].weight != 0),
        "1.bias": model[1].bias.detach(),
    }
    tensors["1.weight::values"] = model[1].weight.detach()[model[1].weight != 0]
    metadata = {"format_version": "2", "arch": "seq", "scale": "2", "arch_kwargs": "{}", "derived": "[]"}
    path.write_bytes(
        st_save(tensors, metadata=metadata | {"sha256": checkpoint.payload_sha256(tensors, metadata)})
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint, "_build_model", lambda arch, scale, kwargs: nn.Sequential(*model))
        before = checkpoint.load(path)[0].state_dict()
        assert checkpoint.upgrade(path) is True and checkpoint.upgrade(path) is False
        after = checkpoint.load(path)[0].state_dict()
    assert all(torch.equal(before[name], after[name]) for name in model.state_dict())
    assert torch.equal(after["1.weight"], model[1].weight)
    tensors, metadata = checkpoint.read(path)
    assert (
        metadata["format_version"] == "3" and "1.weight::gaps" in tensors and "1.weight::mask" not in tensors
    )


def test_an_unknown_format_is_refused(swinir_file: str) -> None:
    rewrite_checkpoint(swinir_file, meta={"format_version": "4"})
    with pytest.raises(ValueError, match="is in format '4'; this ISS-SR reads formats 2 and 3"):
        checkpoint.load(swinir_file)


def _swinir_light_x4_pruned(ratio: float) -> tuple[nn.Module, dict[str, torch.Tensor]]:
    """A real SwinIR-light x4 with the ``ceil(ratio * n)`` smallest |w| of every Conv2d/Linear zeroed."""
    archs = pytest.importorskip("iss.archs")
    torch.manual_seed(0)
    model = archs.build("swinir-light", 4)
    masks = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                w = module.weight
                k = math.ceil(ratio * w.numel())
                kept = torch.ones(w.numel(), dtype=torch.bool)
                kept[w.abs().flatten().argsort(stable=True)[:k]] = False
                masks[f"{name}.weight"] = kept.view_as(w)
                w.mul_(masks[f"{name}.weight"])
    return model, masks


@pytest.mark.slow
def test_swinir_light_at_095_is_a_tenth_of_dense(tmp_path) -> None:
    model, masks = _swinir_light_x4_pruned(0.95)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    params = {name for name, _ in model.named_parameters()}
    dense = len(st_save(state))  # the dense fp32 state dict (incl. SwinIR's attention-mask buffers)
    dense_params = len(st_save({k: v for k, v in state.items() if k in params}))  # learnable tensors only
    meta = {"arch": "swinir-light", "scale": 4, "method": "iht", "ratio": 0.95}
    fp32 = checkpoint.save(model, tmp_path / "fp32.safetensors", meta, masks).stat().st_size
    fp16 = checkpoint.save(model, tmp_path / "fp16.safetensors", meta, masks, dtype="fp16").stat().st_size
    print(
        f"dense state dict {dense} B, parameters only {dense_params} B; sparse fp32 {fp32} B "
        f"({fp32 / dense:.3f} / {fp32 / dense_params:.3f}), fp16 {fp16} B ({fp16 / dense:.3f} / "
        f"{fp16 / dense_params:.3f})"
    )
    assert fp32 <= dense / 10 and fp16 <= dense_params / 10
    assert fp16 < 0.08 * dense_params  # format 3's run-length masks (bitmasks alone: 9.2%)
    loaded, _ = checkpoint.load(tmp_path / "fp32.safetensors")
    for name, mask in masks.items():  # exactly as sparse as saved, layer by layer
        assert torch.equal(loaded.state_dict()[name] != 0, mask), name
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


# ---------------------------------------------------------------------------- tampered, re-signed, old files


@pytest.fixture
def swinir_file(tmp_path) -> str:
    """A tiny pruned SwinIR-light x2 checkpoint (a registered architecture, so its metadata is checked)."""
    from iss import archs, pruning

    torch.manual_seed(0)
    model = archs.build("swinir-light", 2, **TINY)
    masks = pruning.build("iht", model, 0.5, prune_iters=0).masks
    meta = {"arch": "swinir-light", "scale": 2, "arch_kwargs": TINY, "method": "iht", "ratio": 0.5}
    return str(checkpoint.save(model, tmp_path / "tiny.safetensors", meta, masks))


def test_an_edited_header_fails_the_integrity_check(swinir_file: str) -> None:
    """The hash covers the metadata, so img_range 255 can no longer slip in."""
    rewrite_checkpoint(
        swinir_file, meta={"arch_kwargs": json.dumps({"embed_dim": 12, "img_range": 255})}, resign=False
    )
    with pytest.raises(ValueError, match="failed its integrity check"):
        checkpoint.load(swinir_file)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"meta": {"arch_kwargs": '{"embed_dim": 6000}'}}, "embed_dim = 6000 is outside its sane range"),
        ({"meta": {"arch_kwargs": '{"embed_dim": 12, "colour": 1}'}}, "has no option colour"),
        ({"meta": {"arch_kwargs": "[1, 2]"}}, "options must be a JSON object"),
        ({"meta": {"arch": "vgg"}}, "unknown architecture 'vgg'"),
        ({"meta": {"scale": "8"}}, "scale 8 is not 2, 3 or 4"),
        ({"mask_dtype": torch.int16}, "is torch.int16"),
        ({"values_dtype": torch.float64}, "is stored as torch.float64; expected float32 or float16"),
        ({"nan": True}, "holds NaN or infinite values"),
    ],
)
def test_resigned_malformed_files_are_refused_before_anything_is_built(
    swinir_file: str, edit, message
) -> None:
    """A forger can recompute the sha256; the checks on what the file describes still hold, at once."""
    tensors, _ = checkpoint.read(swinir_file)
    mask_key = next(k for k in tensors if k.endswith(checkpoint.MASK_SUFFIX))
    values_key = mask_key.replace(checkpoint.MASK_SUFFIX, checkpoint.VALUES_SUFFIX)
    changed = {}
    if "mask_dtype" in edit:
        changed[mask_key] = tensors[mask_key].to(edit["mask_dtype"])
    if "values_dtype" in edit:
        changed[values_key] = tensors[values_key].to(edit["values_dtype"])
    if "nan" in edit:
        changed[values_key] = torch.full_like(tensors[values_key], float("nan"))
    rewrite_checkpoint(swinir_file, tensors=changed, meta=edit.get("meta"))
    start = time.perf_counter()
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        checkpoint.load(swinir_file)
    assert time.perf_counter() - start < 2.0 and str(err.value).startswith(f"checkpoint {swinir_file}")


def test_format_1_files_get_a_clear_error_and_upgrade_exactly(swinir_file: str) -> None:
    tensors, _ = checkpoint.read(swinir_file)
    before = checkpoint.load(swinir_file)[0].state_dict()
    as_format_1(Path(swinir_file))
    with pytest.raises(ValueError, match=r"is in format 1, whose sha256 does not cover its metadata"):
        checkpoint.load(swinir_file)
    assert checkpoint.upgrade(swinir_file) is True
    after = checkpoint.load(swinir_file)[0].state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert checkpoint.read(swinir_file)[0].keys() == tensors.keys()
    assert checkpoint.upgrade(swinir_file) is False  # rerunnable: already current


def test_a_file_without_its_sha_says_so(swinir_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not "format_version '1', expected '1'"."""
    tensors, metadata = checkpoint.read(swinir_file)
    del metadata["sha256"]
    Path(swinir_file).write_bytes(st_save(tensors, metadata=metadata))
    with pytest.raises(ValueError, match=r"not an ISS-SR sparse checkpoint \(no sha256 in its metadata\)"):
        checkpoint.load(swinir_file)
    with pytest.raises(ValueError, match=r"no sha256 in its metadata"):
        checkpoint.upgrade(swinir_file)
    monkeypatch.setattr(checkpoint, "MAX_FILE_BYTES", 1000)
    with pytest.raises(ValueError, match="larger than 0 MiB; refusing to read it"):
        checkpoint.load(swinir_file)
