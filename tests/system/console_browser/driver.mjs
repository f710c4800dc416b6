// Drives Debian's Chromium through the console (tests/system/test_console_browser.py, and
// tests/system/test_keys_cluster.py with mode "cluster").  node driver.mjs JOB.json: the job
// names the browser, the proxy, the keys and two files (ready: written here once the
// interactive steps are done; quiet: written by the test once its load stopped).  Prints
// one JSON object: what each step saw.
import fs from "node:fs";
import { chromium } from "playwright-core";

const job = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const out = { steps: [], consoleErrors: [], pageErrors: [], failedResponses: [] };
const step = (name, data) => out.steps.push({ name, at: Date.now(), ...(data || {}) });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(fn, what, ms = 20000) {
  const end = Date.now() + ms;
  for (;;) {
    const got = await fn();
    if (got) return got;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

async function chat(key, model = "demo") {
  const r = await fetch(`${job.base}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }),
  });
  await r.arrayBuffer();
  return r.status;
}

// what the page shows: every panel's text, as a person reads it
function snapshot() {
  const $ = (id) => document.getElementById(id);
  const rows = (sel) =>
    [...document.querySelectorAll(`${sel} tbody tr`)].map((tr) => ({
      data: { ...tr.dataset },
      cells: [...tr.cells].map((td) => td.textContent),
    }));
  const line = document.querySelector("#chart-requests polyline");
  return {
    status: $("status").textContent,
    scope: $("now-scope").textContent,
    tiles: {
      rps: $("now-rps").textContent,
      tps: $("now-tps").textContent,
      open: $("now-open").textContent,
      latency: $("now-latency").textContent,
      ttft: $("now-ttft").textContent,
      total: $("now-total").textContent,
    },
    errors: rows("#errors"),
    keys: rows("#keys-table"),
    health: rows("#health-table"),
    failures: rows("#failures-table"),
    chartPoints: line ? line.getAttribute("points").split(" ").length : 0,
    scripts: document.scripts.length,
    injected: document.querySelectorAll("main img, main script, main iframe, main b").length,
    pwned: window.__pwned ?? null,
    cookieVisible: document.cookie.includes("sb_console"),
  };
}

// the browser's own HOME and XDG folders beside its profile, under the test's folder
// (with the user's own, Chromium left ~/.cache/dconf behind at every run)
const home = `${job.userDataDir}-home`;
const ctx = await chromium.launchPersistentContext(job.userDataDir, {
  executablePath: job.exe,
  headless: true,
  env: {
    ...process.env,
    ...job.env,
    HOME: home,
    XDG_CACHE_HOME: `${home}/.cache`,
    XDG_CONFIG_HOME: `${home}/.config`,
    XDG_DATA_HOME: `${home}/.local/share`,
  },
  args: [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
  ],
  viewport: { width: 1400, height: 1000 },
});
ctx.setDefaultTimeout(30000);
async function cluster() {
  // the console of one instance of a cluster: signed in, until it counts every instance
  const page = await ctx.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") out.consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => out.pageErrors.push(String(e)));
  await page.goto(`${job.base}/console`);
  await page.fill("#key", job.adminKey);
  await Promise.all([page.waitForNavigation(), page.click("button[type=submit]")]);
  const seen = await until(async () => {
    const s = await page.evaluate(snapshot);
    return s.scope === job.expectScope && s.tiles.total === job.expectTotal ? s : null;
  }, `${job.expectScope} and ${job.expectTotal} requests`);
  step("cluster", { snapshot: seen });
  await page.screenshot({ path: job.screenshot, fullPage: true });
}

async function single() {
  // 1. a non-admin: the login form refuses a client key; nothing is readable without a session
  const a = await ctx.newPage();
  await a.goto(`${job.base}/console`);
  await a.fill("#key", job.clientKey);
  const [refused] = await Promise.all([a.waitForNavigation(), a.click("button[type=submit]")]);
  step("non_admin", {
    status: refused.status(),
    error: await a.textContent("#login-error"),
    url: a.url(),
    overview: await a.evaluate(async () => (await fetch("/console/api/overview")).status),
    keys: await a.evaluate(async () => (await fetch("/v1/admin/keys")).status),
    cookies: (await ctx.cookies()).map((c) => c.name),
  });
  await a.close();

  // 2. the admin signs in
  const page = await ctx.newPage();
  page.on("console", (m) => {
    if (m.type() === "error") out.consoleErrors.push(m.text());
  });
  page.on("pageerror", (e) => out.pageErrors.push(String(e)));
  page.on("response", (r) => {
    if (r.status() >= 400) out.failedResponses.push(`${r.status()} ${r.url()}`);
  });
  page.on("dialog", (d) => d.accept());
  await page.goto(`${job.base}/console`);
  await page.fill("#key", job.adminKey);
  await Promise.all([page.waitForNavigation(), page.click("button[type=submit]")]);
  await page.waitForSelector("#keys-table tbody tr[data-key]");
  const cookie = (await ctx.cookies()).find((c) => c.name === "sb_console");
  step("signed_in", {
    url: page.url(),
    cookie: cookie && { httpOnly: cookie.httpOnly, sameSite: cookie.sameSite, expires: cookie.expires },
  });

  // 3. under load: the "now" panel moves
  const live = await until(async () => {
    const s = await page.evaluate(snapshot);
    return parseFloat(s.tiles.rps.replaceAll(",", "")) > 0 && s.chartPoints > 1 && s.tiles.ttft !== "–" ? s : null;
  }, "requests per second above 0");
  step("live", { snapshot: live });

  // 4. a key made in the page, named as markup: it stays text; it works; revoked in the page
  await page.fill("#key-form input[name=name]", job.oddKey);
  await page.fill("#key-form input[name=models]", `demo, ${job.oddModel}`);
  await page.fill("#key-form input[name=requests_per_minute]", "1000");
  await page.click("#key-create");
  await page.waitForSelector("#secret-box:not([hidden])");
  const secret = await page.textContent("#secret");
  const row = await until(
    () =>
      page.evaluate((name) => {
        const tr = [...document.querySelectorAll("#keys-table tbody tr")].find((t) => t.dataset.key === name);
        return tr ? { name: tr.cells[0].textContent, limits: tr.querySelector(".limits").textContent } : null;
      }, job.oddKey),
    "the new key's row",
  );
  const works = await chat(secret);
  await page.click("#secret-hide");
  await page.evaluate((name) => {
    const tr = [...document.querySelectorAll("#keys-table tbody tr")].find((t) => t.dataset.key === name);
    tr.querySelector("button.revoke").click();
  }, job.oddKey);
  // (the row stays while the key has usage today, as a name that is no longer a key)
  await until(
    () =>
      page.evaluate((name) => {
        const tr = [...document.querySelectorAll("#keys-table tbody tr")].find((t) => t.dataset.key === name);
        return !tr || !tr.querySelector("button.revoke");
      }, job.oddKey),
    "the revoked key's row to lose its buttons",
  );
  step("made_and_revoked", { secretPrefix: secret.slice(0, 6), row, works, afterRevoke: await chat(secret), snapshot: await page.evaluate(snapshot) });

  // 5. the test stops its load; once the usage records are written and the page has
  // refreshed, what it shows is read and compared with /v1/admin/usage and /metrics
  fs.writeFileSync(job.readyFile, "ready");
  await until(() => fs.existsSync(job.quietFile), "the test's quiet file", 60000);
  await sleep(job.settleMs);
  const before = await page.textContent("#status");
  await until(async () => (await page.textContent("#status")) !== before, "a refresh after the quiet");
  step("final", { snapshot: await page.evaluate(snapshot) });
  await page.screenshot({ path: job.screenshot, fullPage: true });
}

try {
  await (job.mode === "cluster" ? cluster() : single());
} catch (e) {
  out.error = String(e && e.stack ? e.stack : e);
} finally {
  await ctx.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
