"""ISS-SR Gradio app: compare pruned upscalers, watch ISS-P vs IHT prune live, inspect checkpoint sparsity.

Layout and wiring only; what each tab's events do lives in ``iss.ui.compare``, ``iss.ui.analysis`` and
``iss.ui.sparsity``. ``python app.py`` serves on http://127.0.0.1:7860 (``--host``, ``--port``; ``--data-dir``
for Urban100 example crops and training data).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gradio as gr
import torch

import iss

# iss.ui imports ``spaces`` (if installed) before CUDA starts
from iss.ui import admission, analysis, catalog, compare, cost, figures, gpu, sparsity

TITLE = "ISS-SR: sparse super-resolution with Iterative Soft Shrinkage"
INTRO = (
    "Compare pruned SR networks from the checkpoint zoo (ICCV 2023, *Iterative Soft Shrinkage Learning for "
    "Efficient Image Super-Resolution*), watch ISS-P and IHT prune the same network live, and inspect where "
    "a checkpoint keeps its weights."
)
RECENT = compare.RecentComparisons(size=8)  # what slider and zoom reuse: memory bounded whatever the visitors
FIRST_KEY = "first"  # RECENT's key of the comparison every page opens on
EXPIRED = "this comparison is no longer kept (only the latest few are): press Compare again"
QUEUE_SIZE = 8  # waiting requests, all events together, before new ones are refused ("Queue is full")
LIVE = admission.LiveRuns(slots=1)  # live runs never wait in the queue: one at a time, one per visitor
TURNS = admission.Turns(waiting=8)  # comparisons: one at a time in the order asked, one per visitor
FOLDERS: set[Path] = set()  # the result folders this process made in Gradio's cache
UNHEARD = 4  # a live run stops once this many of its updates (about one a second) wait unread
LOG = logging.getLogger("iss.app")
LIMITS = {"max_file_size": f"{compare.MAX_UPLOAD_MB}mb"}  # launch() settings bounding what a request sends


def _refuse(message: str) -> gr.Error:
    """A client's mistake: one line to the client, one line in the server log, no traceback."""
    LOG.warning("refused: %s", message)
    return gr.Error(message, print_exception=False)


def _error(e: Exception) -> gr.Error:
    """A user mistake shown in the UI (and to API clients) as one line, without a server-side traceback."""
    return _refuse(str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e))


# ------------------------------------------------------------------------ components with honest API types


class IntRadio(gr.Radio):
    """A Radio of integers, documented as ``int`` in the API and also accepting them as text ("4")."""

    is_template = True  # rendered as a plain Radio

    def api_info(self) -> dict[str, Any]:
        return {"type": "integer", "description": f"one of {[value for _, value in self.choices]}"}

    def preprocess(self, payload: Any) -> Any:
        if isinstance(payload, str) and payload.strip().lstrip("-").isdigit():
            payload = int(payload)
        allowed = [value for _, value in self.choices]
        if isinstance(payload, bool) or not isinstance(payload, int | float) or payload not in allowed:
            raise _refuse(f"{self.label} must be one of {', '.join(map(str, allowed))}, got {payload!r:.40}")
        return super().preprocess(payload)


class NumberDropdown(gr.Dropdown):
    """A dropdown of numbers (the zoo's ratios) that also takes any other number, documented as a number."""

    is_template = True

    def api_info(self) -> dict[str, Any]:
        return {"type": "number", "description": f"e.g. one of {[value for _, value in self.choices]}"}

    def preprocess(self, payload: Any) -> Any:
        try:
            return None if payload in (None, "") else float(payload)
        except (TypeError, ValueError):
            raise _refuse(f"{self.label} must be a number, got {payload!r:.40}") from None


class Names(gr.Dropdown):
    """A dropdown of names whose valid values depend on other inputs: documented as ``str`` (or a list)."""

    is_template = True

    def api_info(self) -> dict[str, Any]:
        name = {"type": "string"}
        return {"type": "array", "items": name} if self.multiselect else name


class WholeNumber(gr.Number):
    """A whole-number field that refuses text, fractions, NaN and infinities with a message (Gradio would
    round 2.5 silently and answer "abc" with a generic error)."""

    is_template = True

    def preprocess(self, payload: Any) -> Any:
        value = payload
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value.strip())
        if value is not None and (isinstance(value, bool | str) or not isinstance(value, int | float)):
            raise _refuse(f"{self.label} must be a whole number, got {payload!r:.40}")
        if isinstance(value, float) and not math.isfinite(value):
            raise _refuse(f"{self.label} must be a finite whole number, got {payload}")
        if isinstance(value, float) and not value.is_integer():
            raise _refuse(f"{self.label} must be a whole number, got {payload}")
        return super().preprocess(value)


