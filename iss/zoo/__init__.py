"""The checkpoint zoo: what is trained (:mod:`.plan`), by whom (:mod:`.factory`, carried to a GPU by
:mod:`.pack`), what was made (:mod:`.manifest`, ``checkpoints/zoo.json``, on the Hub through :mod:`iss.hub`)
and how a user gets one (:mod:`.pretrained`: ``iss.load``); :mod:`.tables` renders it and :mod:`.publish`
writes its model card and pushes it; :mod:`.cli` is ``python -m iss zoo``.

The manifest's API is re-exported here: ``iss.zoo.load_zoo()``, ``iss.zoo.locate(entry)``, ...
"""

from .manifest import (
    DEFAULT_HUB_REPO,
    DEFAULT_ZOO,
    METHOD_ORDER,
    HubRef,
    Resolved,
    ZooEntry,
    load_zoo,
    locate,
    locate_all,
    merge_entries,
    resolve,
    upgrade_bundled,
    verify,
)
from .publish import model_card, pin_manifest, push_zoo, stage_push
from .tables import format_table, glance_table, markdown_table, overview_table

__all__ = [
    "DEFAULT_HUB_REPO",
    "DEFAULT_ZOO",
    "METHOD_ORDER",
    "HubRef",
    "Resolved",
    "ZooEntry",
    "format_table",
    "glance_table",
    "load_zoo",
    "locate",
    "locate_all",
    "markdown_table",
    "merge_entries",
    "model_card",
    "overview_table",
    "pin_manifest",
    "push_zoo",
    "resolve",
    "stage_push",
    "upgrade_bundled",
    "verify",
]
