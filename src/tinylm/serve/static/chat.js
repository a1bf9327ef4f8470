// The tinylm chat page: keeps the conversation in the page, streams each reply from
// /v1/chat/completions (Server-Sent Events) and cancels it with the Stop button (the server
// frees the request's slot as soon as the connection closes). A reply shows its reasoning
// (reasoning_content) apart from its answer, and each round of the built-in tools the server runs
// (tool_messages: the call, then the tool's result); the conversation keeps them all, so the next
// turn is sent with them. No libraries, works offline.
"use strict";

const $ = (id) => document.getElementById(id);
const conversation = [];
let modelName = null;
let controller = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api_key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "message " + role;
  const label = document.createElement("span");
  label.className = "role";
  label.textContent = role;
  const body = document.createElement("span");
  body.className = "text";
  body.textContent = text;
  div.append(label, body);
  $("log").append(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}

// A block inside a reply, before its answer (or, with before = null, after it): the reasoning, or
// one tool call or result.
function addPart(bubble, kind, text, before = bubble.querySelector(".text")) {
  const part = document.createElement("span");
  part.className = "part " + kind;
  part.textContent = text;
  bubble.insertBefore(part, before);
  return part;
}

function callText(call) {
  return "→ " + call.function.name + " " + call.function.arguments;
}

async function loadModel() {
  try {
    const reply = await fetch("/v1/models", { headers: headers() });
    const body = await reply.json();
    if (!reply.ok) throw new Error(body.error ? body.error.message : reply.statusText);
    modelName = body.data[0].id;
    $("model").textContent = modelName + " · window " + body.data[0].max_model_len + " tokens";
    const tools = body.data[0].builtin_tools || [];
    $("tools").hidden = tools.length === 0;
    $("tool_list").replaceChildren(...tools.map((name) => {
      const label = document.createElement("label");
      const box = document.createElement("input");
      Object.assign(box, { type: "checkbox", value: name, className: "tool" });
      label.append(box, " " + name);
      return label;
    }));
  } catch (err) {
    $("status").textContent = "cannot list models: " + err.message;
  }
}

function requestBody() {
  const messages = [];
  const system = $("system").value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...conversation);
  const body = {
    model: modelName, messages, stream: true,
    temperature: Number($("temperature").value), top_p: Number($("top_p").value),
    max_tokens: Number($("max_tokens").value),
  };
  const topK = Number($("top_k").value);
  if (topK > 0) body.top_k = topK;
  const tools = [...document.querySelectorAll("input.tool:checked")].map((box) => box.value);
  if (tools.length) body.builtin_tools = tools;
  return body;
}

// Read an SSE stream and call onData with each event's parsed JSON, until [DONE].
async function readEvents(response, onData) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder("utf-8");  // stream: true keeps a split character for the next read
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      if (!event.startsWith("data: ")) continue;
      const data = event.slice(6);
      if (data === "[DONE]") return;
      onData(JSON.parse(data));
    }
  }
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop").disabled = !busy;
}

async function send(text) {
  if (!modelName) await loadModel();
  conversation.push({ role: "user", content: text });
  addMessage("user", text);
  const bubble = addMessage("assistant", "");
  const out = bubble.querySelector(".text");
  controller = new AbortController();
  setBusy(true);
  $("status").textContent = "generating…";
  let reply = "", reasoning = "", thinking = null;
  const rounds = [];  // the assistant and tool messages of the built-in tools' rounds, in order
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(requestBody()), signal: controller.signal,
    });
    if (!response.ok) {
      const body = await response.json();
      throw new Error(body.error ? body.error.message : response.statusText);
    }
    await readEvents(response, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      for (const choice of chunk.choices) {
        const delta = choice.delta || {};
        if (delta.reasoning_content) {
          reasoning += delta.reasoning_content;
          if (!thinking) thinking = addPart(bubble, "reasoning", "");
          thinking.textContent = reasoning;
        }
        for (const message of delta.tool_messages || []) {  // a round of the server's tools: calls, then results
          rounds.push(message);
          if (reply) addPart(bubble, "said", reply);  // a round's own words, before its calls
          reply = "";
          if (message.role === "tool") addPart(bubble, "tool-result", "← " + message.content);
          else (message.tool_calls || []).forEach((call) => addPart(bubble, "tool-call", callText(call)));
          reasoning = "";  // what the round wrote is in its message; the answer comes after
          out.textContent = "";
          thinking = null;
        }
        for (const call of delta.tool_calls || []) {  // the last round's calls, after what it wrote
          addPart(bubble, "tool-call", callText(call), null);
        }
        if (delta.content) {
          reply += delta.content;
          out.textContent = reply;
        }
        $("log").scrollTop = $("log").scrollHeight;
        if (choice.finish_reason) $("status").textContent = "finished: " + choice.finish_reason;
      }
    });
  } catch (err) {
    if (err.name === "AbortError") {
      bubble.classList.add("stopped");
      $("status").textContent = "stopped";
    } else {
      $("status").textContent = "error: " + err.message;
    }
  } finally {
    const answer = { role: "assistant", content: reply };
    if (reasoning) answer.reasoning_content = reasoning;
    conversation.push(...rounds, answer);
    controller = null;
    setBusy(false);
  }
}

$("form").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("input").value;
  if (!text.trim() || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("form").requestSubmit();
  }
});
$("stop").addEventListener("click", () => { if (controller) controller.abort(); });
$("clear").addEventListener("click", () => {
  conversation.length = 0;
  $("log").textContent = "";
  $("status").textContent = "";
});
loadModel();
