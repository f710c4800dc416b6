// Vercel AI SDK driver for Switchboard's e2e suite.
//
// Reads one JSON job on stdin:
//   {"base_url", "api_key", "model",
//    "api": "responses" | "chat",          // openai.responses(model) / openai.chat(model), both at their defaults
//    "mode": "stream" | "generate",        // streamText / generateText
//    "prompt", "max_steps",                // stopWhen: isStepCount(max_steps)
//    "tools": [{"name", "description", "param", "output"}],  // each takes {<param>: string}, returns output
//    "timeout_ms", "record_bodies": bool}  // record_bodies: also the raw response bodies
// and prints one JSON summary on stdout: what a user of the SDK sees (text, steps, tool calls,
// tool results, finish reason, errors), every tool execution with its input, and every HTTP
// request the SDK sent (its URL and JSON body), captured by a fetch wrapper.
// Exits 0 whenever it could print the summary (errors are in it), 2 on a bad job.

import { createOpenAI } from '@ai-sdk/openai';
import { generateText, isStepCount, jsonSchema, streamText, tool } from 'ai';

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

function errInfo(e) {
  if (e == null) return null;
  const out = { name: e.name ?? typeof e, message: String(e.message ?? e) };
  for (const k of ['statusCode', 'url', 'responseBody', 'finishReason', 'reason']) {
    if (e[k] !== undefined) out[k] = typeof e[k] === 'string' ? e[k].slice(0, 3000) : e[k];
  }
  if (e.cause) out.cause = errInfo(e.cause);
  if (Array.isArray(e.errors)) out.errors = e.errors.map(errInfo);
  return out;
}

function plain(v) {
  return v === undefined ? null : JSON.parse(JSON.stringify(v ?? null));
}

function summarizeStep(s) {
  return {
    text: s.text,
    reasoning: s.reasoningText ?? null,
    finish_reason: s.finishReason,
    raw_finish_reason: s.rawFinishReason ?? null,
    tool_calls: s.toolCalls.map((c) => ({ id: c.toolCallId, name: c.toolName, input: plain(c.input) })),
    tool_results: s.toolResults.map((r) => ({ id: r.toolCallId, name: r.toolName, output: plain(r.output) })),
    content_types: s.content.map((p) => p.type),
    // the ids the SDK keeps for the next step (what it turns into item_reference items)
    provider_metadata: s.content.map((p) => plain(p.providerMetadata ?? null)),
    response_id: s.response?.id ?? null,
    warnings: plain(s.warnings ?? []),
  };
}

async function main() {
  let job;
  try {
    job = JSON.parse(await readStdin());
  } catch (e) {
    process.stderr.write(`bad job: ${e}\n`);
    process.exit(2);
  }
  const requests = [];
  const executions = [];
  const errors = [];
  const recordingFetch = async (url, init) => {
    const rec = { url: String(url), method: init?.method ?? 'GET', body: null };
    try {
      rec.body = typeof init?.body === 'string' ? JSON.parse(init.body) : null;
    } catch {
      rec.body = { unparsed: String(init.body).slice(0, 3000) };
    }
    requests.push(rec);
    const res = await fetch(url, init);
    rec.status = res.status;
    if (job.record_bodies) {
      const copy = res.clone();
      rec.response_text = copy.text().then((t) => t.slice(0, 60000), (e) => `<unread: ${e}>`);
    }
    return res;
  };

  const openai = createOpenAI({ baseURL: job.base_url, apiKey: job.api_key, fetch: recordingFetch });
  const model = job.api === 'chat' ? openai.chat(job.model) : openai.responses(job.model);

  const tools = {};
  for (const t of job.tools) {
    tools[t.name] = tool({
      description: t.description,
      inputSchema: jsonSchema({
        type: 'object',
        properties: { [t.param]: { type: 'string' } },
        required: [t.param],
        additionalProperties: false,
      }),
      execute: async (input) => {
        executions.push({ tool: t.name, input: plain(input) });
        return t.output;
      },
    });
  }

  const common = {
    model,
    tools,
    prompt: job.prompt,
    stopWhen: isStepCount(job.max_steps ?? 3),
    maxRetries: 0, // a retried request would consume the scripted upstream's next turn
    abortSignal: AbortSignal.timeout(job.timeout_ms ?? 20000),
  };

  const out = { sdk: 'ai', api: job.api, mode: job.mode, stream_parts: [] };
  try {
    if (job.mode === 'stream') {
      const result = streamText({ ...common, onError: ({ error }) => errors.push({ where: 'onError', ...errInfo(error) }) });
      for await (const part of result.fullStream) {
        out.stream_parts.push(part.type);
        if (part.type === 'error') errors.push({ where: 'stream', ...errInfo(part.error) });
      }
      out.text = await result.text;
      out.finish_reason = await result.finishReason;
      out.steps = (await result.steps).map(summarizeStep);
    } else {
      const result = await generateText(common);
      out.text = result.text;
      out.finish_reason = result.finishReason;
      out.steps = result.steps.map(summarizeStep);
    }
  } catch (e) {
    errors.push({ where: 'throw', ...errInfo(e) });
  }
  for (const r of requests) if (r.response_text) r.response_text = await r.response_text;
  out.tool_calls = (out.steps ?? []).flatMap((s) => s.tool_calls);
  out.tool_results = (out.steps ?? []).flatMap((s) => s.tool_results);
  out.executions = executions;
  out.errors = errors;
  out.requests = requests;
  process.stdout.write(JSON.stringify(out) + '\n');
}

await main();
