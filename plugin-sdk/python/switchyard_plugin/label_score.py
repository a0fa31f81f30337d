"""Plugins that score a node by the value of one of its labels alone (a topology
domain: rack, zone, GPU island). Such a plugin sets `score_node_label` and defines
`label_scores(cycle)`, returning {label value: raw score} (values not listed, and
nodes without the label, score 0) or a Status (Skip skips Score for the pod); it
defines no pre_score, score or normalize_score, and normalises with its
`score_normalization` ("default", "default_reverse", or none: raw scores in 0..100).

The SDK serves it as PreScore and Score: a scheduler that knows `score_node_label`
asks for the table as the cycle starts, while its own Filter runs, and scores the
feasible nodes itself, with no Score call: one round trip that overlaps the
scheduler's work and no per-node work here. `label_scores` reads no node list: the
nodes that pass Filter are not known yet when the scheduler asks.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .snapshot import quote
from .status import PluginError, Status, as_status


class LabelTable(dict):
    """A label-scoring plugin's cycle state: this attempt's raw scores by value.
    Nothing changes it after PreScore, so a fork shares it."""

    def clone(self) -> "LabelTable":
        return self


class LabelScored:
    """A label-scoring plugin served as pre_score and score; every other attribute is
    the plugin's."""

    def __init__(self, plugin: Any):
        object.__setattr__(self, "_plugin", plugin)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._plugin, name)

    def pre_score(self, cycle, state, nodes) -> Status:
        r = self._plugin.label_scores(cycle)
        if r is None or isinstance(r, Status):
            s = as_status(r, "label_scores")
            if not s.is_success:
                return s
            r = {}
        if not isinstance(r, dict):
            raise PluginError(
                Status.error(f"label_scores of plugin {quote(self._plugin.name)} returned {type(r).__name__}, not a dict")
            )
        state.value = LabelTable({str(k): int(v) for k, v in r.items()})
        return Status.success()

    def score(self, cycle, state, node) -> Any:
        table = state.value
        if not isinstance(table, LabelTable):
            return Status.error(f"plugin {quote(self._plugin.name)}: Score before its PreScore in this cycle")
        return table.get(node.node.labels.get(self._plugin.score_node_label, None), 0)


def label_scored(plugin: Any) -> Any:
    """`plugin` served as pre_score and score when it scores by a node label (after
    checking it), else `plugin` itself."""
    label = getattr(plugin, "score_node_label", None)
    if label is None:
        return plugin
    name = getattr(plugin, "name", "")
    if not isinstance(label, str) or not label:
        raise ValueError(f"plugin {quote(name)} declares score_node_label = {label!r}: name a node label key")
    if not callable(getattr(plugin, "label_scores", None)):
        raise ValueError(f"plugin {quote(name)} declares score_node_label but defines no label_scores(cycle)")
    if callable(getattr(plugin, "pre_filter", None)):
        raise ValueError(
            f"plugin {quote(name)} scores by a node label and has a pre_filter: its label scores are "
            "asked for as the cycle starts, before PreFilter, and keep the cycle state; serve the "
            "pre_filter from a plugin of its own"
        )
    for m in ("pre_score", "score", "normalize_score"):
        if callable(getattr(plugin, m, None)):
            raise ValueError(
                f"plugin {quote(name)} scores by a node label and also defines {m}: the label "
                "scores are its PreScore and Score, drop the others"
            )
    return LabelScored(plugin)


def reply_table(plugin: Any, state) -> Optional[Dict[str, int]]:
    """The table a label-scoring plugin's PreScore kept, for its reply."""
    if not isinstance(plugin, LabelScored) or not isinstance(state.value, LabelTable):
        return None
    return state.value
