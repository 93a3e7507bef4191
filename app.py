"""ISS-SR Gradio app: compare pruned upscalers, watch ISS-P vs IHT prune live, inspect checkpoint sparsity.

Layout and wiring only; what each tab's events do lives in ``iss.ui.compare``, ``iss.ui.analysis`` and
``iss.ui.sparsity``. ``python app.py`` serves on http://127.0.0.1:7860 (``--host``, ``--port``; ``--data-dir``
for Urban100 example crops and training data).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import torch

import iss
from iss.ui import analysis, compare, gpu, sparsity  # imports ``spaces`` (if installed) before CUDA starts

TITLE = "ISS-SR: sparse super-resolution with Iterative Soft Shrinkage"
INTRO = (
    "Compare pruned SR networks from the checkpoint zoo (ICCV 2023, *Iterative Soft Shrinkage Learning for "
    "Efficient Image Super-Resolution*), watch ISS-P and IHT prune the same network live, and inspect where "
    "a checkpoint keeps its weights."
)
QUEUE_SIZE = 8  # waiting requests per event before new ones are refused: a CPU Space cannot serve more
LIMITS = {"max_file_size": f"{compare.MAX_UPLOAD_MB}mb"}  # launch() settings bounding what a request sends


def _error(e: Exception) -> gr.Error:
    """A user mistake shown in the UI (and to API clients) as one line, without a server-side traceback."""
    message = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
    return gr.Error(message, print_exception=False)


# ---------------------------------------------------------------------------------------------------- compare


def _compare_outputs(
    comp: compare.Comparison, left: str, right: str, box: tuple[int, int, int, int]
) -> tuple:
    """Component values for a finished comparison."""
    choices = compare.pair_choices(comp)
    message = comp.message
    if comp.hr is None:
        message += "\n\nLR mode: no reference, so no PSNR/SSIM."
    return (
        compare.slider_pair(comp, left, right),
        compare.overview(comp, box),
        compare.zoom_grid(comp, box),
        comp.rows,
        comp.files,
        message,
        gr.update(choices=choices, value=left),
        gr.update(choices=choices, value=right),
        comp,
    )


def _run_compare(
    image: dict | None,
    scale: Any,
    methods: Any,
    mode: Any,
    sparse: Any,
    *,
    zoo_path: str | None,
    cache: str,
) -> tuple:
    """``/upscale``: run the comparison (backbone and ratio only filter the method list in the UI).

    Wired with ``preprocess=False``: the values arrive as sent, the image as Gradio's record of the uploaded
    file (undecoded), so that ``compare`` decodes it within its pixel budget and every mistake in a request
    gets one line. The PNG downloads go to Gradio's cache, where ``delete_cache`` removes them.
    """
    try:
        path, out_dir = _upload_path(image), str(_download_folder(cache))
        comp = gpu_compare(path, scale, methods, mode, sparse=sparse, zoo_path=zoo_path, out_dir=out_dir)
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise _error(e) from None
    left, right = compare.default_pair(comp)
    return _compare_outputs(comp, left, right, compare.zoom_box(comp, None, None))


def _upload_path(image: dict | None) -> str | None:
    """The uploaded file's path in Gradio's unprocessed image record (None: no image)."""
    if image is not None and not image.get("path"):
        raise ValueError("send the image as an uploaded file (gradio_client.handle_file(path)), not a URL")
    return None if image is None else image["path"]


def _download_folder(cache: str) -> Path:
    """A new folder (not yet created) for one request's PNGs in Gradio's cache, whose ``delete_cache`` removes
    the files; the folders it emptied are removed here."""
    for emptied in Path(cache).glob("iss-sr-*"):
        with contextlib.suppress(OSError):
            emptied.rmdir()
    return Path(cache) / f"iss-sr-{uuid.uuid4().hex}"


@gpu(duration=60)
def gpu_compare(*args: Any, **kwargs: Any) -> compare.Comparison:
    """``compare.compare`` on the GPU of a ZeroGPU Space (plain call elsewhere)."""
    return compare.compare(*args, **kwargs)


def _repair(comp: compare.Comparison | None, left: str, right: str) -> Any:
    """Show another pair in the slider without recomputing."""
    if comp is None or not left or not right:
        return gr.update()
    return compare.slider_pair(comp, left, right)


def _zoom(comp: compare.Comparison | None, evt: gr.SelectData) -> tuple:
    """Move the zoom region to where the user clicked on the overview."""
    if comp is None:
        return gr.update(), gr.update()
    x, y = evt.index
    box = compare.zoom_box(comp, x, y)
    return compare.overview(comp, box), compare.zoom_grid(comp, box)


def _choices_for(arch: str, scale: int, zoo_path: str | None = None) -> tuple:
    """Ratios and methods available for a backbone/scale pair."""
    found = compare.ratios(arch, int(scale), zoo_path)
    ratio = found[-1] if found else None
    methods = compare.method_choices(arch, int(scale), ratio, zoo_path)
    return gr.update(choices=found, value=ratio), gr.update(choices=methods, value=methods)


def _methods_for(arch: str, scale: int, ratio: float | None, zoo_path: str | None = None) -> Any:
    """All matching methods, selected, when the ratio changes."""
    methods = compare.method_choices(arch, int(scale), ratio, zoo_path)
    return gr.update(choices=methods, value=methods)


def compare_tab(data_dir: str | None, zoo_path: str | None) -> None:
    """Upload or pick an image, choose backbone/scale/ratio/methods, compare results side by side."""
    archs = compare.backbones(zoo_path)
    arch0 = "swinir-light" if "swinir-light" in archs else archs[0]
    scale0 = 4
    ratio_choices = compare.ratios(arch0, scale0, zoo_path)
    ratio0 = ratio_choices[-1] if ratio_choices else None
    methods0 = compare.method_choices(arch0, scale0, ratio0, zoo_path)
    examples = compare.example_images(data_dir)
    with gr.Row():
        with gr.Column(scale=1, min_width=320):
            image = gr.Image(
                type="pil",
                image_mode=None,
                label="Image",
                sources=["upload", "clipboard"],
                format="png",
                height=280,
            )
            gr.Examples(
                examples=[[path] for path, _ in examples],
                inputs=[image],
                example_labels=[label for _, label in examples],
                label="Examples",
            )
            mode = gr.Radio(list(compare.MODES), value=compare.MODE_HR, label="Input is")
            with gr.Row():
                arch = gr.Dropdown(archs, value=arch0, label="Backbone")
                scale = gr.Radio(list(compare.SCALES), value=scale0, label="Scale")
                ratio = gr.Dropdown(
                    ratio_choices, value=ratio0, label="Pruning ratio", allow_custom_value=True
                )
            methods = gr.CheckboxGroup(methods0, value=methods0, label="Methods to compare")
            sparse = gr.Checkbox(
                False, label="Sparse kernels (iss.sparsify)", info=compare.sparse_kernel_note()
            )
            run = gr.Button("Compare", variant="primary")
        with gr.Column(scale=2):
            status = gr.Markdown("Upload an image or pick an example, then press **Compare**.")
            with gr.Row():
                left = gr.Dropdown([], label="Left", scale=4)
                swap = gr.Button("⇄ swap", scale=1, min_width=60)
                right = gr.Dropdown([], label="Right", scale=4)
            slider = gr.ImageSlider(format="png", type="numpy", label="Left | Right", max_height=520)
            with gr.Row():
                region = gr.Image(
                    label="Click to choose the zoom region",
                    interactive=False,
                    format="png",
                    height=300,
                    scale=1,
                )
                grid = gr.Gallery(label="Zoomed region", format="png", columns=3, height=300, scale=2)
            table = gr.Dataframe(
                headers=compare.TABLE_HEADERS,
                label="Per method",
                interactive=False,
                wrap=True,
                column_widths=["24%", "22%", "8%", "16%", "8%", "12%", "10%"],
            )
            files = gr.File(file_count="multiple", label="Full-resolution PNGs")
    state = gr.State(None)
    choices_for = functools.partial(_choices_for, zoo_path=zoo_path)
    arch.change(choices_for, [arch, scale], [ratio, methods], api_visibility="private")
    scale.change(choices_for, [arch, scale], [ratio, methods], api_visibility="private")
    ratio.input(
        functools.partial(_methods_for, zoo_path=zoo_path),
        [arch, scale, ratio],
        [methods],
        api_visibility="private",
    )
    run.click(
        functools.partial(_run_compare, zoo_path=zoo_path, cache=files.GRADIO_CACHE),
        [image, scale, methods, mode, sparse],
        [slider, region, grid, table, files, status, left, right, state],
        api_name="upscale",
        concurrency_id="upscale",
        preprocess=False,
    )
    left.input(_repair, [state, left, right], [slider], api_visibility="private")
    right.input(_repair, [state, left, right], [slider], api_visibility="private")
    swap.click(lambda a, b: (b, a), [left, right], [left, right], api_visibility="private").then(
        _repair, [state, left, right], [slider], api_visibility="private"
    )
    region.select(_zoom, [state], [region, grid], api_visibility="private")


# --------------------------------------------------------------------------------------------------- analysis


@gpu(duration=300)
def _train(
    arch: str,
    scale: int,
    ratio: float,
    alpha: float,
    iterations: int,
    prune_iters: int,
    patch: int,
    batch: int,
    layers: list[str] | None,
    start: str,
    data_dir: str | None = None,
) -> Iterator[tuple]:
    """``/train``: stream ISS-P vs IHT figures; Stop cancels it between iterations."""
    try:
        yield from analysis.train_live(
            arch, int(scale), float(ratio), float(alpha), int(iterations), int(prune_iters), int(patch),
            int(batch), layers, start, data_dir=data_dir,
        )  # fmt: skip
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise _error(e) from None


def _layers_for(arch: str, scale: int) -> Any:
    """Layer picker choices for a backbone (its prunable weights), two representative ones selected."""
    try:
        layers = analysis.prunable_layers(arch, int(scale))
    except (KeyError, ValueError) as e:
        raise _error(e) from None
    return gr.update(choices=layers, value=analysis.default_layers(layers))


def _recorded(name: str | None, layers: list[str] | None) -> tuple:
    """``/recorded``: the three analysis figures of a bundled recording, whole."""
    if not name:
        return gr.update(), gr.update(), gr.update(), "No recorded run bundled."
    return analysis.recorded_figures(name, layers)


def _recorded_layers(name: str | None) -> Any:
    """Layer picker choices for a recording (every layer it traced)."""
    if not name:
        return gr.update()
    layers = analysis.recording_layers(name)
    return gr.update(choices=layers, value=analysis.default_layers(layers))


def analysis_tab(data_dir: str | None) -> None:
    """Live ISS-P vs IHT run with streamed plots, and the bundled recorded runs shown whole."""
    d = analysis.LIVE_DEFAULTS
    archs = iss.archs.list_archs()
    layers0 = analysis.prunable_layers(d["arch"], d["scale"])
    gr.Markdown(
        "ISS-P and IHT start from the **same random init** and see the **same batches**. Per-iteration "
        "flips are near zero for both in the first ~1,500 iterations from random init; the contrast of the "
        "paper's Fig. 3 lives in the long pruning stage. Start from a recorded mid-pruning state, or open "
        "*Recorded runs* below."
    )
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            with gr.Row():
                arch = gr.Dropdown(archs, value=d["arch"], label="Backbone")
                scale = gr.Radio(list(compare.SCALES), value=d["scale"], label="Scale")
            ratio = gr.Slider(0.5, 0.99, value=d["ratio"], step=0.01, label="Pruning ratio")
            alpha = gr.Slider(0.5, 0.999, value=d["alpha"], step=0.001, label="alpha (ISS-P shrink factor)")
            with gr.Row():
                iterations = gr.Number(d["iterations"], precision=0, label="Iterations", minimum=1)
                prune_iters = gr.Number(
                    d["prune_iters"], precision=0, label="K_p (pruning iterations)", minimum=1
                )
            with gr.Row():
                patch = gr.Slider(8, 64, value=d["patch"], step=8, label="LR patch")
                batch = gr.Slider(1, 32, value=d["batch"], step=1, label="Batch")
            start = gr.Dropdown(analysis.recorded_states(), value=analysis.RANDOM_INIT, label="Start from")
            layers = gr.Dropdown(
                layers0, value=analysis.default_layers(layers0), multiselect=True, label="Layers to plot"
            )
            with gr.Row():
                go = gr.Button("Train ISS-P vs IHT", variant="primary")
                stop = gr.Button("Stop", variant="stop")
        with gr.Column(scale=2):
            status = gr.Markdown("Press **Train** to start (first plot in a few seconds on CPU).")
            flips = gr.Plot(label="Mask dynamics")
            grads = gr.Plot(label="Gradients")
            training = gr.Plot(label="Training")
    recordings = analysis.recording_names()
    rec_layers0 = analysis.recording_layers(recordings[0]) if recordings else []
    with gr.Accordion("Recorded runs (whole)", open=False) as recorded:
        with gr.Row():
            rec = gr.Dropdown(recordings, value=recordings[0] if recordings else None, label="Recording")
            rec_layers = gr.Dropdown(
                rec_layers0,
                value=analysis.default_layers(rec_layers0),
                multiselect=True,
                label="Layers to plot",
            )
            show = gr.Button("Show")
        rec_status = gr.Markdown()
        rec_flips, rec_grads, rec_training = gr.Plot(), gr.Plot(), gr.Plot()
    arch.change(_layers_for, [arch, scale], [layers], api_visibility="private")
    event = go.click(
        functools.partial(_train, data_dir=data_dir),
        [arch, scale, ratio, alpha, iterations, prune_iters, patch, batch, layers, start],
        [flips, grads, training, status],
        api_name="train",
        concurrency_id="train",
    )
    stop.click(None, None, None, cancels=[event])
    rec.change(_recorded_layers, [rec], [rec_layers], api_visibility="private")
    rec_outputs = [rec_flips, rec_grads, rec_training, rec_status]
    show.click(_recorded, [rec, rec_layers], rec_outputs, api_name="recorded")
    recorded.expand(_recorded, [rec, rec_layers], rec_outputs, api_visibility="private")


# --------------------------------------------------------------------------------------------------- sparsity


def _sparsity(name: Any, layer: Any, zoo_path: str | None = None) -> tuple:
    """``/sparsity``: kept fraction per layer and magnitude histograms of a zoo checkpoint.

    Wired with ``preprocess=False``, so that a client's wrong value gets one line from here.
    """
    if not name:
        return gr.update(), gr.update(), gr.update()
    try:
        if not isinstance(name, str) or not isinstance(layer, str | None):
            raise ValueError(f"checkpoint and layer must be names, got {name!r:.40} and {layer!r:.40}")
        kept, hist, layers = sparsity.sparsity_view(name, layer, zoo_path)
    except (ValueError, KeyError, FileNotFoundError, OSError) as e:
        raise _error(e) from None
    return kept, hist, gr.update(choices=layers, value=layer if layer in layers else None)


def sparsity_tab(zoo_path: str | None) -> None:
    """Per-layer kept ratio and weight magnitudes of a checkpoint; the zoo beside the paper's tables."""
    names = [e.name for e in compare.zoo(zoo_path)]
    if not names:
        gr.Markdown("No checkpoint zoo found (`checkpoints/zoo.json`): nothing to inspect yet.")
    with gr.Row():
        ckpt = gr.Dropdown(names, value=names[0] if names else None, label="Checkpoint")
        layer = gr.Dropdown([], label="Also show the histogram of layer", allow_custom_value=True)
        show = gr.Button("Show")
    with gr.Row():
        kept = gr.Plot(label="Kept fraction per layer")
        hist = gr.Plot(label="Weight magnitudes")
    gr.Markdown(
        "**Zoo vs paper** (same backbone, scale, ratio and method; zoo budgets are far below the paper's)"
    )
    gr.Dataframe(sparsity.zoo_vs_paper(zoo_path), headers=sparsity.ZOO_VS_PAPER_HEADERS, interactive=False)
    view = functools.partial(_sparsity, zoo_path=zoo_path)
    show.click(view, [ckpt, layer], [kept, hist, layer], api_name="sparsity", preprocess=False)
    ckpt.input(view, [ckpt, layer], [kept, hist, layer], api_visibility="private", preprocess=False)


