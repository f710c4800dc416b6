"""Provider profiles as data: quirk resolution (profile, base URL, model id, config
overrides with model globs), URLs and auth per profile, the model catalogue, and the
mapping of each provider's error bodies onto OpenAI errors (docs/rules.md §5.3)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson
import pytest

from providers import config as config_schema
from providers.catalog import BUILTIN, catalog_entry
from providers.codex_models import codex_entry
from providers.errors import UPSTREAM_CODES, WELL_KNOWN, upstream_error
from providers.profiles import MODEL_QUIRKS, PROFILES, Override, QuirkSet, auth_headers, upstream_query, upstream_url
from transformers.context import QUIRKS

# -- the tables themselves -------------------------------------------------------------------


def test_profiles_match_config_and_quirk_names() -> None:
    assert set(PROFILES) == set(config_schema.PROFILES)
    for p in PROFILES.values():
        assert p.quirks <= QUIRKS, p.name
        assert p.auth in ("bearer", "api-key", "x-api-key", "none")
        assert set(p.protocols) <= {"chat", "responses", "messages", "gemini"}
        for _, q in p.url_quirks:
            assert q <= QUIRKS
    for _, q in MODEL_QUIRKS:
        assert q <= QUIRKS
    # nothing assumed, but that it cannot open the proxy's own reasoning envelope
    assert PROFILES["openai-compatible"].quirks == frozenset({"strip_reasoning_envelope"})


def test_every_profile_that_speaks_responses_strips_the_envelope() -> None:
    # a new profile cannot leak the proxy's sealed reasoning to its upstream by omission
    for p in PROFILES.values():
        assert ("strip_reasoning_envelope" in p.quirks) is ("responses" in p.protocols), p.name


# -- quirk resolution ------------------------------------------------------------------------

O = Override  # noqa: E741
ENV = frozenset({"strip_reasoning_envelope"})  # the openai-compatible default
RESOLVE: list[tuple[str, str, str, str, tuple[Override, ...], Override | None, frozenset[str]]] = [
    # id, profile, base_url, upstream model, provider overrides, model override → quirks
    ("kimi-selfhosted", "kimi", "http://10.0.0.5:8000/v1", "kimi-k2.6", (), None,
     frozenset({"reasoning_replay", "kimi_request", "max_completion_tokens", "developer_to_system", "kimi_tool_ids"})),
    ("kimi-moonshot-ai", "kimi", "https://api.moonshot.ai/v1", "kimi-k2.6", (), None,
     frozenset({"reasoning_replay", "kimi_request", "max_completion_tokens", "developer_to_system", "kimi_tool_ids",
                "moonshot_fields", "schema_strict_subset"})),
    ("kimi-moonshot-cn", "kimi", "https://API.MOONSHOT.CN/v1", "kimi-k2.6", (), None,
     frozenset({"reasoning_replay", "kimi_request", "max_completion_tokens", "developer_to_system", "kimi_tool_ids",
                "moonshot_fields", "schema_strict_subset"})),
    ("kimi-code", "kimi", "https://api.kimi.com/coding/v1", "kimi-for-coding", (), None,
     frozenset({"reasoning_replay", "kimi_request", "max_completion_tokens", "developer_to_system", "kimi_tool_ids",
                "moonshot_fields", "schema_strict_subset"})),
    ("moonshot-lookalike-host", "kimi", "https://api.moonshot.ai.evil.example/v1", "kimi-k2.6", (), None,
     frozenset({"reasoning_replay", "kimi_request", "max_completion_tokens", "developer_to_system", "kimi_tool_ids"})),
    ("openai-compatible-moonshot-url", "openai-compatible", "https://api.moonshot.ai/v1", "x", (), None,
     ENV),
    ("generic-nothing-else", "openai-compatible", "http://127.0.0.1:8000/v1", "qwen3-coder", (), None, ENV),
    ("generic-envelope-off", "openai-compatible", "http://sb-tier:8080/v1", "m", (O(disable=ENV),), None,
     frozenset()),
    ("mimo-id-any-provider", "openai-compatible", "https://opencode.example/v1", "mimo-v2.6-flash", (), None,
     ENV | frozenset({"mimo_raw_patch", "invalid_json_passthrough", "mimo_request", "reasoning_replay"})),
    ("mimo-id-behind-gateway", "openai-compatible", "https://gw/v1", "xiaomi/MiMo-V2.6-Pro", (), None,
     ENV | frozenset({"mimo_raw_patch", "invalid_json_passthrough", "mimo_request", "reasoning_replay"})),
    ("kimi-id-any-provider", "openai-compatible", "https://gw/v1", "moonshotai/kimi-k2.6", (), None,
     ENV | frozenset({"reasoning_replay", "kimi_tool_ids"})),
    ("provider-enable", "openai-compatible", "", "m", (O(enable=frozenset({"inline_think"})),), None,
     ENV | frozenset({"inline_think"})),
    ("provider-disable-profile-default", "kimi", "", "k", (O(disable=frozenset({"kimi_request"})),), None,
     frozenset({"reasoning_replay", "max_completion_tokens", "developer_to_system", "kimi_tool_ids"})),
    ("provider-disable-model-id-quirk", "openai-compatible", "", "mimo-v2.6-pro",
     (O(disable=frozenset({"mimo_raw_patch"})),), None,
     ENV | frozenset({"invalid_json_passthrough", "mimo_request", "reasoning_replay"})),
    ("provider-glob-matches", "openai-compatible", "", "mimo-v2.6-pro",
     (O(enable=frozenset({"thinking_param"}), models=("mimo-v2.6-*",)),), None,
     ENV | frozenset({"mimo_raw_patch", "invalid_json_passthrough", "mimo_request", "reasoning_replay",
                      "thinking_param"})),
    ("provider-glob-misses", "openai-compatible", "", "qwen3",
     (O(enable=frozenset({"thinking_param"}), models=("mimo-v2.6-*",)),), None, ENV),
    ("provider-glob-on-public-name", "openai-compatible", "", "Qwen/Qwen3-Coder",
     (O(enable=frozenset({"inline_think"}), models=("local-*",)),), None, ENV | frozenset({"inline_think"})),
    ("overrides-in-order", "openai-compatible", "", "m",
     (O(enable=frozenset({"inline_think", "system_at_head"})), O(disable=frozenset({"inline_think"}))), None,
     ENV | frozenset({"system_at_head"})),
    ("model-override-wins", "openai-compatible", "", "m", (O(enable=frozenset({"inline_think"})),),
     O(disable=frozenset({"inline_think"}) | ENV, enable=frozenset({"strict_tool_ids"})),
     frozenset({"strict_tool_ids"})),
    ("moonshot-fields-off-by-config", "kimi", "https://api.moonshot.ai/v1", "kimi-k2.6",
     (O(disable=frozenset({"moonshot_fields"})),), None,
     frozenset({"reasoning_replay", "kimi_request", "max_completion_tokens", "developer_to_system", "kimi_tool_ids",
                "schema_strict_subset"})),
]  # fmt: skip


@pytest.mark.parametrize("profile, base, model, overrides, model_override, want", [r[1:] for r in RESOLVE],
                         ids=[r[0] for r in RESOLVE])  # fmt: skip
def test_resolve(profile: str, base: str, model: str, overrides: tuple[Override, ...],
                 model_override: Override | None, want: frozenset[str]) -> None:  # fmt: skip
    public = "local-qwen" if model == "Qwen/Qwen3-Coder" else model
    assert QuirkSet(profile, overrides, base).resolve(model, public, model_override) == want


# -- URLs and auth ---------------------------------------------------------------------------

URLS = [
    ("openai-chat", "openai", "https://api.openai.com/v1/", "chat", None, "https://api.openai.com/v1/chat/completions"),
    ("openai-responses", "openai", "https://api.openai.com/v1", "responses", None, "https://api.openai.com/v1/responses"),
    ("azure-deployment-chat", "azure", "https://r.openai.azure.com", "chat", "dep",
     "https://r.openai.azure.com/openai/deployments/dep/chat/completions"),
    ("azure-deployment-trailing-openai", "azure", "https://r.openai.azure.com/openai/", "chat", "dep",
     "https://r.openai.azure.com/openai/deployments/dep/chat/completions"),
    ("azure-deployment-responses", "azure", "https://r.openai.azure.com", "responses", "dep",
     "https://r.openai.azure.com/openai/responses"),
    ("azure-v1", "azure", "https://r.openai.azure.com/openai/v1", "responses", None,
     "https://r.openai.azure.com/openai/v1/responses"),
    ("mantle", "bedrock-mantle", "https://bedrock-mantle.us-east-1.api.aws/v1", "responses", None,
     "https://bedrock-mantle.us-east-1.api.aws/v1/responses"),
    ("glm", "glm", "https://open.bigmodel.cn/api/paas/v4", "chat", None,
     "https://open.bigmodel.cn/api/paas/v4/chat/completions"),
    ("demo", "demo", None, "chat", None, "http://demo.invalid/v1/chat/completions"),
]  # fmt: skip


@pytest.mark.parametrize("profile, base, protocol, deployment, want", [u[1:] for u in URLS], ids=[u[0] for u in URLS])
def test_upstream_url(profile: str, base: str | None, protocol: str, deployment: str | None, want: str) -> None:
    assert upstream_url(profile, base, protocol, deployment) == want


@pytest.mark.parametrize(
    "profile, deployment, query, want",
    [
        ("azure", "dep", {}, {"api-version": "2025-04-01-preview"}),
        ("azure", "dep", {"x": "1"}, {"api-version": "2025-04-01-preview", "x": "1"}),
        ("azure", "dep", {"API-Version": "2024-10-21"}, {"API-Version": "2024-10-21"}),
        ("azure", None, {}, {}),  # the v1 route needs no api-version
        ("openai-compatible", "dep", {"x": "1"}, {"x": "1"}),
    ],
)
def test_upstream_query(profile: str, deployment: str | None, query: dict[str, str], want: dict[str, str]) -> None:
    assert upstream_query(profile, deployment, query) == want


def test_query_is_params_not_url() -> None:
    """httpx params REPLACE a URL's query: the whole query must travel as params."""
    assert str(httpx.Request("POST", "https://a/b?api-version=1", params={"x": "1"}).url) == "https://a/b?x=1"


