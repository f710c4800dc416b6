"""ResponsesStreamEncoder: unified events → Responses client stream (docs/rules.md §3 inbound, §5.3–5.5, §7.2)."""

from __future__ import annotations

import copy
import itertools
import json
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformers import envelope
from transformers import responses_encode as renc
from transformers.context import Ctx
from transformers.errors import stream_error
from transformers.events import (
    Finish,
    Passthrough,
    Reasoning,
    ReasoningEnd,
    Refusal,
    Start,
    Text,
    ToolCall,
    ToolCallEnd,
    Usage,
)
from transformers.responses_encode import ResponsesStreamEncoder, encode_response
from transformers.usage import normalize_responses

try:  # cheap insurance that the openai SDK parses what we emit
    import pydantic
    from openai import omit
    from openai.lib.streaming.responses._responses import ResponseStreamState
    from openai.types.responses import Response as SDKResponse
    from openai.types.responses import ResponseStreamEvent

    _SDK_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
except ImportError:  # pragma: no cover
    _SDK_EVENT = None

TERMINALS = {"response.completed", "response.incomplete", "response.failed"}
ZERO_USAGE = normalize_responses(None)
USAGE = {
    "input_tokens": 12,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 2,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 14,
}


NOW = 1700000042  # the encoder's clock (completed_at) in these tests


@pytest.fixture(autouse=True)
def _ids(monkeypatch):
    """Deterministic minted ids: h1, h2, … in mint order; a fixed clock."""
    n = itertools.count(1)
    monkeypatch.setattr(renc, "_hex", lambda: f"h{next(n)}")
    monkeypatch.setattr(renc, "_now", lambda: NOW)


# ---------------------------------------------------------------------- helpers


def _sdk_fix(ev: dict) -> dict:
    # the SDK's ResponseError.code is a closed Literal of OpenAI's own codes; Codex and the
    # SDK's streaming path (construct without validation) accept any string
    ev = copy.deepcopy(ev)
    r = ev.get("response")
    if isinstance(r, dict) and isinstance(r.get("error"), dict):
        r["error"]["code"] = "server_error"
    return ev


def sdk_check(events: list[dict], final: dict) -> None:
    if _SDK_EVENT is None:
        return
    for ev in events:
        _SDK_EVENT.validate_python(_sdk_fix(ev))
    SDKResponse.model_validate(_sdk_fix({"response": final})["response"])
    # and the SDK's own stream accumulator (client.responses.stream) digests the stream
    state = ResponseStreamState(input_tools=omit, text_format=omit)
    for ev in events:
        state.handle_event(_SDK_EVENT.validate_python(_sdk_fix(ev)))


