// The Switchboard console (app/console.py): reads /console/api/overview and /v1/admin/keys
// every two seconds and draws them.  Every value from the server is put in the page as
// text (textContent, attribute values), never as markup: names come from clients.
"use strict";
(() => {
  const REFRESH_MS = 2000;
  const SVGNS = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  let keyInfo = {};

  function fmt(n, digits = 0) {
    if (n === null || n === undefined) return "–";
    return Number(n).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  function cell(tr, text, cls) {
    const td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  function fill(tbody, rows, render, empty) {
    const frag = document.createDocumentFragment();
    for (const row of rows) {
      const tr = document.createElement("tr");
      render(tr, row);
      frag.appendChild(tr);
    }
    if (!rows.length && empty) {
      const tr = document.createElement("tr");
      const td = cell(tr, empty, "muted");
      td.colSpan = 12;
      frag.appendChild(tr);
    }
    tbody.replaceChildren(frag);
  }

  async function api(method, path, body) {
    const opt = { method, headers: { "x-switchboard-console": "1" }, credentials: "same-origin" };
    if (body !== undefined) {
      opt.headers["content-type"] = "application/json";
      opt.body = JSON.stringify(body);
    }
    const r = await fetch(path, opt);
    if (r.status === 401) {
      location.reload(); // the session ended: the login form
      throw new Error("signed out");
    }
    const data = await r.json();
    if (!r.ok) throw new Error((data.error && data.error.message) || r.statusText);
    return data;
  }

  function chart(svg, series, lines) {
    const W = 600, H = 140, LEFT = 40, BOTTOM = 16, TOP = 8;
    svg.replaceChildren();
    const values = series.flatMap((p) => lines.map((l) => p[l.key] || 0));
    const max = Math.max(1, ...values);
    const axis = document.createElementNS(SVGNS, "line");
    axis.setAttribute("x1", LEFT); axis.setAttribute("x2", W); axis.setAttribute("y1", H - BOTTOM); axis.setAttribute("y2", H - BOTTOM);
    axis.setAttribute("class", "axis");
    svg.appendChild(axis);
    const top = document.createElementNS(SVGNS, "text");
    top.setAttribute("x", "2"); top.setAttribute("y", String(TOP + 8)); top.setAttribute("class", "tick");
    top.textContent = fmt(max, max < 10 ? 1 : 0);
    svg.appendChild(top);
    const zero = document.createElementNS(SVGNS, "text");
    zero.setAttribute("x", "2"); zero.setAttribute("y", String(H - BOTTOM)); zero.setAttribute("class", "tick");
    zero.textContent = "0";
    svg.appendChild(zero);
    const n = 60;
    for (const l of lines) {
      const pts = series.map((p, i) => {
        const x = LEFT + ((W - LEFT - 2) * (i + n - series.length)) / (n - 1);
        const y = H - BOTTOM - ((H - BOTTOM - TOP) * (p[l.key] || 0)) / max;
        return `${x.toFixed(1)},${y.toFixed(1)}`;
      });
      const line = document.createElementNS(SVGNS, "polyline");
      line.setAttribute("points", pts.join(" "));
      line.setAttribute("class", `line ${l.cls}`);
      svg.appendChild(line);
    }
  }

  function pct(p) {
    if (!p || p.p50 === null) return "–";
    return `${fmt(p.p50, 1)} / ${fmt(p.p90, 1)} / ${fmt(p.p99, 1)} ms`;
  }

  function drawNow(now) {
    $("now-scope").textContent = now.instances > 1 ? `(${now.instances} instances)` : "(this instance)";
    $("now-rps").textContent = fmt(now.requests_per_second, 2);
    $("now-tps").textContent = fmt(now.tokens_per_second, 1);
    $("now-open").textContent = fmt(now.answers_open);
    $("now-latency").textContent = pct(now.latency_ms);
    $("now-ttft").textContent = pct(now.ttft_ms);
    $("now-total").textContent = fmt(now.requests_total);
    chart($("chart-requests"), now.series, [{ key: "requests", cls: "requests" }, { key: "errors", cls: "errors" }]);
    chart($("chart-tokens"), now.series, [{ key: "tokens", cls: "tokens" }]);
    fill($("errors").tBodies[0], now.errors, (tr, e) => {
      tr.dataset.kind = e.kind;
      cell(tr, e.kind);
      cell(tr, fmt(e.count), "num");
    }, "none");
  }

  function budgets(td, list) {
    for (const b of list) {
      const div = document.createElement("div");
      div.className = "budget";
      const meter = document.createElement("meter");
      meter.min = 0;
      meter.max = b.max;
      meter.value = Math.min(b.used, b.max);
      meter.high = b.max * 0.8;
      const money = b.limit.startsWith("cost");
      const label = document.createElement("span");
      label.textContent = `${b.limit.replaceAll("_", " ")}: ${fmt(b.left, money ? 2 : 0)} left of ${fmt(b.max, money ? 2 : 0)}`;
      div.append(meter, label);
      td.appendChild(div);
    }
  }

  function limitsText(info) {
    if (!info) return "";
    const parts = [];
    if (info.models) parts.push(`models: ${info.models.join(", ")}`);
    for (const [k, v] of Object.entries(info.limits || {})) parts.push(`${k.replaceAll("_", " ")}: ${v}`);
    if (info.expires_at) parts.push(`${info.expired ? "expired" : "expires"} ${info.expires_at}`);
    if (info.rotating_until) parts.push(`old secret works until ${info.rotating_until}`);
    return parts.join("; ");
  }

  function drawKeys(keys, scope) {
    $("keys-scope").textContent = scope;
    fill($("keys-table").tBodies[0], keys, (tr, k) => {
      tr.dataset.key = k.name;
      cell(tr, k.name, "name");
      cell(tr, k.source === "-" ? "no longer a key" : k.source + (k.read_only ? " (read-only)" : ""), "source");
      cell(tr, fmt(k.today.requests), "num requests");
      cell(tr, fmt(k.today.input + k.today.output), "num tokens");
      cell(tr, fmt(k.today.cost_usd, 4), "num cost");
      cell(tr, fmt(k.month.cost_usd, 4), "num cost-month");
      cell(tr, fmt(k.cache_saved_usd.month, 4), "num saved");
      cell(tr, fmt(k.today.errors), "num errors");
      budgets(cell(tr, "", "budgets"), k.budgets);
      cell(tr, limitsText(keyInfo[k.name]), "limits");
      const actions = cell(tr, "", "actions");
      if (k.source === "api") {
        for (const [label, fn] of [["Edit", edit], ["Rotate", rotate], ["Revoke", revoke]]) {
          const b = document.createElement("button");
          b.type = "button";
          b.textContent = label;
          b.className = label.toLowerCase();
          b.addEventListener("click", () => fn(k.name));
          actions.appendChild(b);
        }
      }
    }, "no keys");
  }

  function drawHealth(rows) {
    fill($("health-table").tBodies[0], rows, (tr, h) => {
      tr.dataset.provider = h.provider;
      cell(tr, h.provider, "name");
      cell(tr, h.breaker, `breaker ${h.breaker}`);
      cell(tr, fmt(h.requests), "num requests");
      cell(tr, fmt(h.attempts), "num attempts");
      cell(tr, fmt(h.failed_attempts), "num failed");
      cell(tr, `${fmt(h.error_rate_now * 100, 1)} %`, "num rate-now");
      cell(tr, `${fmt(h.error_rate * 100, 1)} %`, "num rate");
      cell(tr, fmt(h.fallbacks), "num fallbacks");
      cell(tr, Object.entries(h.upstream_errors).map(([c, n]) => `${c}: ${n}`).join(", "), "upstream-errors");
      cell(tr, Object.entries(h.model_breakers).map(([m, s]) => `${m}: ${s}`).join(", "), "model-breakers");
    }, "no providers");
  }

  function drawFailures(rows) {
    fill($("failures-table").tBodies[0], rows, (tr, f) => {
      tr.dataset.requestId = f.request_id;
      for (const [v, cls] of [[f.at], [f.request_id, "rid"], [f.key, "key"], [f.model, "model"], [f.provider], [f.status, "num"], [f.outcome], [fmt(f.duration_ms, 1), "num"]]) {
        cell(tr, v, cls);
      }
    }, "none");
  }

  async function refresh() {
    try {
      const [ov, keys] = await Promise.all([api("GET", "/console/api/overview"), api("GET", "/v1/admin/keys")]);
      keyInfo = {};
      for (const k of keys.data) keyInfo[k.name] = k;
      drawNow(ov.now);
      drawKeys(ov.keys, `(today since ${ov.day_start}; usage of the ${ov.store || "no"} store)`);
      drawHealth(ov.health);
      drawFailures(ov.failures);
      $("status").textContent = `updated ${ov.at}` + (ov.usage_error ? ` · usage: ${ov.usage_error}` : "");
      $("status").className = ov.usage_error ? "error" : "muted";
    } catch (e) {
      $("status").textContent = `not updated: ${e.message}`;
      $("status").className = "error";
    }
  }

  function showSecret(made) {
    $("secret-name").textContent = made.name;
    $("secret").textContent = made.secret;
    $("secret-box").hidden = false;
  }

  function edit(name) {
    const form = $("key-form");
    const info = keyInfo[name] || {};
    form.elements.name.value = name;
    form.elements.models.value = (info.models || []).join(", ");
    for (const f of ["requests_per_minute", "tokens_per_day", "cost_per_day", "concurrent"]) {
      form.elements[f].value = (info.limits || {})[f] ?? "";
    }
    form.elements.expires_at.value = info.expires_at || "";
    form.elements.name.focus();
  }

  async function rotate(name) {
    if (!confirm(`Rotate the key "${name}"? Its old secret keeps working for an hour.`)) return;
    try {
      showSecret(await api("POST", `/v1/admin/keys/${encodeURIComponent(name)}/rotate`, { grace_seconds: 3600 }));
    } catch (e) {
      $("key-error").textContent = e.message;
    }
    refresh();
  }

  async function revoke(name) {
    if (!confirm(`Revoke the key "${name}"? It is refused from the next request on.`)) return;
    try {
      await api("DELETE", `/v1/admin/keys/${encodeURIComponent(name)}`);
    } catch (e) {
      $("key-error").textContent = e.message;
    }
    refresh();
  }

  async function submitKey(ev) {
    ev.preventDefault();
    const form = ev.target;
    const op = ev.submitter ? ev.submitter.value : "create";
    const el = form.elements;
    const body = {};
    const limits = {};
    for (const f of ["requests_per_minute", "tokens_per_day", "concurrent"]) {
      if (el[f].value !== "") limits[f] = parseInt(el[f].value, 10);
    }
    if (el.cost_per_day.value !== "") limits.cost_per_day = parseFloat(el.cost_per_day.value);
    const models = el.models.value.split(",").map((m) => m.trim()).filter((m) => m);
    if (Object.keys(limits).length) body.limits = limits;
    if (models.length) body.models = models;
    if (el.expires_at.value.trim()) body.expires_at = el.expires_at.value.trim();
    $("key-error").textContent = "";
    const name = el.name.value;
    try {
      if (op === "update") {
        await api("PATCH", `/v1/admin/keys/${encodeURIComponent(name)}`, body);
      } else {
        showSecret(await api("POST", "/v1/admin/keys", { name, ...body }));
      }
      form.reset();
    } catch (e) {
      $("key-error").textContent = e.message;
    }
    refresh();
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("key-form").addEventListener("submit", submitKey);
    $("secret-hide").addEventListener("click", () => {
      $("secret").textContent = "";
      $("secret-box").hidden = true;
    });
    refresh();
    setInterval(refresh, REFRESH_MS);
  });
})();