@pytest.mark.parametrize(
    "profile, key, want",
    [
        ("openai", "k", {"authorization": "Bearer k"}),
        ("azure", "k", {"api-key": "k"}),
        ("bedrock-mantle", "k", {"authorization": "Bearer k"}),
        ("kimi", None, {}),
        ("openai-compatible", "", {}),
        ("demo", "k", {}),
    ],
)
def test_auth_headers(profile: str, key: str | None, want: dict[str, str]) -> None:
    assert auth_headers(profile, key) == want


# -- catalogue -------------------------------------------------------------------------------


class _M:
    def __init__(self, name: str, **kw: Any) -> None:
        self.name = name
        for k in ("context_window", "max_output_tokens", "reasoning", "parallel_tool_calls", "modalities"):
            setattr(self, k, kw.get(k))


@pytest.mark.parametrize(
    "public, upstream, kw, want",
    [
        ("mimo-v2.6-pro", "mimo-v2.6-pro", {}, (1_048_576, 131_072, False, ["text", "image"])),
        ("mimo", "xiaomi/mimo-v2.6-flash", {}, (1_048_576, 131_072, False, ["text", "image"])),
        ("gpt-5.5", "gpt5-prod", {}, (272_000, 128_000, True, ["text", "image"])),  # Azure deployment name
        ("gpt-6.2-sol", "gpt-6.2-sol", {}, (500_000, None, True, ["text", "image"])),  # Codex's own window
        ("gpt-5.6-terra", "gpt-5.6-terra", {}, (272_000, 128_000, True, ["text", "image"])),
        ("deepseek-chat", "deepseek-chat", {}, (131_072, 8_192, True, ["text"])),
        ("deepseek-reasoner", "deepseek-reasoner", {}, (131_072, 65_536, True, ["text"])),
        ("kimi-k2.6", "kimi-k2.6", {"max_output_tokens": 8192}, (262_144, 8_192, True, ["text"])),
        ("local", "qwen3", {"context_window": 32768, "parallel_tool_calls": False}, (32_768, None, False, ["text"])),
    ],
)
def test_catalogue(public: str, upstream: str, kw: dict[str, Any], want: tuple[Any, ...]) -> None:
    info = catalog_entry(_M(public, **kw), upstream, "p")
    c = codex_entry(info, None, profile="openai-compatible", priority=1)
    assert (
        c["context_window"],
        c["max_output_tokens"],
        c["supports_parallel_tool_calls"],
        c["input_modalities"],
    ) == want
    assert info.openai() == {"id": public, "object": "model", "created": 0, "owned_by": "p"}


