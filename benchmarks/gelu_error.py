"""How far the fused kernels' GELU (erf by Abramowitz & Stegun 7.1.28, in kernels.h) is from the exact one.

    python benchmarks/gelu_error.py

Evaluates the kernel's formula step by step in float32 (numpy, the same operations in the same order) on
[-12, 12] and prints its largest absolute difference from the exact GELU in float64, beside PyTorch's own
float32 GELU's.
"""

from __future__ import annotations

import numpy as np
import torch

COEFFICIENTS = (0.0000430638, 0.0002765672, 0.0001520143, 0.0092705272, 0.0422820123, 0.0705230784, 1.0)


def kernel_gelu(x: np.ndarray) -> np.ndarray:
    """kernels.h's ``gelu`` in float32."""
    f = np.float32
    u = x * f(0.70710678118654752)
    z = np.abs(u)
    p = np.full_like(z, f(COEFFICIENTS[0]))
    for c in COEFFICIENTS[1:]:
        p = p * z + f(c)
    with np.errstate(over="ignore"):
        for _ in range(4):
            p = p * p
    erf = np.copysign(f(1) - f(1) / p, u)
    return f(0.5) * x * (f(1) + erf)


def main() -> None:
    x = np.linspace(-12, 12, 2_000_001, dtype=np.float32)
    exact = torch.nn.functional.gelu(torch.from_numpy(x).double()).numpy()
    torch32 = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    print(f"kernel GELU: max abs error {np.abs(kernel_gelu(x) - exact).max():.2e} on [-12, 12]")
    print(f"PyTorch float32 GELU: {np.abs(torch32 - exact).max():.2e}")


if __name__ == "__main__":
    main()
