"""SR backbones behind one registry: ``build(name, scale)``, ``list_archs()``, ``load_official(model, path)``.

Names: ``swinir-light`` (SwinIR-S), ``edsr-l`` and ``edsr-baseline`` (EDSR, BasicSR layout), ``cat-r``
(CAT-R). Every model takes float NCHW RGB in [0, 1] of any size and returns (B, 3, scale*H, scale*W),
unclamped, and has a ``scale`` attribute. Parameter and buffer names are the official ones, so released
weights load strictly.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_type_hints

import torch
from torch import Tensor, nn

from iss.registry import ARCHS

from . import cat, edsr, swinir  # noqa: F401  (importing registers the architectures)
from .common import SCALES

__all__ = ["SCALES", "build", "check_overrides", "list_archs", "load_official"]

# Foreign key layouts are mapped in one function per family (timm's checkpoint_filter_fn); families whose
# official files already use our names are absent.
_KEY_FILTERS: dict[type[nn.Module], Callable[[dict[str, Tensor], nn.Module], dict[str, Tensor]]] = {
    edsr.EDSR: edsr.checkpoint_filter_fn,
}


def list_archs() -> list[str]:
    """Names accepted by :func:`build`."""
    return ARCHS.names()


def build(name: str, scale: int, **overrides) -> nn.Module:
    """Build architecture ``name`` for ``scale`` (2, 3 or 4); ``overrides`` go to the model constructor.

    Unknown names raise KeyError, unsupported scales ValueError, unknown overrides TypeError.
    """
    return ARCHS.get(name)(scale=scale, **overrides)


def check_overrides(name: str, overrides: Any) -> None:
    """Raise ``ValueError`` unless ``overrides`` only set options architecture ``name`` declares (its class's
    ``OPTIONS``), each of the right type and in its sane range: what a checkpoint's metadata is checked with
    before anything is built. Unknown names raise ``KeyError``."""
    options = get_type_hints(ARCHS.get(name))["return"].OPTIONS  # builders return their family's class
    if not isinstance(overrides, dict):
        raise ValueError(f"{name} options must be a JSON object, got {overrides!r:.60}")
    unknown = sorted(set(overrides) - set(options))
    if unknown:
        raise ValueError(f"{name} has no option {', '.join(unknown)}; it takes {', '.join(options)}")
    for key, value in overrides.items():
        options[key].check(key, value)


def load_official(model: nn.Module, path: str | Path) -> nn.Module:
    """Load an official checkpoint into ``model`` strictly and return it.

    Accepts ``{'params_ema': sd}`` (preferred when present), ``{'params': sd}`` or a raw state dict, with or
    without a ``module.`` prefix, and the family's foreign layouts (EDSR-PyTorch keys for EDSR). The file is
    read with ``weights_only=True``: pickles holding anything but tensors and plain containers are refused.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        raise ValueError(
            f"{path} is not a plain tensor checkpoint; refusing to unpickle it ({err})"
        ) from None
    state_dict = _unwrap(payload, path)
    state_dict = _KEY_FILTERS.get(type(model), lambda sd, _: sd)(state_dict, model)
    try:
        model.load_state_dict(state_dict, strict=True)
    except RuntimeError as err:
        raise ValueError(f"{path} does not fit {type(model).__name__} (scale {model.scale}): {err}") from None
    return model


def _unwrap(payload: object, path: Path) -> dict[str, Tensor]:
    """The state dict inside a BasicSR/KAIR wrapper, with DataParallel ``module.`` prefixes removed."""
    if isinstance(payload, dict):
        for key in ("params_ema", "params"):
            if isinstance(payload.get(key), dict):
                payload = payload[key]
                break
    if not isinstance(payload, dict) or not all(isinstance(v, Tensor) for v in payload.values()):
        raise ValueError(f"{path} holds no state dict (expected tensors, 'params' or 'params_ema')")
    return {k.removeprefix("module."): v for k, v in payload.items()}
