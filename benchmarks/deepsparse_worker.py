"""DeepSparse engine in its own interpreter, driven by ``benchmarks/engines.py`` over stdin/stdout.

DeepSparse (deprecated, last release 1.8 for Python <= 3.11) pins old ``onnx``/``numpy`` versions, so it
lives in a separate virtual environment and this script imports neither torch nor the project. Protocol,
one JSON object per line: the worker prints ``{"ready": compile_seconds}`` after compiling ``ONNX``, then
answers each ``{"input": "x.npy", "output": "y.npy"}`` (``output`` optional) with ``{"seconds": wall}``
for one inference, writing the output to ``output`` when given; end of input ends it. Errors come back as
``{"error": "..."}`` on one line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("onnx")
    p.add_argument("--threads", type=int, required=True)
    args = p.parse_args()
    try:
        import numpy as np
        from deepsparse import compile_model

        start = time.perf_counter()
        engine = compile_model(args.onnx, batch_size=1, num_cores=args.threads)
        print(json.dumps({"ready": time.perf_counter() - start}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            x = np.load(request["input"])
            start = time.perf_counter()
            out = engine([x])[0]
            seconds = time.perf_counter() - start
            if request.get("output"):
                np.save(request["output"], out)
            print(json.dumps({"seconds": seconds}), flush=True)
    except Exception as e:  # reported to the parent, which marks the engine as failed for this model
        print(json.dumps({"error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}), flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