def invariants(events: list[dict], final: dict) -> None:
    """Stream-wide rules every test stream must obey (docs/rules.md §5.3/§7.2, F7)."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[1]["type"] == "response.in_progress"
    assert events[-1]["type"] in TERMINALS
    assert sum(e["type"] in TERMINALS for e in events) == 1
    assert events[-1]["response"] is final
    rids = {e["response"]["id"] for e in events if "response" in e}
    assert len(rids) == 1 and next(iter(rids)).startswith("resp_")
    added = [e for e in events if e["type"] == "response.output_item.added"]
    done = [e for e in events if e["type"] == "response.output_item.done"]
    assert [e["output_index"] for e in added] == list(range(len(added)))
    by_oi = {e["output_index"]: e["item"] for e in done}
    if final["status"] == "completed":
        assert len(added) == len(done)
    for a in added:
        if a["output_index"] in by_oi:
            assert a["item"].get("id") == by_oi[a["output_index"]].get("id")
        else:
            # only a tool call the upstream never finished stays open on a failed/incomplete
            # turn: Codex would run a call that reaches output_item.done
            assert final["status"] != "completed"
            assert a["item"]["type"] in ("function_call", "custom_tool_call")
    assert final["output"] == [by_oi[i] for i in sorted(by_oi)]
    # every delta / sub-event refers to an item that is open at that point
    open_ids: dict[str, int] = {}
    for e in events:
        if e["type"] == "response.output_item.added":
            open_ids[e["item"]["id"]] = e["output_index"]
        elif e["type"] == "response.output_item.done":
            open_ids.pop(e["item"]["id"])
        elif "item_id" in e:
            assert open_ids.get(e["item_id"]) == e["output_index"], e
    assert final["status"] != "completed" or not open_ids


def run(events, ctx: Ctx | None = None, *, end: bool = False, **kw):
    ctx = ctx or Ctx(public_model="kimi-k2.6")
    enc = ResponsesStreamEncoder(ctx, **kw)
    out: list[dict] = []
    for ev in events:
        out.extend(enc.feed(ev))
    if end:
        out.extend(enc.end())
    assert enc.done
    invariants(out, enc.response)
    sdk_check(out, enc.response)
    return out, enc


def resp(status, output, usage=None, rid="resp_1", model="kimi-k2.6", created=1700000000, **extra):
    r = {
        "id": rid,
        "object": "response",
        "created_at": created,
        "status": status,
        "completed_at": NOW if status == "completed" else None,
        "model": model,
        "output": output,
        "error": None,
        "incomplete_details": None,
        "background": False,
        "frequency_penalty": 0.0,
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "parallel_tool_calls": True,
        "presence_penalty": 0.0,
        "previous_response_id": None,
        "prompt_cache_key": None,
        "safety_identifier": None,
        "service_tier": "default",
        "store": False,
        "temperature": 1.0,
        "tool_choice": "auto",
        "top_logprobs": 0,
        "top_p": 1.0,
        "truncation": "disabled",
        "metadata": {},
        "tools": [],
        "text": {"format": {"type": "text"}},
        "reasoning": {"effort": None, "summary": None},
        "usage": usage,
    }
    r.update(extra)
    return r


def seqd(evs: list[dict]) -> list[dict]:
    return [dict(e, sequence_number=i) for i, e in enumerate(evs)]


def head(rid="resp_1", **kw):
    return [
        {"type": "response.created", "response": resp("in_progress", [], rid=rid, **kw)},
        {"type": "response.in_progress", "response": resp("in_progress", [], rid=rid, **kw)},
    ]


START = Start(response_id="resp_1", model="upstream-model", created=1700000000)


def fc_item(status, call_id, name, args, iid=None, namespace=None):
    it = {
        "id": iid or "fc_" + call_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": args,
    }
    if namespace:
        it["namespace"] = namespace
    return it


def fc_events(oi, call_id, name, deltas, final=None, iid=None, namespace=None):
    iid = iid or "fc_" + call_id
    final = "".join(deltas) if final is None else final
    evs = [
        {
            "type": "response.output_item.added",
            "output_index": oi,
            "item": fc_item("in_progress", call_id, name, "", iid, namespace),
        }
    ]
    evs += [
        {"type": "response.function_call_arguments.delta", "item_id": iid, "output_index": oi, "delta": d}
        for d in deltas
    ]
    done = {
        "type": "response.function_call_arguments.done",
        "item_id": iid,
        "output_index": oi,
        "arguments": final,
        "name": name,
        "call_id": call_id,
    }
    if namespace:
        done["namespace"] = namespace
    evs.append(done)
    evs.append(
        {
            "type": "response.output_item.done",
            "output_index": oi,
            "item": fc_item("completed", call_id, name, final, iid, namespace),
        }
    )
    return evs


def msg_events(oi, mid, deltas, status="completed"):
    text = "".join(deltas)
    part0 = {"type": "output_text", "text": "", "annotations": []}
    part = {"type": "output_text", "text": text, "annotations": []}
    return [
        {
            "type": "response.output_item.added",
            "output_index": oi,
            "item": {"id": mid, "type": "message", "role": "assistant", "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", "item_id": mid, "output_index": oi, "content_index": 0, "part": part0},
        *[
            {
                "type": "response.output_text.delta",
                "item_id": mid,
                "output_index": oi,
                "content_index": 0,
                "delta": d,
                "logprobs": [],
            }
            for d in deltas
        ],
        {
            "type": "response.output_text.done",
            "item_id": mid,
            "output_index": oi,
            "content_index": 0,
            "text": text,
            "logprobs": [],
        },
        {"type": "response.content_part.done", "item_id": mid, "output_index": oi, "content_index": 0, "part": part},
        {
            "type": "response.output_item.done",
            "output_index": oi,
            "item": {"id": mid, "type": "message", "role": "assistant", "status": status, "content": [part]},
        },
    ]


def msg_item(mid, text, status="completed"):
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def rs_events(oi, rid, deltas, blob=None):
    text = "".join(deltas)
    item = {"id": rid, "type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}
    if blob:
        item["encrypted_content"] = blob
    return [
        {
            "type": "response.output_item.added",
            "output_index": oi,
            "item": {"id": rid, "type": "reasoning", "summary": []},
        },
        {
            "type": "response.reasoning_summary_part.added",
            "item_id": rid,
            "output_index": oi,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": ""},
        },
        *[
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": rid,
                "output_index": oi,
                "summary_index": 0,
                "delta": d,
            }
            for d in deltas
        ],
        {
            "type": "response.reasoning_summary_text.done",
            "item_id": rid,
            "output_index": oi,
            "summary_index": 0,
            "text": text,
        },
        {
            "type": "response.reasoning_summary_part.done",
            "item_id": rid,
            "output_index": oi,
            "summary_index": 0,
            "part": {"type": "summary_text", "text": text},
        },
        {"type": "response.output_item.done", "output_index": oi, "item": item},
    ]


def completed(output, usage=ZERO_USAGE, **kw):
    return {"type": "response.completed", "response": resp("completed", output, usage, **kw)}


def failed_tail(code, message, output, param=None, usage=ZERO_USAGE):
    return [
        {
            "type": "error",
            "code": code,
            "message": message,
            "param": param,
            "error": {"type": "server_error", "code": code, "message": message, "param": param},
        },
        {
            "type": "response.failed",
            "response": resp("failed", output, usage, error={"code": code, "message": message}),
        },
    ]


# ---------------------------------------------------------------------- exact streams


def test_s5_4_text_stream():
    out, enc = run([START, Text("Hel"), Text("lo"), Usage(USAGE), Finish()])
    assert out == seqd(
        head() + msg_events(0, "msg_h1", ["Hel", "lo"]) + [completed([msg_item("msg_h1", "Hello")], USAGE)]
    )
    assert enc.response["output"][0]["content"][0]["text"] == "Hello"


def test_s5_4_reasoning_then_function_call():
    u = {
        "input_tokens": 900,
        "input_tokens_details": {"cached_tokens": 800},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 12},
        "total_tokens": 930,
    }
    out, _ = run(
        [
            START,
            Reasoning("Need "),
            Reasoning("ls."),
            ToolCall(0, call_id="call_1", name="shell_command"),
            ToolCall(0, arguments='{"command":'),
            ToolCall(0, arguments='"ls"}'),
            ToolCallEnd(0, arguments='{"command":"ls"}'),
            Usage(u),
            Finish(),
        ]
    )
    rs = rs_events(0, "rs_h1", ["Need ", "ls."])
    fc = fc_events(1, "call_1", "shell_command", ['{"command":', '"ls"}'])
    assert out == seqd(head() + rs + fc + [completed([rs[-1]["item"], fc[-1]["item"]], u)])


@pytest.mark.parametrize(
    "identity_via",
    ["T2-5-identity-delta", "T2-5-identity-in-end"],
)
def test_T2_5_late_identity(identity_via):
    evs = [START, ToolCall(0, call_id="call_L", item_id="fc_L"), ToolCall(0, arguments='{"task":"x"}')]
    if identity_via == "T2-5-identity-delta":
        evs += [ToolCall(0, name="spawn_agent", namespace="collaboration"), ToolCallEnd(0, arguments='{"task":"x"}')]
    else:
        evs += [ToolCallEnd(0, arguments='{"task":"x"}', name="spawn_agent", namespace="collaboration")]
    out, _ = run(evs + [Finish()])
    fc = fc_events(0, "call_L", "spawn_agent", ['{"task":"x"}'], iid="fc_L", namespace="collaboration")
    assert out == seqd(head() + fc + [completed([fc[-1]["item"]])])
    assert sum(e["type"] == "response.output_item.added" for e in out) == 1


@pytest.mark.parametrize("form", ["T2-6-suffix-delta-with-identity", "T2-6-end-only"])
def test_T2_6_identity_only_in_done(form):
    evs = [START, ToolCall(0, call_id="call_L", item_id="fc_L")]
    if form == "T2-6-suffix-delta-with-identity":
        evs += [
            ToolCall(0, arguments='{"task":"x"}', name="spawn_agent", namespace="collaboration"),
            ToolCallEnd(0, arguments='{"task":"x"}'),
        ]
    else:  # a decoder that left the suffix in ToolCallEnd: still streamed, not lost
        evs += [ToolCallEnd(0, arguments='{"task":"x"}', name="spawn_agent", namespace="collaboration")]
    out, _ = run(evs + [Finish()])
    fc = fc_events(0, "call_L", "spawn_agent", ['{"task":"x"}'], iid="fc_L", namespace="collaboration")
    assert out == seqd(head() + fc + [completed([fc[-1]["item"]])])


def test_T2_8_chat_args_before_identity():
    out, _ = run(
        [
            START,
            ToolCall(0, arguments='{"a":'),
            ToolCall(0, call_id="call_9", name="read_file"),
            ToolCall(0, arguments="1}"),
            ToolCallEnd(0, arguments='{"a":1}'),
            Finish(),
        ]
    )
    fc = fc_events(0, "call_9", "read_file", ['{"a":', "1}"])
    assert out == seqd(head() + fc + [completed([fc[-1]["item"]])])
    assert out[2]["item"]["id"] == "fc_call_9"


def test_T2_9_parallel_late_name_keeps_index_order():
    out, _ = run(
        [
            START,
            ToolCall(0, call_id="call_a", arguments='{"p":'),
            ToolCall(1, call_id="call_b", name="b", arguments="{}"),
            ToolCallEnd(1, arguments="{}"),
            ToolCall(0, name="a"),
            ToolCall(0, arguments="1}"),
            ToolCallEnd(0, arguments='{"p":1}'),
            Finish(),
        ]
    )
    a = fc_events(0, "call_a", "a", ['{"p":', "1}"])
    b = fc_events(1, "call_b", "b", ["{}"])
    # call 0 is released first (output_index 0) with its buffered prefix; call 1, already
    # complete, follows at once; call 0's tail and done come after
    expected = head() + a[:2] + b + a[2:] + [completed([a[-1]["item"], b[-1]["item"]])]
    assert out == seqd(expected)
    assert out[-1]["response"]["output"][0]["call_id"] == "call_a"


def test_custom_tool_call_events():
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    out, _ = run(
        [
            START,
            ToolCall(0, call_id="call_2", name="apply_patch", custom=True, arguments=patch[:16]),
            ToolCall(0, arguments=patch[16:]),
            ToolCallEnd(0, arguments=patch),
            Finish(),
        ]
    )
    done_item = {
        "id": "ctc_call_2",
        "type": "custom_tool_call",
        "status": "completed",
        "call_id": "call_2",
        "name": "apply_patch",
        "input": patch,
    }
    assert out == seqd(
        head()
        + [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {
                    "id": "ctc_call_2",
                    "type": "custom_tool_call",
                    "status": "in_progress",
                    "call_id": "call_2",
                    "name": "apply_patch",
                    "input": "",
                },
            },
            {
                "type": "response.custom_tool_call_input.delta",
                "item_id": "ctc_call_2",
                "call_id": "call_2",
                "output_index": 0,
                "delta": patch[:16],
            },
            {
                "type": "response.custom_tool_call_input.delta",
                "item_id": "ctc_call_2",
                "call_id": "call_2",
                "output_index": 0,
                "delta": patch[16:],
            },
            {
                "type": "response.custom_tool_call_input.done",
                "item_id": "ctc_call_2",
                "call_id": "call_2",
                "output_index": 0,
                "input": patch,
            },
            {"type": "response.output_item.done", "output_index": 0, "item": done_item},
            completed([done_item]),
        ]
    )


def test_T2_4_mismatch_final_text_wins_in_done_events():
    a, f = '{"value":9007199254740992}', '{"value":9007199254740993}'
    out, _ = run(
        [
            START,
            ToolCall(0, call_id="call_m", name="f", arguments=a),
            ToolCallEnd(0, arguments=f, mismatch=True),
            Finish(),
        ]
    )
    fc = fc_events(0, "call_m", "f", [a], final=f)
    assert out == seqd(head() + fc + [completed([fc[-1]["item"]])])


@pytest.mark.parametrize(
    "case,before,expect_failed",
    [
        ("S7.2-only-dropped-call", [], True),
        ("S7.2-reasoning-and-dropped-call", [Reasoning("hmm")], True),
        ("S7.2-text-and-dropped-call", [Text("ok")], False),
    ],
)
def test_dropped_no_name_call(case, before, expect_failed):
    ctx = Ctx(public_model="kimi-k2.6")
    out, enc = run([START, *before, ToolCall(0, call_id="call_x", arguments='{"a":1}'), Finish()], ctx)
    assert ctx.repairs == ["tool_call_unnamed_dropped"]
    assert not any(e["type"].startswith("response.function_call") for e in out)
    if expect_failed:
        msg = "the upstream sent a tool call without a name; it was dropped"
        assert out[-2:] == seqd(out[:-2] + failed_tail("upstream_tool_call_dropped", msg, enc.response["output"]))[-2:]
        assert enc.response["status"] == "failed"
    else:
        assert out[-1]["type"] == "response.completed"
        assert [i["type"] for i in enc.response["output"]] == ["message"]


def test_named_call_behind_unnamed_one_is_released_at_finish():
    ctx = Ctx()
    out, enc = run(
        [
            START,
            ToolCall(0, arguments="{}"),
            ToolCall(1, call_id="call_b", name="b", arguments="{}"),
            ToolCallEnd(1, arguments="{}"),
            Finish(),
        ],
        ctx,
    )
    fc = fc_events(0, "call_b", "b", ["{}"])
    assert out == seqd(head(model="upstream-model") + fc + [completed([fc[-1]["item"]], model="upstream-model")])
    assert ctx.repairs == ["tool_call_unnamed_dropped"]


@pytest.mark.parametrize("as_completed", [False, True], ids=["S7.2-length-incomplete", "S7.2-length-as-completed"])
def test_incomplete(as_completed):
    out, enc = run(
        [START, Text("partial"), Usage(USAGE), Finish(status="incomplete", reason="max_output_tokens")],
        incomplete_as_completed=as_completed,
    )
    m = msg_events(0, "msg_h1", ["partial"], status="incomplete")
    final = resp("incomplete", [m[-1]["item"]], USAGE, incomplete_details={"reason": "max_output_tokens"})
    etype = "response.completed" if as_completed else "response.incomplete"
    assert out == seqd(head() + m + [{"type": etype, "response": final}])


def test_incomplete_cuts_open_tool_call():
    out, enc = run(
        [
            START,
            ToolCall(0, call_id="call_1", name="f", arguments='{"a"'),
            Finish(status="incomplete", reason="max_output_tokens"),
        ]
    )
    # the half-streamed call is never closed: no done event, not in the output
    assert not [e for e in out if e["type"] == "response.output_item.done"]
    assert not [e for e in out if e["type"] == "response.function_call_arguments.done"]
    assert enc.response["output"] == []
    assert out[-1]["type"] == "response.incomplete"


def test_failed_error_event_then_response_failed():
    out, enc = run([START, Text("x"), Finish(status="failed", error=stream_error("rate_limit_exceeded", "slow down"))])
    m = msg_events(0, "msg_h1", ["x"], status="incomplete")
    assert out == seqd(head() + m + failed_tail("rate_limit_exceeded", "slow down", [m[-1]["item"]]))
    assert enc.response["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}


def test_truncated_stream_end_without_finish():
    enc = ResponsesStreamEncoder(Ctx(public_model="kimi-k2.6"))
    out = enc.feed(START) + enc.feed(Text("half")) + enc.feed(ToolCall(0, call_id="c", name="f", arguments="{"))
    assert not enc.done
    out += enc.end()
    invariants(out, enc.response)
    sdk_check(out, enc.response)
    assert enc.done
    msg = "upstream stream ended before the response finished"
    assert out[-2] == {
        "type": "error",
        "code": "upstream_stream_truncated",
        "message": msg,
        "param": None,
        "error": {"type": "server_error", "code": "upstream_stream_truncated", "message": msg, "param": None},
        "sequence_number": len(out) - 2,
    }
    assert out[-1]["type"] == "response.failed"
    # the message was closed (completed) when the call was released; the open call is cut
    # and never closed, so no client can run it
    assert [i["type"] for i in enc.response["output"]] == ["message"]
    assert not [e for e in out if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"]
    assert enc.end() == [] and enc.feed(Text("late")) == [] and enc.feed(Finish()) == []


def test_nothing_after_terminal():
    enc = ResponsesStreamEncoder(Ctx())
    enc.feed(START)
    enc.feed(Finish())
    assert enc.done
    for ev in (Text("x"), ToolCall(0, name="f"), Finish(), Start()):
        assert enc.feed(ev) == []
    assert enc.end() == []


def test_passthrough_closes_message_and_is_verbatim():
    ws = {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "x"}}
    out, enc = run([START, Text("a"), Passthrough(ws), Text("b"), Finish()])
    m1 = msg_events(0, "msg_h1", ["a"])
    m2 = msg_events(2, "msg_h2", ["b"])
    pt = [
        {"type": "response.output_item.added", "output_index": 1, "item": ws},
        {"type": "response.output_item.done", "output_index": 1, "item": ws},
    ]
    assert out == seqd(head() + m1 + pt + m2 + [completed([m1[-1]["item"], ws, m2[-1]["item"]])])


def test_envelope_sealing_with_key():
    key = b"k" * 32
    ctx = Ctx(public_model="kimi-k2.6", envelope_key=key)
    out, enc = run([START, Reasoning("  think\n"), Reasoning("more"), Text("ok"), Finish()], ctx)
    blob = envelope.seal("  think\nmore", key)
    rs = rs_events(0, "rs_h1", ["  think\n", "more"], blob=blob)
    m = msg_events(1, "msg_h2", ["ok"])
    assert out == seqd(head() + rs + m + [completed([rs[-1]["item"], m[-1]["item"]])])
    assert envelope.unseal(enc.response["output"][0]["encrypted_content"], key) == "  think\nmore"


def test_no_key_no_envelope_and_upstream_blob_wins():
    out, enc = run([START, Reasoning("a"), Text("b"), Finish()])
    assert "encrypted_content" not in enc.response["output"][0]
    ctx = Ctx(envelope_key=b"k")
    out, enc = run([START, Reasoning("a"), ReasoningEnd(item_id="rs_up", encrypted_content="gAAA"), Finish()], ctx)
    # events were already out under our id: it stays; the upstream blob is carried
    assert enc.response["output"] == [
        {
            "id": "rs_h3",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "a"}],
            "encrypted_content": "gAAA",
        }
    ]


def test_standalone_reasoning_end_adopts_upstream_id():
    out, enc = run([START, ReasoningEnd(item_id="rs_up", encrypted_content="gAAA"), Text("hi"), Finish()])
    item = {"id": "rs_up", "type": "reasoning", "summary": [], "encrypted_content": "gAAA"}
    m = msg_events(1, "msg_h1", ["hi"])
    assert out == seqd(
        head()
        + [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {"id": "rs_up", "type": "reasoning", "summary": []},
            },
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
        + m
        + [completed([item, m[-1]["item"]])]
    )


def test_raw_reasoning_goes_to_content_and_summary_parts_split():
    out, enc = run([START, Reasoning("s0"), Reasoning("s1", summary_index=1), Reasoning("r", kind="raw"), Finish()])
    types = [e["type"] for e in out[2:-1]]
    assert types == [
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert [e.get("summary_index") for e in out if e["type"].startswith("response.reasoning_summary")] == [0] * 4 + [
        1
    ] * 4
    assert out[-3]["type"] == "response.content_part.done" and out[-3]["content_index"] == 0
    assert enc.response["output"] == [
        {
            "id": "rs_h1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "s0"}, {"type": "summary_text", "text": "s1"}],
            "content": [{"type": "reasoning_text", "text": "r"}],
        }
    ]


def test_refusal_part():
    out, enc = run([START, Text("I "), Refusal("can't"), Finish()])
    assert [e["type"] for e in out[2:-1]] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.content_part.added",
        "response.refusal.delta",
        "response.refusal.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert out[8] == {
        "type": "response.refusal.delta",
        "item_id": "msg_h1",
        "output_index": 0,
        "content_index": 1,
        "delta": "can't",
        "sequence_number": 8,
    }
    assert out[9]["refusal"] == "can't"
    assert enc.response["output"][0]["content"] == [
        {"type": "output_text", "text": "I ", "annotations": []},
        {"type": "refusal", "refusal": "can't"},
    ]


@pytest.mark.parametrize(
    "kw,start,expect",
    [
        ({"response_id": "resp_given"}, Start(response_id="resp_up"), "resp_given"),
        ({}, Start(response_id="resp_up"), "resp_up"),
        ({}, Start(response_id="chatcmpl-123"), "resp_h1"),
        ({}, Start(), "resp_h1"),
    ],
    ids=["kwarg", "upstream-resp", "chat-id-minted", "none-minted"],
)
def test_response_id_choice(kw, start, expect):
    out, enc = run([start, Text("x"), Finish()], **kw)
    assert {e["response"]["id"] for e in out if "response" in e} == {expect}


def test_model_created_at_and_request_echo():
    tool = {"type": "function", "name": "f", "description": "d", "parameters": {}, "strict": False}
    echo = {
        "instructions": "be brief",
        "tools": [tool],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "max_output_tokens": 100,
        "store": False,
        "temperature": 0.5,
        "top_p": 1.0,
        "metadata": {"k": "v"},
        "reasoning": {"effort": "high", "summary": None},
        "text": {"format": {"type": "text"}},
        "status": "bogus",
        "id": "bogus",
    }
    out, enc = run([Start(model="up-model", created=5), Text("x"), Finish()], Ctx(), request_echo=echo)
    r = enc.response
    assert r["model"] == "up-model" and r["created_at"] == 5 and r["status"] == "completed"
    assert r["id"] == "resp_h1"
    for k in (
        "instructions",
        "tools",
        "parallel_tool_calls",
        "max_output_tokens",
        "store",
        "temperature",
        "metadata",
        "reasoning",
        "text",
    ):
        assert r[k] == echo[k]
    assert out[0]["response"]["instructions"] == "be brief"
    out, enc = run([Start(model="up-model"), Finish()], Ctx(public_model="pub"), created_at=7)
    assert enc.response["model"] == "pub" and enc.response["created_at"] == 7


_FN = {"type": "function", "name": "f", "parameters": {"type": "object"}}
_FN_FULL = {**_FN, "description": None, "strict": None}
_CUSTOM = {
    "type": "custom",
    "name": "apply_patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}


@pytest.mark.parametrize(
    "echo,ctx_max,expect",
    [
        pytest.param(
            None,
            None,
            {
                "temperature": 1.0,
                "top_p": 1.0,
                "truncation": "disabled",
                "store": False,
                "previous_response_id": None,
                "max_output_tokens": None,
                "background": False,
                "service_tier": "default",
                "presence_penalty": 0.0,
                "frequency_penalty": 0.0,
                "top_logprobs": 0,
                "max_tool_calls": None,
                "safety_identifier": None,
                "prompt_cache_key": None,
                "text": {"format": {"type": "text"}},
                "reasoning": {"effort": None, "summary": None},
                "tools": [],
                "metadata": {},
            },
            id="defaults",
        ),
        pytest.param({"temperature": 0.2, "top_p": 0.9}, None, {"temperature": 0.2, "top_p": 0.9}, id="sampling-echo"),
        pytest.param(
            {"temperature": None, "top_p": None, "truncation": None, "tools": None},
            None,
            {"temperature": 1.0, "top_p": 1.0, "truncation": "disabled", "tools": []},
            id="null-is-default",
        ),
        pytest.param(
            {"truncation": "auto", "store": True, "previous_response_id": "resp_prev"},
            None,
            {"truncation": "auto", "store": True, "previous_response_id": "resp_prev"},
            id="state-echo",
        ),
        pytest.param(
            {"reasoning": {"effort": "low"}},
            None,
            {"reasoning": {"effort": "low", "summary": None}},
            id="reasoning-effort-only",
        ),
        pytest.param(
            {"reasoning": {"summary": "auto"}},
            None,
            {"reasoning": {"effort": None, "summary": "auto"}},
            id="reasoning-summary-only",
        ),
        pytest.param(
            {"text": {"verbosity": "low"}},
            None,
            {"text": {"format": {"type": "text"}, "verbosity": "low"}},
            id="text-verbosity-only",
        ),
        pytest.param(
            {"text": {"format": {"type": "json_object"}}},
            None,
            {"text": {"format": {"type": "json_object"}}},
            id="text-format-echo",
        ),
        pytest.param({"tools": [_FN, _CUSTOM]}, None, {"tools": [_FN_FULL, _CUSTOM]}, id="function-tool-completed"),
        pytest.param({}, 4096, {"max_output_tokens": 4096}, id="catalogue-max-output-tokens"),
        pytest.param({"max_output_tokens": 50}, 4096, {"max_output_tokens": 50}, id="request-max-output-tokens"),
        pytest.param(
            {
                "id": "x",
                "status": "x",
                "completed_at": 1,
                "usage": {},
                "error": {"code": "x"},
                "incomplete_details": {"reason": "x"},
                "output": [1],
                "model": "x",
                "created_at": 1,
            },
            None,
            {
                "id": "resp_1",
                "status": "completed",
                "completed_at": NOW,
                "usage": ZERO_USAGE,
                "error": None,
                "incomplete_details": None,
                "model": "kimi-k2.6",
                "created_at": 1700000000,
            },
            id="identity-never-echoed",
        ),
    ],
)
def test_response_fields_echo_and_defaults(echo, ctx_max, expect):
    orig = copy.deepcopy(echo)
    ctx = Ctx(public_model="kimi-k2.6", max_output_tokens=ctx_max)
    out, enc = run([START, Text("x"), Finish()], ctx, request_echo=echo)
    for r in (out[0]["response"], out[1]["response"], enc.response):
        for k, v in expect.items():
            if k not in ("status", "completed_at", "usage"):
                assert r[k] == v, k
    for k, v in expect.items():
        assert enc.response[k] == v, k
    assert echo == orig  # the client's parsed body is never mutated


@pytest.mark.parametrize(
    "events,status,completed_at",
    [
        pytest.param([START, Text("x"), Finish()], "completed", NOW, id="completed"),
        pytest.param(
            [START, Text("x"), Finish("incomplete", reason="max_output_tokens")], "incomplete", None, id="incomplete"
        ),
        pytest.param([START, Text("x"), Finish("failed", error=stream_error("x", "y"))], "failed", None, id="failed"),
    ],
)
def test_completed_at_only_on_completed_terminal(events, status, completed_at):
    out, enc = run(events)
    assert [e["response"]["completed_at"] for e in out if "response" in e] == [None, None, completed_at]
    assert enc.response["status"] == status


def test_incomplete_as_completed_keeps_completed_at_null():
    out, enc = run([START, Text("x"), Finish("incomplete", reason="max_output_tokens")], incomplete_as_completed=True)
    assert out[-1]["type"] == "response.completed"
    assert enc.response["status"] == "incomplete" and enc.response["completed_at"] is None


def test_error_event_flat_and_nested():
    err = {"code": "rate_limit_exceeded", "message": "slow down", "type": "rate_limit_error", "param": "model"}
    out, enc = run([START, Finish("failed", error=err)])
    assert out[-2] == {
        "type": "error",
        "code": "rate_limit_exceeded",
        "message": "slow down",
        "param": "model",
        "error": err,
        "sequence_number": len(out) - 2,
    }


# ---------------------------------------------------------------------- Open Responses schema

# event types Switchboard emits under OpenAI's names, which the Open Responses spec names
# differently (response.reasoning.delta/done) or does not have (custom tools)
_NOT_IN_OPEN_RESPONSES = {
    "response.reasoning_text.delta",
    "response.reasoning_text.done",
    "response.custom_tool_call_input.delta",
    "response.custom_tool_call_input.done",
}


def _open_responses_spec():
    schema = pytest.importorskip("llm_comply.schema")
    pytest.importorskip("jsonschema")
    import pathlib

    spec = schema.SpecLoader(str(pathlib.Path(schema.__file__).parent / "specs" / "openresponses.json"))
    by_type = {}
    for name in spec.schema_names:
        if name.endswith("StreamingEvent"):
            enum = ((spec.get_schema(name).get("properties") or {}).get("type") or {}).get("enum") or []
            for t in enum:
                by_type[t] = name
    return spec, by_type


@pytest.mark.parametrize(
    "events",
    [
        pytest.param([START, Text("Hel"), Text("lo"), Usage(USAGE), Finish()], id="text"),
        pytest.param(
            [
                START,
                Reasoning("think"),
                Text("a"),
                ToolCall(0, call_id="c1", name="f", arguments="{}"),
                ToolCallEnd(0, arguments="{}"),
                Usage(USAGE),
                Finish(),
            ],
            id="reasoning-text-call",
        ),
        pytest.param(
            [START, Reasoning("r", kind="raw"), ReasoningEnd(encrypted_content="blob"), Refusal("no"), Finish()],
            id="raw-reasoning-refusal",
        ),
        pytest.param([START, Text("cut"), Finish("incomplete", reason="max_output_tokens")], id="incomplete"),
        pytest.param([START, Text("a"), Finish("failed", error=stream_error("upstream_x", "boom"))], id="failed"),
    ],
)
def test_stream_matches_open_responses_schema(events):
    spec, by_type = _open_responses_spec()
    echo = {"tools": [_FN], "reasoning": {"effort": "low"}, "temperature": 0.3}
    out, enc = run(events, request_echo=echo)
    errors = []
    with warnings.catch_warnings():  # llm_comply builds validators with jsonschema's deprecated RefResolver
        warnings.simplefilter("ignore", DeprecationWarning)
        for e in out:
            if e["type"] in _NOT_IN_OPEN_RESPONSES:
                continue
            assert e["type"] in by_type, e["type"]
            errors += [f"{e['type']}: {m}" for m in spec.validate(e, by_type[e["type"]])]
        errors += spec.validate(enc.response, "ResponseResource")
        r = encode_response(events, Ctx(public_model="kimi-k2.6"), request_echo=echo)
        errors += spec.validate(r, "ResponseResource")
    assert errors == []


def test_late_upstream_call_id_replaces_minted_one_in_done():
    out, enc = run(
        [
            START,
            ToolCall(0, name="f", arguments="{}"),
            ToolCall(0, call_id="functions.f:0"),
            ToolCallEnd(0, arguments="{}"),
            Finish(),
        ]
    )
    assert out[2]["item"]["call_id"] == "call_h1" and out[2]["item"]["id"] == "fc_call_h1"
    assert enc.response["output"] == [fc_item("completed", "functions.f:0", "f", "{}", iid="fc_call_h1")]


def test_message_closed_by_tool_call_and_reopened():
    out, enc = run(
        [
            START,
            Text("a"),
            ToolCall(0, arguments="{}"),
            Text("b"),
            ToolCall(0, call_id="c1", name="f"),
            ToolCallEnd(0, arguments="{}"),
            Text("c"),
            Finish(),
        ]
    )
    assert [(i["type"], i.get("content", [{}])[0].get("text")) for i in enc.response["output"]] == [
        ("message", "ab"),
        ("function_call", None),
        ("message", "c"),
    ]


def test_encode_response_non_streaming():
    r = encode_response([START, Text("Hel"), Text("lo"), Usage(USAGE), Finish()], Ctx(public_model="kimi-k2.6"))
    assert r == resp("completed", [msg_item("msg_h1", "Hello")], USAGE)
    r = encode_response([START, Text("Hel")], Ctx(public_model="kimi-k2.6"), response_id="resp_x")
    assert r["status"] == "failed" and r["id"] == "resp_x"
    assert r["error"] == {
        "code": "upstream_stream_truncated",
        "message": "upstream stream ended before the response finished",
    }
    assert r["output"] == [msg_item("msg_h2", "Hel", status="incomplete")]
    if _SDK_EVENT is not None:
        SDKResponse.model_validate(_sdk_fix({"response": r})["response"])


def test_response_property_before_finish_is_in_progress_snapshot():
    enc = ResponsesStreamEncoder(Ctx(), response_id="resp_1")
    enc.feed(START)
    enc.feed(Text("x"))
    enc.feed(ToolCall(0, call_id="c", name="f", arguments="{}"))
    r = enc.response
    assert r["status"] == "in_progress" and [i["type"] for i in r["output"]] == ["message"]


def test_output_is_json_serializable_with_orjson():
    import orjson

    out, _ = run(
        [
            START,
            Reasoning("r"),
            Text("t"),
            ToolCall(0, call_id="c", name="f", arguments="{}"),
            ToolCallEnd(0, arguments="{}"),
            Usage(USAGE),
            Finish(),
        ]
    )
    for e in out:
        assert json.loads(orjson.dumps(e)) == e


# ---------------------------------------------------------------------- nothing lost

_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=6)


@st.composite
def _streams(draw):
    """Random Text/Reasoning/Refusal interleavings plus up to 3 tool calls whose identity
    arrives at a random point (possibly only in ToolCallEnd)."""
    ncalls = draw(st.integers(0, 3))
    plan: list = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["text", "reasoning", "raw", "refusal"]))
        t = draw(_text)
        plan.append(
            {"text": Text(t), "reasoning": Reasoning(t), "raw": Reasoning(t, kind="raw"), "refusal": Refusal(t)}[kind]
        )
    calls = {}
    for i in range(ncalls):
        pieces = draw(st.lists(_text, max_size=4))
        custom = draw(st.booleans())
        # events: an identity head (call_id), then the pieces; the name rides on event
        # number name_at, or only on ToolCallEnd when name_at == len(pieces) + 1
        name_at = draw(st.integers(0, len(pieces) + 1))
        seq = [ToolCall(i, call_id=f"call_{i}", custom=custom, name=f"t{i}" if name_at == 0 else None)]
        for j, p in enumerate(pieces, 1):
            seq.append(ToolCall(i, arguments=p, name=f"t{i}" if j == name_at else None))
        end_name = f"t{i}" if name_at == len(pieces) + 1 else None
        seq.append(ToolCallEnd(i, arguments="".join(pieces), name=end_name))
        calls[i] = ("".join(pieces), seq)
    # interleave: calls start in index order (decoder contract), their events otherwise mix
    queues = [list(calls[i][1]) for i in range(ncalls)]
    started = 0
    merged = list(plan)
    out_events = []
    while merged or any(queues):
        choices = []
        if merged:
            choices.append("plain")
        for i, q in enumerate(queues):
            if q and i <= started:
                choices.append(i)
        c = draw(st.sampled_from(choices))
        if c == "plain":
            out_events.append(merged.pop(0))
        else:
            out_events.append(queues[c].pop(0))
            if c == started:
                started += 1
    return out_events, {i: calls[i][0] for i in calls}


@settings(max_examples=300, deadline=None)
@given(_streams(), st.booleans())
def test_nothing_lost_property(stream, key):
    events, call_args = stream
    ctx = Ctx(envelope_key=b"key" if key else b"")
    enc = ResponsesStreamEncoder(ctx)
    out = enc.feed(Start())
    for ev in events:
        out += enc.feed(ev)
    out += enc.feed(Finish())
    final = enc.response
    invariants(out, final)
    want_text = "".join(e.text for e in events if type(e) is Text)
    want_ref = "".join(e.text for e in events if type(e) is Refusal)
    want_rs = "".join(e.text for e in events if type(e) is Reasoning)

    def cat(types, key="delta"):
        return "".join(e[key] for e in out if e["type"] in types)

    assert cat({"response.output_text.delta"}) == want_text
    assert cat({"response.output_text.done"}, "text") == want_text
    assert cat({"response.refusal.delta"}) == want_ref
    assert cat({"response.refusal.done"}, "refusal") == want_ref
    rs_types = {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"}
    assert cat(rs_types) == want_rs
    assert cat({"response.reasoning_summary_text.done", "response.reasoning_text.done"}, "text") == want_rs
    # final items hold the same bytes
    msgs = [i for i in final["output"] if i["type"] == "message"]
    assert "".join(p.get("text", "") for m in msgs for p in m["content"]) == want_text
    assert "".join(p.get("refusal", "") for m in msgs for p in m["content"]) == want_ref
    rss = [i for i in final["output"] if i["type"] == "reasoning"]
    done_parts = [
        e["text"] for e in out if e["type"] in ("response.reasoning_summary_text.done", "response.reasoning_text.done")
    ]
    assert sorted(p["text"] for r in rss for part in ("summary", "content") for p in r.get(part, [])) == sorted(
        done_parts
    )
    if key:
        assert all(envelope.unseal(r["encrypted_content"], b"key") is not None for r in rss)
    # every call: deltas == done == final item, and output order follows call index
    calls = [i for i in final["output"] if i["type"] in ("function_call", "custom_tool_call")]
    assert [c["call_id"] for c in calls] == [f"call_{i}" for i in sorted(call_args)]
    for c in calls:
        i = int(c["call_id"].split("_")[1])
        iid = c["id"]
        body = c.get("arguments", c.get("input"))
        assert body == call_args[i]
        deltas = "".join(e["delta"] for e in out if e.get("item_id") == iid and e["type"].endswith("delta"))
        assert deltas == call_args[i]
        dones = [e for e in out if e.get("item_id") == iid and e["type"].endswith(".done")]
        assert len(dones) == 1 and dones[0].get("arguments", dones[0].get("input")) == call_args[i]
        assert c["name"] == f"t{i}"
    assert final["status"] == "completed"


def test_heartbeat_is_a_sequenced_in_progress_event_only_while_streaming():
    enc = ResponsesStreamEncoder(Ctx(public_model="m"))
    assert enc.heartbeat() == []  # nothing before the stream started
    out = enc.feed(START) + enc.feed(Text("a"))
    hb = enc.heartbeat()
    assert [e["type"] for e in hb] == ["response.in_progress"]
    assert hb[0]["sequence_number"] == out[-1]["sequence_number"] + 1
    assert hb[0]["response"]["status"] == "in_progress" and hb[0]["response"]["id"] == out[0]["response"]["id"]
    out += hb + enc.feed(Text("b")) + enc.feed(Finish())
    invariants(out, enc.response)
    assert enc.heartbeat() == []  # nothing after the terminal event
