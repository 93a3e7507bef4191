"""Compact sparse checkpoints in safetensors: a compressed mask plus the kept values for every pruned weight.

On-disk format (``format_version`` 3), one safetensors file:

- A pruned weight ``W`` named ``<name>`` (a layer in ``masks``, or, when ``masks`` is None, every
  Conv2d/Linear weight holding at least one zero) is stored as two tensors:

  - its flattened (row-major) bool mask, True = kept, as ``uint8`` in whichever of two codes is smaller:
    ``<name>::mask``, bit-packed 8 to a byte with the most significant bit first (``numpy.packbits`` order),
    zero-padded to a whole byte (1 bit per weight: the smaller below ~88% pruned); or ``<name>::gaps``, one
    byte per kept weight giving the number of pruned weights before it, where a byte 255 stands for 255
    pruned weights and no kept one (about 8 bits per kept weight: 0.4 bits per weight at 95% pruned,
    0.09 at 99%);
  - ``<name>::values``: the kept entries of ``W.flatten()`` in mask order.

  Pruned positions load as exact zeros, so a loaded model is exactly as sparse as the saved one.
- Every other parameter and buffer is stored dense under its ``state_dict`` name, except buffers the
  architecture recomputes identically when it is built (e.g. SwinIR's relative position index and
  shifted-window attention mask): their names are listed in the metadata field ``derived`` and they are taken
  from the rebuilt model on load.
- Floating-point tensors (kept values and dense ones) are stored as ``float32`` or ``float16`` (``dtype``
  option, metadata ``values_dtype``) and loaded back in the model's own dtype.
- String metadata: ``format_version``, ``arch``, ``arch_kwargs`` (JSON of the ``iss.archs.build`` overrides),
  ``scale``, ``method``, ``ratio``, ``alpha``, ``iterations``, ``data``, ``metrics`` (JSON), ``values_dtype``,
  ``derived`` (JSON list), any extra fields (JSON), and ``sha256``: the SHA-256 taken over every tensor in
  sorted name order as ``name``, ``dtype``, ``shape`` and raw little-endian bytes, then over every other
  metadata field as compact JSON with sorted keys. ``load`` recomputes it: a corrupt or edited file (weights
  or metadata) raises ``ValueError`` rather than load wrong weights. Format 2 is format 3 without ``::gaps``
  and loads as it is; format 1 hashed the tensors only. :func:`upgrade` rewrites either as format 3 with the
  same weights.

Nothing is ever unpickled, and nothing is built from unchecked metadata: ``arch_kwargs`` must be options the
architecture declares, within their sane ranges (``iss.archs.check_overrides``), before the model is rebuilt
with ``iss.archs.build(arch, scale, **arch_kwargs)``; the weights must have the expected dtypes, be finite and
load with ``strict=True``. The sha256 detects corruption and edits, not a forger who recomputes it: files are
trusted through the zoo manifest's own sha256, which ``iss.zoo`` checks before a file is loaded.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save
from torch import nn

FORMAT_VERSION = 3
READABLE_FORMATS = ("2", "3")  # format 2: bitmasks only
MAX_FILE_BYTES = 1 << 30  # larger files are refused before being read (EDSR-L, the largest model, is ~170 MB)
MASK_SUFFIX = "::mask"  # bit-packed mask
GAPS_SUFFIX = "::gaps"  # run lengths of pruned weights before each kept one
VALUES_SUFFIX = "::values"
VALUE_DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
}

# Metadata fields with a fixed type; anything else in ``meta`` is stored as JSON.
_TEXT = ("arch", "method", "data")
_INT = ("scale", "iterations")
_FLOAT = ("ratio", "alpha")
_JSON = ("arch_kwargs", "metrics")
_RESERVED = ("format_version", "sha256", "values_dtype", "derived")


def save(
    model: nn.Module,
    path: str | os.PathLike,
    meta: dict[str, Any],
    masks: dict[str, torch.Tensor] | None = None,
    *,
    dtype: str | torch.dtype = torch.float32,
) -> Path:
    """Write ``model`` as a sparse safetensors checkpoint (format in the module docstring); returns the path.

    Args:
        meta: at least ``arch`` and ``scale``; ``arch_kwargs`` must be the overrides the model was built with.
        masks: weight name -> bool mask (True = kept), e.g. ``pruner.masks``. None: every Conv2d/Linear weight
            with a zero is stored sparse, with ``weight != 0`` as its mask.
        dtype: ``float32``/``float16`` (or ``"fp32"``/``"fp16"``) for every floating-point tensor.
    """
    value_dtype = _value_dtype(dtype)
    metadata = _encode_meta(meta)
    state = {name: t.detach().cpu() for name, t in model.state_dict().items()}
    masks = _default_masks(model) if masks is None else dict(masks)
    unknown = sorted(set(masks) - set(state))
    if unknown:
        raise KeyError(f"masks name weights the model does not have: {', '.join(unknown[:5])}")
    derived = _derived_buffers(model, metadata, masks)
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if name in masks:
            mask, values = _split(name, tensor, masks[name])
            tensors.update(encode_mask(name, mask))
            tensors[name + VALUES_SUFFIX] = values.to(value_dtype)
        elif name not in derived:
            tensors[name] = (tensor.to(value_dtype) if tensor.is_floating_point() else tensor).contiguous()
    metadata.update(
        format_version=str(FORMAT_VERSION),
        values_dtype=str(value_dtype).removeprefix("torch."),
        derived=json.dumps(sorted(derived)),
    )
    return _write(path, tensors, metadata)


def upgrade(path: str | os.PathLike) -> bool:
    """Rewrite a format-1 or format-2 checkpoint in place as the current format: the same weights and
    metadata, each mask in its smaller code; False if it is current already.

    The old file's sha256 is verified first and its metadata checked like ``load`` checks it, but format 1
    could not tell an edited header: upgrade only files you trust (e.g. pinned by a zoo manifest).
    """
    path = Path(path)
    tensors, metadata = _read_raw(path)
    if metadata.get("format_version") == "1":
        if payload_sha256(tensors) != metadata.get("sha256"):
            raise ValueError(
                f"checkpoint {path} is not an intact format-1 ISS-SR checkpoint; cannot upgrade it"
            )
    else:
        _verify(path, tensors, metadata)
        if metadata["format_version"] == str(FORMAT_VERSION):
            return False
    meta = _decode_meta(metadata)
    try:
        model = _build_model(meta.get("arch"), meta.get("scale"), meta.get("arch_kwargs", {}))
        for name, ref in model.state_dict().items():
            if name + MASK_SUFFIX in tensors:
                tensors.update(encode_mask(name, decode_mask(name, tensors, ref.shape)))
                if name + GAPS_SUFFIX in tensors:
                    del tensors[name + MASK_SUFFIX]
    except ValueError as e:
        raise ValueError(f"checkpoint {path}: {e}") from None
    _write(path, tensors, {**metadata, "format_version": str(FORMAT_VERSION)})
    return True


def _write(path: str | os.PathLike, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Path:
    """Write ``tensors`` and ``metadata`` (plus its sha256) atomically to ``path``."""
    metadata = {key: value for key, value in metadata.items() if key != "sha256"}
    metadata["sha256"] = payload_sha256(tensors, metadata)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(st_save(tensors, metadata=metadata))
    os.replace(tmp, path)
    return path


def load(path: str | os.PathLike, *, device: str | torch.device = "cpu") -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the model a checkpoint was saved from, verify its sha256 and load it strictly (eval mode).

    Any fault in the file (corrupt, edited, foreign, or describing a model outside the sane ranges) raises
    ``ValueError`` (``FileNotFoundError`` when it is missing) naming the file and what is wrong.
    """
    tensors, metadata = read(path)
    try:
        meta = _decode_meta(metadata)
        model = _build_model(meta.get("arch"), meta.get("scale"), meta.get("arch_kwargs", {}))
        model.load_state_dict(_state_dict(model, tensors, metadata), strict=True)
    except (ValueError, RuntimeError) as e:  # RuntimeError: load_state_dict's mismatched shapes
        raise ValueError(f"checkpoint {path}: {e}") from None
    return model.to(device).eval(), meta