class Bounded(gr.Slider):
    """A slider whose API value must be a number in its range (a whole one where its steps are whole): any
    other value (text, NaN, null, a list, a bool) is refused in one line naming the field and the range
    (Gradio's own check answers most with ``{"error": null}`` and a traceback)."""

    is_template = True

    def preprocess(self, payload: Any) -> Any:
        whole = float(self.step).is_integer() and float(self.minimum).is_integer()
        value = payload
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value.strip())
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not number or not self.minimum <= value <= self.maximum or (whole and value != int(value)):
            kind = "a whole number" if whole else "a number"
            raise _refuse(
                f"{self.label} must be {kind} from {self.minimum:g} to {self.maximum:g}, got {payload!r:.40}"
            )
        return int(value) if whole else float(value)


# ---------------------------------------------------------------------------------------------------- compare


def _compare_outputs(
    comp: compare.Comparison, key: str, left: str, right: str, box: tuple[int, int, int, int]
) -> tuple:
    """Component values for a comparison (finished or partial); the session state gets its ``RECENT`` key."""
    choices = compare.pair_choices(comp)
    message = comp.message
    if comp.hr is None:
        message += "\n\nLR mode: no reference, so no PSNR/SSIM."
    return (
        compare.slider_pair(comp, left, right),
        compare.overview(comp, box),
        _tiles(comp, box),
        comp.rows,
        comp.files or None,
        message,
        gr.update(choices=choices, value=left),
        gr.update(choices=choices, value=right),
        RECENT.put(key, comp),
    )


def _run_compare(
    image: Any,
    backbone: Any,
    scale: Any,
    ratio: Any,
    methods: Any,
    mode: Any,
    sparse: Any,
    stop: threading.Event | None,
    visitor: tuple[str, str],
    progress: Any,
    *,
    zoo_path: str | None,
    cache: str,
) -> Iterator[tuple]:
    """``/upscale``: bicubic and the chosen methods' zoo checkpoints for backbone, scale and ratio, streamed
    method by method, with a progress bar (its place in line, then tiles done and time left); Stop ends it
    after the current tile. Comparisons take turns (``TURNS``): one per ``visitor`` (session, address).

    Wired with ``preprocess=False``: the values arrive as sent, the image as Gradio's record of the uploaded
    file (undecoded), so that ``compare`` decodes it within its pixel budget and every mistake in a request
    gets one line. The PNG downloads go to Gradio's cache, where ``delete_cache`` removes them.
    """
    try:
        path, out_dir = _upload_path(image, cache), str(_download_folder(cache))
        key = uuid.uuid4().hex
        with TURNS.join(*visitor) as ahead:
            if not _await_turn(ahead, stop, progress):
                yield _only_status("Stopped before its turn came.")
                return
            for comp in gpu_compare(
                path, backbone, scale, ratio, methods, mode, sparse=sparse, zoo_path=zoo_path,
                out_dir=out_dir, progress=lambda fraction, text: progress(fraction, desc=text), stop=stop,
            ):  # fmt: skip
                left, right = compare.default_pair(comp)
                yield _compare_outputs(comp, key, left, right, compare.zoom_box(comp, None, None))
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise _error(e) from None
    finally:
        cost.release_memory()


def _await_turn(ahead: Any, stop: threading.Event | None, progress: Any) -> bool:
    """Wait for a comparison's turn, the progress bar saying how many are ahead; False if Stop came first."""
    while (waiting := ahead(1.0)) > 0:
        if stop is not None and stop.is_set():
            return False
        progress(0, desc=f"waiting: {waiting} comparison{'s' * (waiting > 1)} ahead of yours")
    return True


def _only_status(message: str) -> tuple:
    """Outputs of ``/upscale`` that change only the status line."""
    return (*[gr.skip()] * 5, message, *[gr.skip()] * 3)


def _visitor(request: gr.Request) -> tuple[str, str]:
    """Who asks: (session, client address). On a Hugging Face Space every request comes from the Hub's proxy,
    so there the address is the first one its ``X-Forwarded-For`` names, the visitor's own."""
    forwarded = request.headers.get("x-forwarded-for", "") if os.environ.get("SPACE_ID") else ""
    host = request.client.host if request.client else ""
    return request.session_hash or "", forwarded.split(",")[0].strip() or host


NOT_UPLOADED = (
    "This image is no longer on the server (or was never uploaded to it): pick the example again or upload "
    "the file. API clients send it with gradio_client.handle_file(path), not as a server path or a URL."
)


