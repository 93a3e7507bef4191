"""Training: the one loop (``train``, ``Trainer``) that the CLI, the zoo factory and the app's live run drive.

:mod:`.config` holds ``TrainConfig`` and its presets, :mod:`.loop` the loop and its fast-path pick (bf16,
``torch.compile``), :mod:`.recording` the per-iteration ISS-P vs IHT telemetry the Analysis tab plots, and
:mod:`.cli` ``python -m iss train``.
"""

from .config import PRESETS, TrainConfig
from .loop import NonFiniteLossError, Trainer, TrainEvent, train

__all__ = ["PRESETS", "NonFiniteLossError", "TrainConfig", "TrainEvent", "Trainer", "train"]
