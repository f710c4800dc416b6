"""Responses item ids, resolved once at the stream boundary (docs/rules.md §2).

Theory of operation
-------------------
Every upstream Responses SSE event goes through ``ResponsesNormalizer.feed`` before anything
else looks at it.  Afterwards the rest of the pipeline may assume: every item has an ``id``,
and every per-item event that could be placed has an ``item_id``.  There is no second
identity path (no ``id ?? call_id``, no ``call_id`` scans) anywhere downstream.

State is one dict, *slots*: ``output_index → item id``, filled by every item we resolve.

What ``feed`` does, by event shape (it mutates the event in place and returns it):

============================================  ===============================================
event                                         action
============================================  ===============================================
``response.completed/incomplete/failed``      resolve ``response.output[i]`` in slot ``i``
has ``item`` (``output_item.added/.done``)    resolve the item in slot ``output_index``
``item_id`` that is not a string              removed (``responses_malformed_field_dropped``),
                                              then as if it had never been there
no ``item_id``, has ``output_index``          delta remap: ``item_id := slots[output_index]``
(``*.delta``, ``*.done``, ``content_part.*``)  (left alone when the slot is unknown)
anything else                                 untouched
============================================  ===============================================

So afterwards every item ``id`` and every ``item_id`` present is a string (an upstream's
hostile event cannot make the decoder index its tables with a list or a dict).

Resolving one item (mirrors Codex's ``assign_missing_streamed_response_item_id``):

1. a stray ``output_index`` key inside the item is removed (Bedrock Mantle adds one; it is
   used as the slot when the event itself has none);
2. an ``item_id`` key inside the item is the id's old name: it becomes ``id`` when ``id`` is
   missing, and is removed either way;
3. still no id: adopt the id registered in the item's slot;
4. still no id: mint ``<prefix><32 random hex digits>`` with the prefix from ``ID_PREFIX``;
5. the slot now holds the item's id.

Each repair is reported through ``ctx.repaired`` (``responses_stray_output_index``,
``responses_item_id_adopted``, ``responses_item_id_minted``,
``responses_delta_item_id_remap``) when a ``Ctx`` is given; the delta remap is reported
once per slot, not once per delta, so a Mantle stream does not grow the list per event.
"""

from __future__ import annotations

from typing import Any

from .ids import ordered_hex

__all__ = ["ResponsesNormalizer", "ID_PREFIX", "DEFAULT_PREFIX"]

# item type → prefix of a minted id (ctc_ is our choice for custom tool calls, docs/rules.md §2)
ID_PREFIX: dict[str, str] = {
    "function_call": "fc_",
    "message": "msg_",
    "reasoning": "rs_",
    "compaction": "cmp_",
    "custom_tool_call": "ctc_",
}
DEFAULT_PREFIX = "item_"

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_MISSING = object()


def _noop(rule: str) -> None:
    return None


class ResponsesNormalizer:
    __slots__ = ("_slots", "_remapped", "_rep")

    def __init__(self, ctx: Any = None) -> None:
        self._slots: dict[Any, str] = {}
        self._remapped: set[int] = set()  # slots whose delta remap was already reported
        self._rep = ctx.repaired if ctx is not None else _noop

    def feed(self, event: dict[str, Any]) -> dict[str, Any]:
        t = event.get("type")
        if t.__class__ is str and t in _TERMINAL:
            resp = event.get("response")
            if resp.__class__ is dict:
                output = resp.get("output")
                if output.__class__ is list:
                    for i, it in enumerate(output):
                        if it.__class__ is dict:
                            self._resolve(it, i)
            return event
        item = event.get("item")
        if item is not None:
            if item.__class__ is dict:
                self._resolve(item, event.get("output_index"))
            return event
        iid = event.get("item_id")
        if iid is not None:
            if iid.__class__ is str:
                if iid:
                    return event
            else:  # not an id at all: as if absent
                del event["item_id"]
                self._rep("responses_malformed_field_dropped")
        oi = event.get("output_index")
        if oi is not None:
            iid = self._slots.get(oi) if oi.__class__ is int else None
            if iid is not None:
                event["item_id"] = iid
                if oi not in self._remapped:
                    self._remapped.add(oi)
                    self._rep("responses_delta_item_id_remap")
        return event

    def _resolve(self, item: dict[str, Any], slot: Any) -> None:
        stray = item.pop("output_index", _MISSING)
        if stray is not _MISSING:
            self._rep("responses_stray_output_index")
            if slot is None:
                slot = stray
        if slot.__class__ is not int:
            slot = None
        iid = item.get("id")
        old = item.pop("item_id", None)
        if not iid or iid.__class__ is not str:
            if old and old.__class__ is str:
                iid = old
                self._rep("responses_item_id_adopted")
            elif slot is not None and (iid := self._slots.get(slot)) is not None:
                self._rep("responses_item_id_adopted")
            else:
                t = item.get("type")
                iid = (ID_PREFIX.get(t, DEFAULT_PREFIX) if t.__class__ is str else DEFAULT_PREFIX) + ordered_hex()
                self._rep("responses_item_id_minted")
            item["id"] = iid
        if slot is not None:
            self._slots[slot] = iid