def _upload_path(image: Any, cache: str) -> str | None:
    """The uploaded file's path in Gradio's unprocessed image record (None: no image).

    The endpoints that take the record unprocessed (``preprocess=False``) skip Gradio's own check, so it is
    done here: only a regular file inside Gradio's upload cache ``cache`` (after resolving ``..`` and
    symbolic links) is opened. Any other path gets the same one line whether or not it exists, so a client
    can neither read nor probe the server's files.
    """
    if image is None:
        return None
    path = image.get("path") if isinstance(image, dict) else None
    try:
        real = Path(os.path.realpath(path)) if isinstance(path, str) and path else None
        if real is None or not real.is_relative_to(os.path.realpath(cache)) or not real.is_file():
            raise ValueError(NOT_UPLOADED)
    except (OSError, ValueError):  # also a NUL byte or an overlong name
        raise ValueError(NOT_UPLOADED) from None
    return str(real)


def _download_folder(cache: str) -> Path:
    """A new folder (not yet created) for one request's PNGs in Gradio's cache, whose ``delete_cache`` removes
    the files; the folders it emptied are removed here."""
    for emptied in Path(cache).glob("iss-sr-*"):
        with contextlib.suppress(OSError):
            emptied.rmdir()
            FOLDERS.discard(emptied)
    folder = Path(cache) / f"iss-sr-{uuid.uuid4().hex}"
    FOLDERS.add(folder)  # for shutdown: a comparison in flight has not handed its PNGs to Gradio yet
    return folder


@gpu(duration=60)
def gpu_compare(*args: Any, **kwargs: Any) -> Iterator[compare.Comparison]:
    """``compare.compare_steps`` on the GPU of a ZeroGPU Space (plain call elsewhere)."""
    yield from compare.compare_steps(*args, **kwargs)


def _estimate(
    image: Any,
    backbone: Any,
    scale: Any,
    ratio: Any,
    methods: Any,
    mode: Any,
    sparse: Any,
    *,
    zoo_path: str | None,
    cache: str,
) -> str:
    """The expected time of a comparison, shown before it runs (raw values, as ``/upscale`` gets them)."""
    if image is None:
        return "Upload an image or pick an example, then press **Compare**."
    try:
        path = _upload_path(image, cache)
        found = compare.estimate(
            path, backbone, scale, ratio, methods, mode, sparse=sparse, zoo_path=zoo_path
        )
    except (ValueError, KeyError, FileNotFoundError) as e:
        return f"⚠️ {e.args[0] if isinstance(e, KeyError) and e.args else e}"
    return found.describe() + " Press **Compare**."


def _tiles(comp: compare.Comparison, box: tuple[int, int, int, int]) -> list[tuple[Any, None]]:
    """The zoom gallery's tiles, each with its caption drawn below it (Gradio's captions cover the image)."""
    return [(compare.captioned(tile, caption), None) for tile, caption in compare.zoom_grid(comp, box)]


def _kept(key: Any) -> compare.Comparison:
    """The comparison a session's state names; a one-line error once ``RECENT`` has dropped it."""
    comp = RECENT.get(key)
    if comp is None:
        raise gr.Error(EXPIRED, print_exception=False)
    return comp


def _repair(key: Any, left: str, right: str) -> Any:
    """Show another pair in the slider without recomputing."""
    if key is None or not left or not right:
        return gr.update()
    return compare.slider_pair(_kept(key), left, right)


def _zoom(key: Any, evt: gr.SelectData) -> tuple:
    """Move the zoom region to where the user clicked on the overview."""
    if key is None:
        return gr.update(), gr.update()
    comp = _kept(key)
    x, y = evt.index
    box = compare.zoom_box(comp, x, y)
    return compare.overview(comp, box), _tiles(comp, box)


def _first(arch: str, zoo_path: str | None) -> tuple:
    """The finished comparison the Compare tab opens on, and its example in the image box (computed once per
    process: ``main`` computes it before serving, so no visitor waits)."""
    try:
        comp = compare.first_comparison(arch, zoo_path)
    except (ValueError, KeyError, FileNotFoundError, OSError):  # the tab still works: nothing pre-filled
        return (gr.update(),) * 10
    left, right = compare.default_pair(comp)
    box = compare.zoom_box(comp, None, None)
    example = str(catalog.EXAMPLES_DIR / compare.FIRST_EXAMPLE)
    return (*_compare_outputs(comp, FIRST_KEY, left, right, box), example)


def _choices_for(backbone: str, scale: int, zoo_path: str | None = None) -> tuple:
    """Ratios, methods, the zoo note and the sparse-kernel default for a backbone/scale pair."""
    found = catalog.ratios(backbone, int(scale), zoo_path)
    ratio = catalog.default_ratio(backbone, int(scale), zoo_path)
    methods = catalog.method_choices(backbone, int(scale), ratio, zoo_path)
    return (
        gr.update(choices=found, value=ratio),
        gr.update(choices=methods, value=methods),
        catalog.availability(backbone, int(scale), zoo_path),
        compare.sparse_default(backbone, catalog.default_device()),
    )


