"""Data: the one image loader, benchmark sets and training patches, MATLAB bicubic, PSNR/SSIM on Y.

``iss.data.read_image`` & co. come from :mod:`.images` and :mod:`.sets`; :mod:`.resize` (``imresize``) and
:mod:`.metrics` (``psnr_y``, ``ssim_y``) are imported from their modules.
"""

from .images import (
    FORMATS,
    MAX_PIXELS,
    Decoded,
    ImageError,
    decode_image,
    modcrop,
    read_image,
    to_rgb_uint8,
    to_tensor,
    to_uint8,
)
from .sets import (
    BENCHMARKS,
    IMAGE_SUFFIXES,
    BenchmarkSet,
    DevicePatches,
    Sample,
    TrainPatches,
    benchmark_name,
    cache_dir,
    list_images,
)

__all__ = [
    "BENCHMARKS",
    "FORMATS",
    "IMAGE_SUFFIXES",
    "MAX_PIXELS",
    "BenchmarkSet",
    "Decoded",
    "DevicePatches",
    "ImageError",
    "Sample",
    "TrainPatches",
    "benchmark_name",
    "cache_dir",
    "decode_image",
    "list_images",
    "modcrop",
    "read_image",
    "to_rgb_uint8",
    "to_tensor",
    "to_uint8",
]