# ------------------------------------------------------------------------------------------------------ app


def build_demo(data_dir: str | None = None, zoo_path: str | None = None) -> gr.Blocks:
    """The whole app. ``data_dir`` (or ``$ISS_DATA_DIR``) enables Urban100 examples and real training data;
    ``zoo_path`` is a zoo manifest other than ``checkpoints/zoo.json``."""
    data_dir = data_dir or os.environ.get("ISS_DATA_DIR")
    with gr.Blocks(title="ISS-SR", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(f"## {TITLE}\n{INTRO}")
        with gr.Tabs():
            with gr.Tab("Compare", id="compare"):
                compare_tab(data_dir, zoo_path)
            with gr.Tab("Analysis", id="analysis"):
                analysis_tab(data_dir)
            with gr.Tab("Sparsity", id="sparsity"):
                sparsity_tab(zoo_path)
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE)
    return demo


def main(argv: list[str] | None = None) -> None:
    """Serve the app (127.0.0.1:7860 by default)."""
    parser = argparse.ArgumentParser(description=TITLE)
    parser.add_argument("--data-dir", default=None, help="folder with benchmarks/, train/ ($ISS_DATA_DIR)")
    parser.add_argument("--zoo", default=None, help="zoo manifest (default checkpoints/zoo.json)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    build_demo(args.data_dir, args.zoo).launch(
        server_name=args.host, server_port=args.port, theme=gr.themes.Soft(), **LIMITS
    )


if __name__ == "__main__":
    main()