def _methods_for(backbone: str, scale: int, ratio: float | None, zoo_path: str | None = None) -> Any:
    """All matching methods, selected, when the ratio changes."""
    methods = catalog.method_choices(backbone, int(scale), ratio, zoo_path)
    return gr.update(choices=methods, value=methods)


def _crops_folder() -> str:
    """A new folder inside Gradio's cache for the Urban100 crops cut from ``--data-dir`` (under ``main``, the
    process's own cache folder, removed at exit)."""
    cache = gr.utils.get_upload_folder()
    os.makedirs(cache, exist_ok=True)
    return tempfile.mkdtemp(prefix="urban100-", dir=cache)


def compare_tab(demo: gr.Blocks, data_dir: str | None, zoo_path: str | None) -> None:
    """Upload or pick an image, choose backbone/scale/ratio/methods, compare results side by side."""
    archs = catalog.backbones(zoo_path)
    arch0, scale0, ratio0 = catalog.default_cell(zoo_path)
    ratio_choices = catalog.ratios(arch0, scale0, zoo_path)
    methods0 = catalog.method_choices(arch0, scale0, ratio0, zoo_path)
    examples = compare.example_images(data_dir, _crops_folder() if data_dir else None)
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
            backbone = gr.Dropdown(
                [(catalog.backbone_label(a, zoo_path), a) for a in archs], value=arch0, label="Backbone"
            )  # a row of its own: wide enough for "(no checkpoints yet)"
            with gr.Row():
                scale = IntRadio(list(catalog.SCALES), value=scale0, label="Scale")
                ratio = NumberDropdown(
                    ratio_choices, value=ratio0, label="Pruning ratio", allow_custom_value=True
                )
            zoo_note = gr.Markdown(catalog.availability(arch0, scale0, zoo_path))
            methods = gr.CheckboxGroup(
                catalog.all_methods(zoo_path), value=methods0, label="Methods to compare"
            )  # every method the zoo has (what the API accepts); narrowed to this backbone's on load
            sparse = gr.Checkbox(
                compare.sparse_default(arch0, catalog.default_device()),
                label="Sparse kernels (iss.sparsify)",
                info=compare.sparse_kernel_note(),
            )
            expected = gr.Markdown("Upload an image or pick an example, then press **Compare**.")
            with gr.Row():
                run = gr.Button("Compare", variant="primary")
                halt = gr.Button("Stop", variant="stop")
        with gr.Column(scale=2):
            status = gr.Markdown(label="Status")
            with gr.Row():
                left = gr.Dropdown([], label="Left", scale=4)
                swap = gr.Button("⇄ swap", scale=1, min_width=60)
                right = gr.Dropdown([], label="Right", scale=4)
            slider = gr.ImageSlider(format="png", type="numpy", label="Slider", max_height=520)
            table = gr.Dataframe(
                headers=compare.TABLE_HEADERS,
                elem_id="results-table",
                label="Results",
                interactive=False,
                wrap=False,
            )
    # Zoom across the page's whole width: the overview, then tiles of a fifth of it, captions below them.
    gr.Markdown(f"**Zoom**: click the overview to move the region. {compare.ZOOM_NOTE}")
    region = gr.Image(
        label="Overview", show_label=False, interactive=False, format="png", height=260, buttons=[]
    )
    grid = gr.Gallery(
        label="Zoomed region",
        elem_id="zoom-gallery",
        show_label=False,
        format="png",
        columns=5,
        height="auto",
        object_fit="contain",
        buttons=["fullscreen"],
    )
    files = gr.File(file_count="multiple", label="Full-resolution PNGs")
    state = gr.State(None)
    choices_for = functools.partial(_choices_for, zoo_path=zoo_path)
    gr.on(
        [demo.load, backbone.change, scale.change],
        choices_for,
        [backbone, scale],
        [ratio, methods, zoo_note, sparse],
        api_visibility="private",
    )
    ratio.input(
        functools.partial(_methods_for, zoo_path=zoo_path),
        [backbone, scale, ratio],
        [methods],
        api_visibility="private",
    )
    inputs = [image, backbone, scale, ratio, methods, mode, sparse]
    gr.on(
        [image.change, mode.change, methods.change, sparse.change, ratio.change],
        functools.partial(_estimate, zoo_path=zoo_path, cache=image.GRADIO_CACHE),
        inputs,
        [expected],
        api_visibility="private",
        trigger_mode="always_last",
        concurrency_id="estimate",
        preprocess=False,
    )
    flag, image_cache = gr.State(None), image.GRADIO_CACHE

    def upscale(
        image: Any,
        backbone: Any,
        scale: Any,
        ratio: Any,
        methods: Any,
        mode: Any,
        sparse: Any,
        stop: threading.Event | None,
        request: gr.Request,
        progress: gr.Progress = gr.Progress(),  # noqa: B008  (Gradio's way to ask for a progress bar)
    ) -> Iterator[tuple]:  # a plain function: Gradio gives gr.Request only to those (not partials)
        yield from _run_compare(
            image, backbone, scale, ratio, methods, mode, sparse, stop, _visitor(request), progress,
            zoo_path=zoo_path, cache=image_cache,
        )  # fmt: skip

    run.click(_arm, None, [flag], api_visibility="private", concurrency_limit=None).then(
        upscale,
        [*inputs, flag],
        [slider, region, grid, table, files, status, left, right, state],
        api_name="upscale",
        concurrency_limit=None,  # never in Gradio's queue: TURNS orders comparisons, one per visitor
        preprocess=False,
    )
    halt.click(_request_stop, [flag], None, api_visibility="private", concurrency_limit=None)
    left.input(_repair, [state, left, right], [slider], api_visibility="private")
    right.input(_repair, [state, left, right], [slider], api_visibility="private")
    swap.click(lambda a, b: (b, a), [left, right], [left, right], api_visibility="private").then(
        _repair, [state, left, right], [slider], api_visibility="private"
    )
    region.select(_zoom, [state], [region, grid], api_visibility="private")
    demo.load(
        functools.partial(_first, arch0, zoo_path),
        None,
        [slider, region, grid, table, files, status, left, right, state, image],
        api_visibility="private",
        concurrency_limit=None,  # computed once per process; the lock in first_comparison serialises it
    )