def test_catalogue_globs_are_lower_case() -> None:
    assert all(g == g.lower() for g, _ in BUILTIN)


# -- error mapping per provider --------------------------------------------------------------

ERRORS: list[tuple[str, int, Any, dict[str, str], int, str, str]] = [
    # id, upstream status, body, headers → client status, code, a substring of the message
    ("openai-context", 400, {"error": {"message": "This model's maximum context length is 128000 tokens.",
                                       "type": "invalid_request_error", "param": "messages",
                                       "code": "context_length_exceeded"}}, {}, 400, "context_length_exceeded",
     "maximum context length is 128000"),
    ("openai-specific-code-kept", 400, {"error": {"message": "bad", "type": "invalid_request_error",
                                                  "code": "invalid_value", "param": "tools"}}, {}, 400,
     "invalid_value", "bad"),
    ("openai-rate-limit", 429, {"error": {"message": "Rate limit reached. Please try again in 1.2s.",
                                          "type": "requests", "code": "rate_limit_exceeded"}},
     {"retry-after": "2"}, 429, "rate_limit_exceeded", "Please try again in 1.2s."),
    ("openai-quota", 429, {"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",
                                     "code": "insufficient_quota"}}, {}, 429, "insufficient_quota", "current quota"),
    ("openai-auth-not-client-key", 401, {"error": {"message": "Incorrect API key", "code": "invalid_api_key"}}, {},
     502, "upstream_auth_failed", "the upstream rejected the proxy's credentials for provider prov (HTTP 401)"),
    ("azure-429-numeric-code-retry-after-ms", 429,
     {"error": {"code": "429", "message": "Requests have exceeded token rate limit of your current tier."}},
     {"retry-after-ms": "6500"}, 429, "rate_limit_exceeded", "Please try again in 7s."),
    ("azure-content-filter", 400, {"error": {"code": "content_filter", "message": "The response was filtered due to "
                                             "the prompt triggering Azure OpenAI's content management policy.",
                                             "innererror": {"code": "ResponsibleAIPolicyViolation"}}}, {}, 400,
     "invalid_prompt", "content management policy"),
    ("azure-deployment-not-found", 404, {"error": {"code": "DeploymentNotFound", "message": "The API deployment for "
                                                   "this resource does not exist."}}, {}, 404, "model_not_found",
     "does not exist"),
    ("moonshot-context", 400, {"error": {"message": "Invalid request: Your request exceeded model token limit: 262144",
                                         "type": "invalid_request_error"}}, {}, 400, "context_length_exceeded",
     "exceeded model token limit"),
    ("moonshot-rate", 429, {"error": {"message": "Your account org-1 request reached organization max RPM: 3",
                                      "type": "rate_limit_reached_error"}}, {}, 429, "rate_limit_exceeded",
     "max RPM"),
    ("moonshot-quota", 429, {"error": {"message": "Your account org-1 is suspended, please check your balance",
                                       "type": "exceeded_current_quota_error"}}, {}, 429, "insufficient_quota",
     "balance"),
    ("moonshot-overloaded", 429, {"error": {"message": "The engine is currently overloaded, please try again later",
                                            "type": "engine_overloaded_error"}}, {}, 503, "server_is_overloaded",
     "overloaded"),
    ("moonshot-content-filter", 400, {"error": {"message": "The request was rejected because it was considered high "
                                                "risk", "type": "content_filter"}}, {}, 400, "invalid_prompt",
     "high risk"),
    ("deepseek-context-generic-code", 400, {"error": {"message": "This model's maximum context length is 131072 "
                                                      "tokens. However, you requested 140000 tokens.",
                                                      "type": "invalid_request_error", "param": None,
                                                      "code": "invalid_request_error"}}, {}, 400,
     "context_length_exceeded", "131072"),
    ("deepseek-balance-402", 402, {"error": {"message": "Insufficient Balance", "type": "unknown_error",
                                             "param": None, "code": "invalid_request_error"}}, {}, 429,
     "insufficient_quota", "Insufficient Balance"),
    ("deepseek-generic-400-not-a-code", 400, {"error": {"message": "Invalid max_tokens value",
                                                        "type": "invalid_request_error",
                                                        "code": "invalid_request_error"}}, {}, 400,
     "upstream_bad_request", "max_tokens"),
    ("glm-1261", 400, {"error": {"code": "1261", "message": "Prompt exceeds max length"}}, {}, 400,
     "context_length_exceeded", "Prompt exceeds max length"),
    ("glm-1302", 429, {"error": {"code": "1302", "message": "您当前使用该API的并发数过高"}}, {}, 429,
     "rate_limit_exceeded", "并发数"),
    ("glm-1113", 429, {"error": {"code": "1113", "message": "您的账户已欠费"}}, {}, 429, "insufficient_quota", "欠费"),
    ("glm-1301", 400, {"error": {"code": "1301", "message": "系统检测到输入或生成内容可能包含不安全或敏感内容"}}, {},
     400, "invalid_prompt", "不安全"),
    ("vllm-context", 400, {"object": "error", "message": "This model's maximum context length is 32768 tokens. However,"
                           " you requested 40000 tokens.", "type": "BadRequestError", "param": None, "code": 400},
     {}, 400, "context_length_exceeded", "32768"),
    ("vllm-max-model-len", 400, {"object": "error", "message": "The decoder prompt (length 40000) is longer than the "
                                 "maximum model length of 32768.", "type": "BadRequestError", "code": 400}, {}, 400,
     "context_length_exceeded", "decoder prompt"),
    ("vllm-other", 400, {"object": "error", "message": "tool_choice auto requires --enable-auto-tool-choice",
                         "type": "BadRequestError", "code": 400}, {}, 400, "upstream_bad_request",
     "--enable-auto-tool-choice"),
    ("sglang-context", 400, {"object": "error", "message": "Input length (40000 tokens) exceeds the maximum allowed "
                             "length (32768 tokens).", "type": "BadRequestError", "code": 400}, {}, 400,
     "context_length_exceeded", "Input length"),
    ("llamacpp-context", 400, {"error": {"code": 400, "message": "the request exceeds the available context size, try "
                                         "increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 9000,
                                         "n_ctx": 8192}}, {}, 400, "context_length_exceeded", "context size"),
    ("ollama-string-error", 500, {"error": "model requires more system memory"}, {}, 502, "server_error",
     "system memory"),
    ("xai-context", 400, {"code": "Client specified an invalid argument", "error": "This model's maximum prompt "
                          "length is 131072 but the request contains 140000 tokens."}, {}, 400,
     "context_length_exceeded", "maximum prompt length"),
    ("xai-credits", 429, {"code": "Some resource has been exhausted", "error": "Your team has either used all "
                          "available credits or reached its monthly spending limit."}, {}, 429, "insufficient_quota",
     "credits"),
    ("mantle-bedrock-throttling", 429, {"message": "Too many requests, please wait before trying again."},
     {"x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/coral/com.amazonaws.bedrock/",
      "retry-after": "3"}, 429, "rate_limit_exceeded", "Please try again in 3s."),
    ("mantle-bedrock-validation-too-long", 400, {"message": "Input is too long for requested model."},
     {"x-amzn-errortype": "ValidationException"}, 400, "context_length_exceeded", "too long"),
    ("mantle-openai-shape", 400, {"error": {"message": "Invalid 'tools[0].name'", "type": "invalid_request_error",
                                            "code": "invalid_value"}}, {}, 400, "invalid_value", "tools[0].name"),
    ("gateway-detail", 400, {"detail": "prompt is too long: 300000 tokens > 200000 maximum"}, {}, 400,
     "context_length_exceeded", "prompt is too long"),
    ("html-502-not-echoed", 502, b"<html>Bad Gateway</html>", {}, 502, "server_error", "HTML page; not shown"),
    ("plain-text-502", 502, b"Bad Gateway", {}, 502, "server_error", "Bad Gateway"),
    ("plain-text-overloaded", 503, b"overloaded", {}, 503, "server_is_overloaded", "overloaded"),
    ("server-500-context", 500, {"error": {"message": "maximum context length exceeded"}}, {}, 400,
     "context_length_exceeded", "maximum context length"),
    # Gemini's OpenAI-compatible endpoint: Google's error, wrapped in an array
    ("gemini-signature", 400, [{"error": {"code": 400, "message": "Function call is missing a thought_signature in "
                                          "functionCall parts.", "status": "INVALID_ARGUMENT"}}], {}, 400,
     "upstream_bad_request", "thought_signature"),
    ("gemini-quota", 429, [{"error": {"code": 429, "message": "Resource has been exhausted (e.g. check quota).",
                                      "status": "RESOURCE_EXHAUSTED"}}], {}, 429, "rate_limit_exceeded", "exhausted"),
    ("gemini-unavailable", 503, [{"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                                            "status": "UNAVAILABLE"}}], {}, 503, "server_is_overloaded", "overloaded"),
    ("gemini-context", 400, {"error": {"code": 400, "message": "The input token count (1200000) exceeds the maximum "
                                       "number of tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}, {}, 400,
     "context_length_exceeded", "input token count"),
    ("gemini-model", 404, [{"error": {"code": 404, "message": "models/gemini-9 is not found for API version v1beta",
                                      "status": "NOT_FOUND"}}], {}, 404, "model_not_found", "not found"),
]  # fmt: skip


@pytest.mark.parametrize("status, body, headers, want_status, want_code, want_text", [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])  # fmt: skip
def test_upstream_error_mapping(status: int, body: Any, headers: dict[str, str], want_status: int, want_code: str,
                                want_text: str) -> None:  # fmt: skip
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    e = upstream_error(status, raw, httpx.Headers(headers), "prov")
    assert (e.status, e.code) == (want_status, want_code)
    if status in (401, 403):  # a fixed message: nothing of the upstream's text
        assert e.message == want_text
    else:
        assert e.message.startswith(f"upstream prov answered HTTP {status}")
        assert want_text in e.message
    out = orjson.loads(e.body("req_1"))["error"]
    assert set(out) == {"message", "type", "param", "code", "request_id"}
    if want_code == "rate_limit_exceeded":
        assert e.type == "rate_limit_error"
    if "retry-after" in headers or "retry-after-ms" in headers:
        assert e.headers["retry-after"] == headers.get("retry-after", "7")


def test_error_tables_map_to_known_or_specific_codes() -> None:
    for code in UPSTREAM_CODES.values():
        assert code in WELL_KNOWN or code == "model_not_found"


# -- docs/quirks.md documents every quirk and every registered repair, and nothing else -----


def _doc_tables() -> dict[str, tuple[set[str], set[str]]]:
    """Section title → (names in the first column of its tables, names after "rule ")."""
    from pathlib import Path

    doc = (Path(__file__).parent.parent.parent / "docs" / "quirks.md").read_text()
    out: dict[str, tuple[set[str], set[str]]] = {}
    for section in doc.split("\n## ")[1:]:
        title, _, body = section.partition("\n")
        keys = {n for line in body.splitlines() if line.startswith("| `")
                for n in re.findall(r"`([a-z0-9_]+)`", line.split("|")[1])}  # fmt: skip
        out[title.strip()] = keys, set(re.findall(r"\brule `([a-z0-9_]+)`", body))
    return out


def test_quirks_doc_matches_the_quirks_and_the_repair_registry() -> None:
    from transformers.repairs import NAMES

    tables = _doc_tables()
    quirk_rows, quirk_rules = tables["Quirks"]
    repair_rows, repair_rules = tables["Always-on repairs"]
    assert quirk_rows == QUIRKS  # one row per quirk, no row for a quirk that does not exist
    documented = repair_rows | quirk_rules | repair_rules
    assert sorted(documented - NAMES) == []  # every repair the doc names is registered
    # every registered name has a row (a rule named after its quirk: the quirk's row)
    assert sorted(NAMES - documented - quirk_rows) == []


# -- glob model entries: the router remembers what a name resolved to -----------------------


def _glob_router() -> Any:
    from app.config import parse_config
    from providers.upstream import Router

    cfg = parse_config(
        {
            "providers": [
                {"name": "gw", "profile": "openai-compatible", "base_url": "http://127.0.0.1:9/v1"},
                {"name": "km", "profile": "kimi", "base_url": "http://127.0.0.1:9/v1"},
            ],
            "models": [
                {"name": "exact", "provider": "gw"},
                {"name": "mimo-v2.6-*", "provider": "gw", "quirks": {"enable": ["inline_think"]}},
                {"name": "kimi-*", "targets": [{"provider": "km"}, {"provider": "gw", "weight": 2}]},
            ],
        }
    )
    return Router.build(cfg)


@pytest.mark.parametrize("model", ["mimo-v2.6-flash", "mimo-v2.6-pro", "kimi-k2.6", "exact", "nothing-matches"])
def test_a_remembered_glob_match_is_what_matching_again_gives(model: str) -> None:
    r = _glob_router()
    first = r.resolve(model)
    assert first == r._match(model) if model != "exact" else first is r.routes["exact"]
    assert r.resolve(model) is first  # the second time from memory
    if first is not None and model != "exact":
        assert first.public_model == first.upstream_model == model


def test_the_memory_of_glob_matches_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from providers import upstream

    monkeypatch.setattr(upstream, "_MATCH_MEMO", 5)
    r = _glob_router()
    names = [f"mimo-v2.6-x{i}" for i in range(8)] + [f"junk-{i}" for i in range(3)]
    for name in names:
        got = r.resolve(name)
        assert (got is None) == name.startswith("junk") and got == r._match(name)
    assert len(r._matched) == 5
    # a name past the bound is still resolved, every time afresh
    late = r.resolve("mimo-v2.6-late")
    assert late is not None and late == r.resolve("mimo-v2.6-late") and late is not r.resolve("mimo-v2.6-late")


# -- Messages endpoints -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base", "url"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com/v1/messages"),
        ("https://api.anthropic.com/v1/", "https://api.anthropic.com/v1/messages"),
        ("https://api.moonshot.ai/anthropic", "https://api.moonshot.ai/anthropic/v1/messages"),
        ("https://api.xiaomimimo.com/anthropic/v1", "https://api.xiaomimimo.com/anthropic/v1/messages"),
    ],
)
def test_messages_url(base: str, url: str) -> None:
    assert upstream_url("anthropic", base, "messages") == url


def test_messages_auth_headers() -> None:
    assert auth_headers("anthropic", "k", "messages") == {"anthropic-version": "2023-06-01", "x-api-key": "k"}
    assert auth_headers("kimi", "k", "messages") == {"anthropic-version": "2023-06-01", "x-api-key": "k"}
    assert auth_headers("kimi", "k") == {"authorization": "Bearer k"}  # its Chat endpoint
    assert auth_headers("openai-compatible", None, "messages") == {"anthropic-version": "2023-06-01"}


@pytest.mark.parametrize(
    ("provider", "protocols"),
    [
        ({"profile": "anthropic"}, ("messages",)),
        ({"profile": "minimax"}, ("messages",)),
        ({"profile": "kimi"}, ("chat",)),
        ({"profile": "bedrock-mantle"}, ("responses",)),
        ({"profile": "deepseek", "protocol": "messages"}, ("messages",)),
        ({"profile": "openai-compatible", "protocol": ["messages", "chat"]}, ("messages", "chat")),
    ],
)
def test_default_protocol_is_the_profiles_first(provider: dict[str, Any], protocols: tuple[str, ...]) -> None:
    p = config_schema.ProviderCfg(name="p", base_url="http://x.test", **provider)
    assert p.protocols == protocols


@pytest.mark.parametrize(
    "provider",
    [
        {"profile": "anthropic", "protocol": "chat"},
        {"profile": "openai", "protocol": "messages"},
        {"profile": "bedrock-mantle", "protocol": "chat"},
        {"profile": "kimi", "protocol": []},
    ],
)
def test_a_protocol_the_profile_does_not_speak_is_refused(provider: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="speaks"):
        config_schema.ProviderCfg(name="p", base_url="http://x.test", **provider)


def test_gemini_error_array_gives_its_message_not_its_json() -> None:
    body = [{"error": {"code": 400, "message": "Invalid JSON payload received.", "status": "INVALID_ARGUMENT"}}]
    e = upstream_error(400, orjson.dumps(body), httpx.Headers({}), "gemini")
    assert e.message == "upstream gemini answered HTTP 400: Invalid JSON payload received."
