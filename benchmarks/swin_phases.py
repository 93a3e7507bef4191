"""Where the fused Swin block's time goes: each phase of ``iss_swin_windows`` timed with ``rdtsc``.

    python benchmarks/swin_phases.py --size 64 --threads 1

Builds a copy of ``iss/sparse/csrc`` (of the ``iss`` imported: with ``PYTHONPATH`` pointing at another
checkout, that one's, back to commit 52ee03e) whose ``swin.c`` adds up the time-stamp counter's ticks per
phase (gather, LayerNorm, qkv, attention, proj, LayerNorm, fc1, GELU, fc2, scatter) in its own kernel cache,
runs a sparsified SwinIR-light x4 (random masks of ``--ratio``) and prints the millions of ticks per image,
over all threads. x86 only; the counter runs at a fixed rate, not the core's clock.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

import iss
from iss.sparse import kernels, sparsify
from iss.train.loop import cpu_signature

PHASES = ("gather", "ln1", "qkv", "attention", "proj", "ln2", "fc1", "gelu", "fc2", "scatter")
MARKS = (  # a timer goes before each of these statements, and one at the end of the window loop's body
    "layer_norm(t, x, c, n, b->norm1_w",
    "linear(qkv, t, 3 * c",
    "for (int64_t hh = 0; hh < b->heads; hh++) {",
    "linear(x, o, c, n, &b->proj, x);",
    "layer_norm(t, x, c, n, b->norm2_w",
    "linear(hid, t, b->hidden",
    "for (int64_t k = 0; k < b->hidden * n; k += LANES)",
    "linear(x, hid, c, n, &b->fc2, x);",
    ("scatter_window(", "for (int64_t i = 0; i < n; i++)\n            for (int64_t ch = 0; ch < c; ch++)"),
)
TIMER = """#include <x86intrin.h>
uint64_t iss_phase_ticks[16];
uint64_t *iss_phases(void) { return iss_phase_ticks; }
#define PHASE(i) { uint64_t now_ = __rdtsc(); \\
    __atomic_fetch_add(&iss_phase_ticks[i], now_ - t_, __ATOMIC_RELAXED); t_ = now_; }
"""


def instrumented(csrc: Path, out: Path) -> None:
    """``csrc``'s sources into ``out``, with ``swin.c``'s window loop timed phase by phase."""
    shutil.copytree(csrc, out, dirs_exist_ok=True)
    code = (csrc / "swin.c").read_text()
    code = code.replace('#include "kernels.h"\n', '#include "kernels.h"\n' + TIMER, 1)
    loop = code.index("    for (int64_t wi = ")
    code = code[:loop] + "    uint64_t t_ = __rdtsc();\n" + code[loop:]
    for i, mark in enumerate(MARKS):
        mark = next(m for m in (mark if isinstance(mark, tuple) else (mark,)) if m in code)  # also older code
        at = code.index("        " + mark)
        code = code[:at] + f"        PHASE({i})\n" + code[at:]
    body_end = code.index("\n    }\n}\n", code.index("void iss_swin_windows("))
    code = code[:body_end] + f"\n        PHASE({len(MARKS)})" + code[body_end:]
    (out / "swin.c").write_text(code)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--ratio", type=float, default=0.95)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "csrc"
        instrumented(kernels.CSRC, src)
        os.environ["ISS_CACHE_DIR"] = str(Path(tmp) / "cache")
        kernels.SOURCES = tuple(src / path.name for path in kernels.SOURCES)
        kernels.HEADERS = tuple(src / path.name for path in kernels.HEADERS)
        kernels.load.cache_clear()
        torch.set_num_threads(args.threads)
        torch.manual_seed(0)
        model = iss.archs.build("swinir-light", 4).eval()
        iss.pruning.build("scratch", model, args.ratio, seed=0)
        model = sparsify(model)
        x = torch.rand(1, 3, args.size, args.size)
        lib = kernels.load()
        lib.iss_phases.restype = ctypes.POINTER(ctypes.c_uint64 * 16)
        ticks = lib.iss_phases().contents
        with torch.inference_mode():
            for _ in range(getattr(iss.sparse, "SETUP_CALLS", 1)):
                model(x)
            ctypes.memset(ticks, 0, ctypes.sizeof(ticks))
            start = time.perf_counter()
            for _ in range(args.reps):
                model(x)
            ms = (time.perf_counter() - start) / args.reps * 1e3
        per_image = [ticks[i] / args.reps / 1e6 for i in range(len(PHASES))]
    size = f"{args.size}x{args.size}"
    print(f"{cpu_signature()}, {args.threads} thread(s), SwinIR-light x4 r{args.ratio}, {size}")
    print(f"{ms:.1f} ms per image; millions of ticks per image: {sum(per_image):.1f} =")
    print("  " + ", ".join(f"{name} {t:.1f}" for name, t in zip(PHASES, per_image, strict=True)))


if __name__ == "__main__":
    main()