# --------------------------------------------------------------------------------------------------- analysis


@gpu(duration=300)
def _train(
    backbone: str,
    scale: int,
    ratio: float,
    alpha: float,
    iterations: int,
    prune_iters: int,
    patch: int,
    batch: int,
    layers: list[str] | None,
    start: str,
    stop: threading.Event | None = None,
    data_dir: str | None = None,
) -> Iterator[tuple]:
    """``/train``: stream ISS-P vs IHT figures; Stop ends it within a layer, keeping the plots."""
    try:
        yield from analysis.train_live(
            backbone, scale, ratio, alpha, iterations, prune_iters, patch, batch, layers, start,
            data_dir=data_dir, stop=stop,
        )  # fmt: skip
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise _error(e) from None
    finally:  # ended, stopped or cancelled: the two runs' models, Adam states and activations go back
        cost.release_memory()


def _live(
    settings: tuple,
    stop: threading.Event | None,
    request: gr.Request,
    *,
    demo: gr.Blocks,
    data_dir: str | None,
) -> Iterator[tuple]:
    """``/train`` as visitors share it: admitted at once or refused in one line (``LIVE``), and stopped
    when nobody reads its updates (a client that never opened the event stream, or left)."""
    session, address = _visitor(request)
    stop = stop or threading.Event()  # an API call has no Stop button, but shutdown stops it too
    try:
        with LIVE.admit(session, address, stop):
            run = _train(*settings, stop, data_dir=data_dir)
            try:
                for update in run:
                    yield update
                    if _unread(demo, session) >= UNHEARD:
                        LOG.warning("stopped a live run nobody reads (session %s)", session[:8])
                        return
            finally:
                run.close()
    except admission.Refused as e:
        raise _error(e) from None


def _unread(demo: gr.Blocks, session: str) -> int:
    """Messages of ``session`` that no client has read yet (Gradio's per-session queue of updates)."""
    pending = demo._queue.pending_messages_per_session.get(session)
    return pending.qsize() if pending is not None else 0


def _arm() -> threading.Event:
    """A fresh stop flag for the run about to start (Stop sets it)."""
    return threading.Event()


def _request_stop(flag: threading.Event | None) -> None:
    """Stop: the running live run ends within a layer of its step, with a last update."""
    if flag is not None:
        flag.set()


def _plan(backbone: str, scale: int, iterations: Any, patch: int, batch: int, start: str) -> str:
    """The expected time and memory of a live run, before it runs (or why it cannot run)."""
    try:
        return analysis.plan_live_run(backbone, scale, iterations, patch, batch, start).describe()
    except (ValueError, KeyError, FileNotFoundError) as e:
        return f"⚠️ {e.args[0] if isinstance(e, KeyError) and e.args else e}"


def _layer_names(backbone: str, scale: int) -> list[str]:
    """``/layers``: the prunable weights of a backbone at a scale (what ``/train``'s layers takes)."""
    try:
        return analysis.prunable_layers(backbone, int(scale))
    except (KeyError, ValueError) as e:
        raise _error(e) from None


def _layer_choices(layers: list[str]) -> Any:
    """The layer picker for a backbone's layers, two representative ones selected."""
    return gr.update(choices=layers, value=analysis.default_layers(layers))


