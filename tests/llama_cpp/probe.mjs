// Drive a real llama.cpp (node-llama-cpp's prebuilt CPU binary) on a GGUF file tinylm wrote.
//
//   node probe.mjs MODULE_DIR < request.json > answer.json
//
// MODULE_DIR holds node_modules/node-llama-cpp. The request is {"model": path, "tasks": [...]} (optional:
// "context", "threads", "kv_type" e.g. "F16", "flash_attention"); each
// task is answered in order, in llama.cpp's own terms (its tokenizer, its sampler, its chat template):
//   {"kind": "tokenize", "text": s}                   -> {"ids": [...]} (special tokens parsed)
//   {"kind": "greedy", "ids": [...], "n": k}          -> {"tokens": [...], "stopped": b, "seconds": t,
//                                                        "decode_seconds": after the first token}
//                                                        (without the end token that stopped it, if one did)
//   {"kind": "chat", "messages": [...], "n": k}       -> {"tokens": [...], "text": s, "wrapper": w,
//                                                        "context_tokens": the rendered conversation + the reply}
//   {"kind": "logprobs", "ids": [...], "from": j}     -> {"rows": [{id: logp, ...} for each position >= j]}
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const moduleDir = process.argv[2];
const lib = await import(pathToFileURL(join(moduleDir, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
const request = JSON.parse(readFileSync(0, "utf8"));
const llama = await lib.getLlama({ gpu: false, build: "never", logLevel: lib.LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: request.model });

// The KV cache in float32 and no flash attention unless asked (llama.cpp's defaults are an f16 cache and
// "auto"): a float32 file is then computed in float32 throughout, as tinylm computes it.
async function freshSequence() {
  const kv = request.kv_type ?? "F32";
  const context = await model.createContext({
    contextSize: request.context ?? 256, sequences: 1, threads: request.threads ?? 1,
    flashAttention: request.flash_attention ?? false,  // true, false or "auto"
    experimentalKvCacheKeyType: kv, experimentalKvCacheValueType: kv,
  });
  return { context, sequence: context.getSequence() };
}

async function greedy(task) {
  const { context, sequence } = await freshSequence();
  const tokens = [];
  const start = process.hrtime.bigint();
  let stopped = false;
  let first = null;
  for await (const token of sequence.evaluate(task.ids, { temperature: 0, yieldEogToken: true })) {
    first ??= process.hrtime.bigint();  // the prompt is evaluated by now: what follows is decoding
    if (model.isEogToken(token) && !task.through_eog) { stopped = true; break; }  // through_eog: for timing
    tokens.push(token);
    if (tokens.length >= task.n) break;
  }
  const end = process.hrtime.bigint();
  await context.dispose();
  return { tokens, stopped, seconds: Number(end - start) / 1e9, decode_seconds: Number(end - first) / 1e9 };
}

async function chat(task) {
  const { context, sequence } = await freshSequence();
  const history = task.messages.slice(0, -1).map((m) =>
    m.role === "system" ? { type: "system", text: m.content }
      : m.role === "user" ? { type: "user", text: m.content } : { type: "model", response: [m.content] });
  const session = new lib.LlamaChatSession({ contextSequence: sequence });
  session.setChatHistory(history);
  const tokens = [];
  const text = await session.prompt(task.messages.at(-1).content, {
    temperature: 0, maxTokens: task.n, onToken: (chunk) => tokens.push(...chunk),
  });
  const answer = { tokens, text, wrapper: session.chatWrapper.wrapperName, context_tokens: [...sequence.contextTokens] };
  session.dispose();
  await context.dispose();
  return answer;
}

async function logprobs(task) {
  const { context, sequence } = await freshSequence();
  const input = task.ids.map((id, i) => i + 1 < task.from ? id
    : [id, { generateNext: { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } } }]);
  const out = await sequence.controlledEvaluate(input);
  const rows = [];
  for (let i = task.from - 1; i < task.ids.length; i++) {
    const row = {};
    for (const [id, p] of out[i].next.probabilities) row[id] = Number.isFinite(p) && p > 0 ? Math.log(p) : String(p);
    rows.push(row);
  }
  await context.dispose();
  return { rows };
}

const answers = [];
for (const task of request.tasks) {
  if (task.kind === "tokenize") answers.push({ ids: [...model.tokenize(task.text, true)] });
  else if (task.kind === "greedy") answers.push(await greedy(task));
  else if (task.kind === "chat") answers.push(await chat(task));
  else if (task.kind === "logprobs") answers.push(await logprobs(task));
  else throw new Error(`unknown task kind ${task.kind}`);
}
process.stdout.write(JSON.stringify({ answers, eog: request.eog_probe?.map((id) => model.isEogToken(id)) }) + "\n");
await model.dispose();
await llama.dispose();