def read_masks(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The stored mask (True = kept) of every pruned weight of a checkpoint, checked as ``load`` checks it."""
    tensors, metadata = read(path)
    try:
        meta = _decode_meta(metadata)
        model = _build_model(meta.get("arch"), meta.get("scale"), meta.get("arch_kwargs", {}))
        shapes = {name: t.shape for name, t in model.state_dict().items()}
        names = [n for n in shapes if n + MASK_SUFFIX in tensors or n + GAPS_SUFFIX in tensors]
        return {name: decode_mask(name, tensors, shapes[name]) for name in names}
    except ValueError as e:
        raise ValueError(f"checkpoint {path}: {e}") from None


def _state_dict(model: nn.Module, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> dict:
    """``model``'s state dict from a checkpoint's (checked) tensors, derived buffers taken from the model."""
    reference = model.state_dict()
    derived = set(json.loads(metadata.get("derived", "[]")))
    parameters = {name for name, _ in model.named_parameters()}
    if derived & parameters:  # only buffers the architecture recomputes can be derived, never a weight
        raise ValueError(f"lists learned weights as derived: {', '.join(sorted(derived & parameters)[:5])}")
    stored = {_weight_name(key) for key in tensors}
    unexpected = sorted(stored - set(reference))
    if unexpected:
        raise ValueError(
            f"holds tensors that {type(model).__name__} does not have: {', '.join(unexpected[:5])}"
        )
    missing = sorted(set(reference) - stored - derived)
    if missing:
        raise ValueError(f"misses tensors that {type(model).__name__} needs: {', '.join(missing[:5])}")
    state = {}
    for name, ref in reference.items():
        if name in derived:
            state[name] = ref
        elif name + MASK_SUFFIX in tensors or name + GAPS_SUFFIX in tensors:
            state[name] = _join(
                name, decode_mask(name, tensors, ref.shape), tensors.get(name + VALUES_SUFFIX), ref
            )
        elif name in tensors:
            state[name] = _dense(name, tensors[name], ref)
    return state


def _weight_name(key: str) -> str:
    """The state-dict name a stored tensor belongs to (``<name>`` of ``<name>::values``)."""
    for suffix in (MASK_SUFFIX, GAPS_SUFFIX, VALUES_SUFFIX):
        if key.endswith(suffix):
            return key.removesuffix(suffix)
    return key


def read(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The raw tensors and string metadata of a checkpoint, after checking its format and sha256."""
    path = Path(path)
    tensors, metadata = _read_raw(path)
    _verify(path, tensors, metadata)
    return tensors, metadata


def _read_raw(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Tensors and metadata of a safetensors file of at most ``MAX_FILE_BYTES``, unverified."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ValueError(f"checkpoint {path} is larger than {MAX_FILE_BYTES >> 20} MiB; refusing to read it")
    data = path.read_bytes()
    try:
        tensors = st_load(data)
        header_len = int.from_bytes(data[:8], "little")
        metadata = json.loads(data[8 : 8 + header_len]).get("__metadata__") or {}
    except Exception as e:  # safetensors raises its own SafetensorError (an Exception subclass)
        raise ValueError(
            f"checkpoint {path} is not a readable safetensors file (truncated or corrupt?): {e}"
        ) from None
    return tensors, metadata


def _verify(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Raise ``ValueError`` unless the file is the current format and its sha256 matches."""
    version = metadata.get("format_version")
    if version is None or "sha256" not in metadata:
        missing = " and ".join(key for key in ("format_version", "sha256") if key not in metadata)
        raise ValueError(
            f"checkpoint {path} is not an ISS-SR sparse checkpoint (no {missing} in its metadata)"
        )
    if version == "1":
        raise ValueError(
            f"checkpoint {path} is in format 1, whose sha256 does not cover its metadata; if you trust the "
            "file, rewrite it in the current format with iss.checkpoint.upgrade(path) "
            "(zoo: python -m iss zoo upgrade)"
        )
    if version not in READABLE_FORMATS:
        raise ValueError(
            f"checkpoint {path} is in format {version!r}; this ISS-SR reads formats "
            + " and ".join(READABLE_FORMATS)
        )
    if payload_sha256(tensors, metadata) != metadata["sha256"]:
        raise ValueError(
            f"checkpoint {path} failed its integrity check: the sha256 of its tensors and metadata does not "
            "match the one recorded when it was saved (corrupt or modified file); download or copy it again"
        )


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The decoded metadata of a checkpoint (verified like ``load``) without building the model."""
    return _decode_meta(read(path)[1])


def payload_sha256(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> str:
    """SHA-256 over name, dtype, shape and bytes of every tensor, in sorted name order, then over the metadata
    fields other than ``sha256`` as compact sorted JSON (format 2; format 1 hashed the tensors only)."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}|{str(t.dtype).removeprefix('torch.')}|{tuple(t.shape)}|".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    if metadata is not None:
        fields = {key: value for key, value in metadata.items() if key != "sha256"}
        digest.update(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())
    return digest.hexdigest()


def encode_mask(name: str, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{<name>::mask or <name>::gaps: code}``: the smaller code of a bool mask (format in the module
    docstring), the bitmask on a tie."""
    bits, gaps = pack_mask(mask), pack_gaps(mask)
    return {name + GAPS_SUFFIX: gaps} if gaps.numel() < bits.numel() else {name + MASK_SUFFIX: bits}


def decode_mask(
    name: str, tensors: dict[str, torch.Tensor], shape: torch.Size | tuple[int, ...]
) -> torch.Tensor:
    """The bool mask of weight ``name`` of ``shape`` from a checkpoint's tensors, in whichever code it is
    stored; ``ValueError`` if the code is malformed."""
    if name + MASK_SUFFIX in tensors and name + GAPS_SUFFIX in tensors:
        raise ValueError(f"{name} has two masks, {MASK_SUFFIX} and {GAPS_SUFFIX}")
    suffix = MASK_SUFFIX if name + MASK_SUFFIX in tensors else GAPS_SUFFIX
    code = tensors[name + suffix]
    if code.dtype != torch.uint8 or code.ndim != 1:
        raise ValueError(f"mask of {name} is {code.dtype} of shape {tuple(code.shape)}, not a uint8 vector")
    if suffix == GAPS_SUFFIX:
        return unpack_gaps(code, shape)
    numel = int(np.prod(shape))
    if code.numel() != (numel + 7) // 8:
        raise ValueError(f"mask of {name} has {code.numel()} bytes, expected {(numel + 7) // 8}")
    return unpack_mask(code, shape)


def pack_mask(mask: torch.Tensor) -> torch.Tensor:
    """Flattened bool mask -> uint8 bits, most significant bit first (numpy.packbits order)."""
    return torch.from_numpy(np.packbits(mask.detach().cpu().reshape(-1).numpy().astype(np.uint8)))


def unpack_mask(packed: torch.Tensor, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    """Inverse of ``pack_mask``: the bool mask of ``shape``."""
    numel = int(np.prod(shape))
    bits = np.unpackbits(packed.numpy(), count=numel).astype(bool)
    return torch.from_numpy(bits).reshape(shape)


def pack_gaps(mask: torch.Tensor) -> torch.Tensor:
    """Flattened bool mask -> uint8 run lengths: per kept weight the number of pruned ones before it, runs of
    255 or more preceded by one 255 byte per 255 pruned weights."""
    kept = np.flatnonzero(mask.detach().cpu().reshape(-1).numpy())
    runs = np.diff(kept, prepend=-1) - 1
    skips = runs // 255
    codes = np.full(int(skips.sum()) + kept.size, 255, np.uint8)
    codes[np.cumsum(skips + 1) - 1] = runs % 255
    return torch.from_numpy(codes)


def unpack_gaps(codes: torch.Tensor, shape: torch.Size | tuple[int, ...]) -> torch.Tensor:
    """Inverse of ``pack_gaps``: the bool mask of ``shape``; ``ValueError`` if the codes run past its end."""
    numel = int(np.prod(shape))
    codes = codes.numpy().astype(np.int64)
    ends = np.cumsum(np.where(codes == 255, 255, codes + 1))  # one past each code's last position
    if ends.size and ends[-1] > numel:
        raise ValueError(f"mask codes cover {int(ends[-1])} weights, the weight has {numel}")
    mask = np.zeros(numel, bool)
    mask[ends[codes != 255] - 1] = True
    return torch.from_numpy(mask).reshape(shape)


def _split(name: str, weight: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(bool mask, kept values) of one pruned weight; refuses masks that would drop non-zero weights."""
    mask = mask.detach().cpu().bool()
    if mask.shape != weight.shape:
        raise ValueError(f"mask of {name} has shape {tuple(mask.shape)}, the weight {tuple(weight.shape)}")
    if bool((weight[~mask] != 0).any()):
        raise ValueError(
            f"weight {name} has non-zero values where its mask is False; apply the hard mask before saving "
            "(e.g. save after the pruning stage has frozen it)"
        )
    return mask, weight[mask].contiguous()


def _join(name: str, mask: torch.Tensor, values: torch.Tensor | None, ref: torch.Tensor) -> torch.Tensor:
    """Dense weight from a decoded mask and its kept values (zeros elsewhere)."""
    if values is None:
        raise ValueError(f"{name} has a mask but no values")
    _dense(name, values.reshape(-1), values.reshape(-1).to(ref.dtype))  # dtype and finiteness
    if int(mask.sum()) != values.numel():
        raise ValueError(
            f"{name}: mask keeps {int(mask.sum())} weights but {values.numel()} values are stored"
        )
    dense = torch.zeros(ref.shape, dtype=ref.dtype)
    dense[mask] = values.to(ref.dtype)
    return dense


def _dense(name: str, tensor: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """A stored tensor checked against the model's: floats stored as fp32/fp16 and finite, others exact."""
    if ref.is_floating_point():
        if tensor.dtype not in (torch.float32, torch.float16):
            raise ValueError(f"{name} is stored as {tensor.dtype}; expected float32 or float16")
        if not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{name} holds NaN or infinite values")
    elif tensor.dtype != ref.dtype:
        raise ValueError(f"{name} is stored as {tensor.dtype}; expected {ref.dtype}")
    return tensor


def _default_masks(model: nn.Module) -> dict[str, torch.Tensor]:
    """``weight != 0`` for every Conv2d/Linear weight that has at least one zero."""
    masks = {}
    for module_name, module in model.named_modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)) and module.weight is not None:
            kept = module.weight.detach() != 0
            if not bool(kept.all()):
                masks[f"{module_name}.weight" if module_name else "weight"] = kept
    return masks


def _derived_buffers(model: nn.Module, metadata: dict[str, str], masks: dict) -> set[str]:
    """Buffers equal to those of a freshly built model of the same arch: not worth storing."""
    params = {name for name, _ in model.named_parameters()}
    buffers = {name: b for name, b in model.state_dict().items() if name not in params and name not in masks}
    if not buffers:
        return set()
    fresh = _build_model(metadata["arch"], int(metadata["scale"]), json.loads(metadata["arch_kwargs"]))
    reference = fresh.state_dict()
    return {
        name
        for name, b in buffers.items()
        if name in reference
        and reference[name].shape == b.shape
        and reference[name].dtype == b.dtype
        and torch.equal(reference[name], b.detach().cpu())
    }


def _build_model(arch: str, scale: int, arch_kwargs: dict[str, Any]) -> nn.Module:
    """The architecture named in a checkpoint, checked (``_check_arch``), then built the one way the project
    builds models."""
    from iss.archs import build

    _check_arch(arch, scale, arch_kwargs)
    return build(arch, scale, **arch_kwargs)


def _check_arch(arch: Any, scale: Any, arch_kwargs: Any) -> None:
    """Raise ``ValueError`` unless a checkpoint's metadata names a known architecture and scale, and its
    ``arch_kwargs`` are options that architecture declares, within their sane ranges."""
    from iss.archs import check_overrides, list_archs

    if arch not in list_archs():
        raise ValueError(f"unknown architecture {arch!r}; known: {', '.join(list_archs())}")
    if scale not in (2, 3, 4):
        raise ValueError(f"scale {scale!r} is not 2, 3 or 4")
    try:
        check_overrides(arch, arch_kwargs)
    except ValueError as e:
        raise ValueError(f"arch_kwargs refused: {e}") from None


def _value_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in (torch.float32, torch.float16):
        return dtype
    if isinstance(dtype, str) and dtype in VALUE_DTYPES:
        return VALUE_DTYPES[dtype]
    raise ValueError(f"dtype must be float32 or float16 ('fp32'/'fp16'), got {dtype!r}")


def _encode_meta(meta: dict[str, Any]) -> dict[str, str]:
    """Typed metadata -> safetensors' str -> str (numbers as text, dicts as JSON, None as '')."""
    missing = [key for key in ("arch", "scale") if meta.get(key) is None]
    if missing:
        raise ValueError(f"checkpoint meta needs {', '.join(missing)} to rebuild the model")
    reserved = [key for key in _RESERVED if key in meta]
    if reserved:
        raise ValueError(f"meta keys {reserved} are written by iss.checkpoint.save itself")
    out = {"arch_kwargs": "{}", "metrics": "{}"}
    for key, value in meta.items():
        if key in _JSON:
            out[key] = json.dumps(value or {}, sort_keys=True)
        elif key in _TEXT + _INT + _FLOAT:
            out[key] = "" if value is None else str(value)
        else:
            out[key] = json.dumps(value)
    int(out["scale"])
    return out


def _decode_meta(metadata: dict[str, str]) -> dict[str, Any]:
    """Inverse of ``_encode_meta`` (plus ``format_version``, ``values_dtype`` and ``sha256`` as text)."""
    meta: dict[str, Any] = {}
    for key, text in metadata.items():
        if key == "derived":
            continue
        if key in _INT:
            meta[key] = int(text) if text else None
        elif key in _FLOAT:
            meta[key] = float(text) if text else None
        elif key in _TEXT or key in _RESERVED:
            meta[key] = text
        else:
            meta[key] = json.loads(text)
    return meta