def _start_settings(start: str) -> tuple:
    """Controls as a recorded start point sets them (locked: the run uses the recording's), or the live
    defaults, editable, for random init."""
    settings = analysis.start_settings(start)
    if settings is None:  # random init: the live defaults, editable
        settings, editable = analysis.LIVE_DEFAULTS, True
    else:
        editable = False
    keys = ("arch", "scale", "ratio", "alpha", "prune_iters")
    return (
        *(gr.update(value=settings[k], interactive=editable) for k in keys),
        *(gr.update(value=settings[k]) if k in settings else gr.update() for k in ("batch", "patch")),
    )


def _recorded(name: str | None, layers: list[str] | None, zoo_path: str | None = None) -> tuple:
    """``/recorded``: the three analysis figures of a bundled recording, whole."""
    if not name:
        return gr.update(), gr.update(), gr.update(), "No recorded run bundled."
    try:
        return analysis.recorded_figures(name, layers, zoo_path)
    except KeyError as e:
        raise _error(e) from None


def _recorded_layers(name: str | None) -> Any:
    """Layer picker choices for a recording (every layer it traced)."""
    if not name:
        return gr.update()
    layers = analysis.recording_layers(name)
    return gr.update(choices=layers, value=analysis.default_layers(layers))


def _caption(key: str) -> gr.Markdown:
    """The one line under a plot saying what it shows and what to look for."""
    return gr.Markdown(figures.CAPTIONS[key], elem_classes="plot-caption")


def analysis_tab(demo: gr.Blocks, data_dir: str | None, zoo_path: str | None) -> None:
    """The bundled recorded runs shown whole (open on the app's default cell's, drawn before any click), then
    a live ISS-P vs IHT run with streamed plots."""
    d = {**analysis.LIVE_DEFAULTS, "start": analysis.default_start()}
    d.update(analysis.start_settings(d["start"]) or {})
    locked = d["start"] != analysis.RANDOM_INIT
    layers0 = analysis.prunable_layers(d["arch"], d["scale"])
    rec0 = analysis.default_recording(zoo_path)
    rec_layers0 = analysis.recording_layers(rec0) if rec0 else []
    shown = analysis.recorded_figures(rec0, None, zoo_path) if rec0 else (None, None, None, "")
    note = analysis.opening_note(zoo_path)
    with gr.Accordion("Recorded runs (whole): ISS-P vs IHT through a zoo training", open=True):
        with gr.Row():
            rec = gr.Dropdown(analysis.recording_choices(zoo_path), value=rec0, label="Recording", scale=3)
            rec_layers = Names(
                rec_layers0,
                value=analysis.default_layers(rec_layers0),
                multiselect=True,
                allow_custom_value=True,
                label="Layers to plot",
                scale=3,
            )
            show = gr.Button("Show", scale=1)
        rec_status = gr.Markdown("\n\n".join(t for t in (note, shown[3]) if t), label="Recording")
        rec_flips = gr.Plot(shown[0], label="Recorded mask dynamics", elem_id="recorded-mask")
        _caption("mask")
        rec_grads = gr.Plot(shown[1], label="Recorded gradients", elem_id="recorded-gradients")
        _caption("gradients")
        rec_training = gr.Plot(shown[2], label="Recorded training", elem_id="recorded-training")
        _caption("training")
    gr.Markdown(
        "### Live: ISS-P vs IHT on this machine\n"
        "ISS-P and IHT start from the **same weights** and see the **same batches**. From random init both "
        "masks barely move for the first ~1,500 iterations; the contrast of the paper's Fig. 3 lives in the "
        "long pruning stage, so a live run starts by default from a recorded mid-pruning state (random init "
        "is in *Start from*)."
    )
    with gr.Row():
        with gr.Column(scale=1, min_width=300):
            start = gr.Dropdown(analysis.recorded_states(), value=d["start"], label="Start from")
            with gr.Row():
                backbone = gr.Dropdown(
                    iss.archs.list_archs(), value=d["arch"], label="Backbone", interactive=not locked
                )
                scale = IntRadio(
                    list(catalog.SCALES), value=d["scale"], label="Scale", interactive=not locked
                )
            ratio = Bounded(
                0.5, 0.99, value=d["ratio"], step=0.01, label="Pruning ratio", interactive=not locked
            )
            alpha = Bounded(
                0.5, 0.999, value=d["alpha"], step=0.001, label="alpha (ISS-P shrink factor)",
                interactive=not locked,
            )  # fmt: skip
            with gr.Row():
                iterations = WholeNumber(d["iterations"], precision=0, label="Iterations", minimum=1)
                prune_iters = WholeNumber(
                    d["prune_iters"], precision=0, label="K_p (pruning iterations)", minimum=1,
                    interactive=not locked,
                )  # fmt: skip
            with gr.Row():
                patch = Bounded(8, analysis.MAX_PATCH, value=d["patch"], step=8, label="LR patch")
                batch = Bounded(1, analysis.MAX_BATCH, value=d["batch"], step=1, label="Batch")
            layers = Names(
                layers0,
                value=analysis.busiest_layers(d["start"]) or analysis.default_layers(layers0),
                multiselect=True,
                allow_custom_value=True,
                label="Layers to plot",
            )
            plan = gr.Markdown()
            with gr.Row():
                go = gr.Button("Train ISS-P vs IHT", variant="primary")
                stop = gr.Button("Stop", variant="stop")
        with gr.Column(scale=2):
            status = gr.Markdown("Press **Train** to start.", label="Status")
            flips = gr.Plot(label="Mask dynamics", elem_id="live-mask")
            _caption("mask")
            grads = gr.Plot(label="Gradients", elem_id="live-gradients")
            _caption("gradients")
            training = gr.Plot(label="Training", elem_id="live-training")
            _caption("training")
    flag = gr.State(None)
    fixed = [backbone, scale, ratio, alpha, prune_iters, batch, patch]
    start.change(_start_settings, [start], fixed, api_visibility="private")
    layer_names = gr.JSON(visible=False, label="Layers")
    gr.on(
        [backbone.change, scale.change], _layer_names, [backbone, scale], [layer_names], api_name="layers"
    ).then(_layer_choices, [layer_names], [layers], api_visibility="private")
    sizes = [backbone, scale, iterations, patch, batch, start]
    gr.on(
        [demo.load, *(component.change for component in sizes)],
        _plan,
        sizes,
        [plan],
        api_visibility="private",
        trigger_mode="always_last",
        concurrency_id="plan",
    )

    def train(
        backbone: str,
        scale: int,
        ratio: float,
        alpha: float,
        iterations: int,
        prune_iters: int,
        patch: int,
        batch: int,
        layers: list[str] | None,
        start: str,
        stop: threading.Event | None,
        request: gr.Request,
    ) -> Iterator[tuple]:  # a plain function: Gradio gives gr.Request only to those (not partials)
        settings = (backbone, scale, ratio, alpha, iterations, prune_iters, patch, batch, layers, start)
        yield from _live(settings, stop, request, demo=demo, data_dir=data_dir)

    go.click(_arm, None, [flag], api_visibility="private", concurrency_limit=None).then(
        train,
        [backbone, scale, ratio, alpha, iterations, prune_iters, patch, batch, layers, start, flag],
        [flips, grads, training, status],
        api_name="train",
        concurrency_limit=None,  # never queued: LIVE admits or refuses it at once
    ).then(_plan, sizes, [plan], api_visibility="private")  # the estimate, with the speed just measured
    stop.click(_request_stop, [flag], None, api_visibility="private", concurrency_limit=None)
    rec.change(_recorded_layers, [rec], [rec_layers], api_visibility="private")
    rec_outputs = [rec_flips, rec_grads, rec_training, rec_status]
    recorded = functools.partial(_recorded, zoo_path=zoo_path)
    show.click(recorded, [rec, rec_layers], rec_outputs, api_name="recorded")
    rec.input(recorded, [rec, gr.State(None)], rec_outputs, api_visibility="private")


