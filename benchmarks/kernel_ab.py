"""Median time of ``iss.sparsify`` on one masked backbone, for comparing kernel versions on one machine.

Run it once per checkout, interleaved, with ``PYTHONPATH`` pointing at each (this script imports ``iss`` from
there; it knows the layout before and after the move of the kernels to ``iss.sparse``)::

    git worktree add /tmp/before 3a3dd97
    for code in /tmp/before .; do PYTHONPATH=$code ISS_CACHE_DIR=/tmp/k-$(basename $code) \\
        python benchmarks/kernel_ab.py edsr-l 0.95 128 --no-avx512; done

``--no-avx512`` builds the kernels without AVX-512 (8 float lanes, as on an AVX2 CPU: a proxy for one, with
AVX-512's 32 registers still there); ``--exact`` times ``sparsify(model, exact=True)``; ``--group-nonzeros N``
sizes the conv kernel's groups of input channels for N non-zeros per output row.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import iss

try:
    from iss.sparse import kernels
except ImportError:  # before the move of the kernels into iss.sparse
    from iss import spmm as kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arch")
    parser.add_argument("ratio", type=float)
    parser.add_argument("size", type=int, help="LR input height and width (x4)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-avx512", action="store_true")
    parser.add_argument("--exact", action="store_true")
    parser.add_argument("--group-nonzeros", type=int, help="non-zeros per output row in a group of channels")
    args = parser.parse_args()
    if args.no_avx512:
        kernels.FLAGS = (["-O3", "-march=native", "-mno-avx512f"],)
    if args.group_nonzeros:
        from iss.sparse import layers

        layers.GROUP_NONZEROS[kernels.lanes()] = args.group_nonzeros
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = iss.archs.build(args.arch, 4).eval()
    iss.pruning.build("scratch", model, ratio=args.ratio)
    fast = iss.sparsify(model, exact=True) if args.exact else iss.sparsify(model)
    x = torch.rand(1, 3, args.size, args.size)
    times = []
    with torch.inference_mode():
        for _ in range(getattr(iss.sparse, "SETUP_CALLS", 1)):  # the calls spent choosing kernels and threads
            fast(x)
        for _ in range(args.reps):
            start = time.perf_counter()
            fast(x)
            times.append(time.perf_counter() - start)
    label = f"{args.arch} r{args.ratio} {args.size}x{args.size}, {kernels.lanes()} lanes, {args.threads} thr."
    print(f"{label}: median {statistics.median(times) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