# --------------------------------------------------------------------------------------------------- sparsity


def _sparsity(name: Any, layer: Any, zoo_path: str | None = None) -> tuple:
    """``/sparsity``: where a zoo checkpoint keeps its weights, and magnitude histograms.

    Wired with ``preprocess=False``, so that a client's wrong value gets one line from here.
    """
    if not name:
        return gr.update(), gr.update(), gr.update()
    try:
        if not isinstance(name, str) or not isinstance(layer, str | None):
            raise ValueError(f"checkpoint and layer must be names, got {name!r:.40} and {layer!r:.40}")
        structure, hist, layers = sparsity.sparsity_view(name, layer or None, zoo_path)
    except (ValueError, KeyError, FileNotFoundError, OSError) as e:
        raise _error(e) from None
    return structure, hist, gr.update(choices=layers, value=layer if layer in layers else None)


def sparsity_tab(tab: gr.Tab, zoo_path: str | None) -> None:
    """Where a checkpoint keeps its weights (drawn on opening the tab); the zoo beside the paper's tables."""
    names = [e.name for e in sparsity.sorted_entries(zoo_path)]  # by backbone, scale, ratio, method
    if not names:
        gr.Markdown("No checkpoint zoo found (`checkpoints/zoo.json`): nothing to inspect yet.")
    with gr.Row():
        ckpt = gr.Dropdown(names, value=sparsity.default_checkpoint(zoo_path), label="Checkpoint")
        layer = Names([], value="", label="Also show the histogram of layer", allow_custom_value=True)
    structure = gr.Plot(label="Where the kept weights sit", elem_id="sparsity-structure")
    _caption("structure")
    hist = gr.Plot(label="Weight magnitudes")
    _caption("histogram")
    gr.Markdown(
        "**Zoo vs paper** (same backbone, scale, ratio and method; zoo budgets are far below the paper's; "
        "bicubic is our measurement, the baseline every method must beat)"
    )
    gr.Dataframe(
        sparsity.zoo_vs_paper(zoo_path),
        headers=sparsity.ZOO_VS_PAPER_HEADERS,
        interactive=False,
        label="Zoo vs paper (Y PSNR/SSIM)",
    )
    gr.on(
        [tab.select, ckpt.change, layer.input],
        functools.partial(_sparsity, zoo_path=zoo_path),
        [ckpt, layer],
        [structure, hist, layer],
        api_name="sparsity",
        trigger_mode="always_last",
        preprocess=False,
    )


# ------------------------------------------------------------------------------------------------------ app


def build_demo(data_dir: str | None = None, zoo_path: str | None = None) -> gr.Blocks:
    """The whole app. ``data_dir`` (or ``$ISS_DATA_DIR``) enables Urban100 examples and real training data;
    ``zoo_path`` is a zoo manifest other than ``checkpoints/zoo.json``."""
    data_dir = data_dir or os.environ.get("ISS_DATA_DIR")
    with gr.Blocks(title="ISS-SR", delete_cache=(3600, 3600)) as demo:
        gr.Markdown(f"## {TITLE}\n{INTRO}")
        with gr.Tabs():
            with gr.Tab("Compare", id="compare"):
                compare_tab(demo, data_dir, zoo_path)
            with gr.Tab("Analysis", id="analysis"):
                analysis_tab(demo, data_dir, zoo_path)
            with gr.Tab("Sparsity", id="sparsity") as tab:
                sparsity_tab(tab, zoo_path)
    demo.queue(default_concurrency_limit=1, max_size=QUEUE_SIZE)
    return demo


def delete_cache_files(demo: gr.Blocks) -> None:
    """Delete every file this app put in Gradio's cache (uploads, results, example copies) and the folders
    left empty."""
    files = {Path(f) for found in demo.temp_file_sets for f in found}
    files |= {Path(f) for block in demo.blocks.values() for f in getattr(block, "keep_in_cache", ())}
    for path in files:
        with contextlib.suppress(OSError):
            path.unlink()
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only if empty


def own_cache() -> Path:
    """A new folder of this process's own for Gradio's cache (uploads, example copies, results), inside
    ``$GRADIO_TEMP_DIR`` or the temp folder, and set as ``$GRADIO_TEMP_DIR``: another copy of the app that
    cleans up at exit never touches it. The caller removes it at exit."""
    parent = os.environ.get("GRADIO_TEMP_DIR") or None
    if parent:
        Path(parent).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="iss-sr-app-", dir=parent))
    os.environ["GRADIO_TEMP_DIR"] = str(folder)
    return folder


def shut_down(demo: gr.Blocks, cache: Path | None = None, code: int = 0, seconds: float = 2.0) -> None:
    """End the process now that the server is asked to stop: live runs stopped, the server closed (waiting
    at most ``seconds``), every file this app put in Gradio's cache deleted, then ``os._exit``: threads still
    inside torch (a comparison, a run's last layer) would otherwise abort the interpreter's own exit."""
    LIVE.stop_all()
    closing = threading.Thread(target=demo.close, daemon=True)
    closing.start()
    closing.join(seconds)
    delete_cache_files(demo)
    for folder in FOLDERS:
        shutil.rmtree(folder, ignore_errors=True)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)  # this process's own folder only
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


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
    cache = own_cache()
    demo = build_demo(args.data_dir, args.zoo)
    _first(catalog.default_backbone(args.zoo), args.zoo)  # before serving: no visitor waits for it
    # SIGTERM (a stopped Space or container) shuts down at once, without Gradio's wait for open connections
    signal.signal(signal.SIGTERM, lambda signum, frame: shut_down(demo, cache))
    code = 1
    try:
        demo.launch(server_name=args.host, server_port=args.port, theme=gr.themes.Soft(), **LIMITS)
        code = 0
    except KeyboardInterrupt:
        code = 0
    except OSError as e:
        if "port" not in str(e).lower():
            traceback.print_exc()
        else:
            taken = f"port {args.port} on {args.host} is taken: start with --port N, a free one"
            print(taken, file=sys.stderr)
            code = 2
    except Exception:
        traceback.print_exc()
    finally:  # Gradio's own shutdown may not finish its cleaning before the exit
        shut_down(demo, cache, code)


if __name__ == "__main__":
    main()
