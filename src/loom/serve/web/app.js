// Loom chat page: talks to this server's own OpenAI-compatible API with streaming, shows each
// reply's time to first token and tokens/s, and can stop a reply mid-way.  No external code.
"use strict";

const $ = (id) => document.getElementById(id);
const els = {
  model: $("model"), health: $("health"), log: $("log"), prompt: $("prompt"), send: $("send"),
  stop: $("stop"), composer: $("composer"), settings: $("settings"),
  settingsToggle: $("settings-toggle"), newChat: $("new-chat"), system: $("system"),
  temperature: $("temperature"), topP: $("top-p"), maxTokens: $("max-tokens"), seed: $("seed"),
  apiKey: $("api-key"),
};

const state = {
  history: [],        // {role, content} of the conversation so far
  controller: null,   // AbortController of the reply being generated
};

// Settings survive reloads.
const saved = ["system", "temperature", "topP", "maxTokens", "seed", "apiKey"];
for (const name of saved) {
  const v = localStorage.getItem("loom." + name);
  if (v !== null) els[name].value = v;
  els[name].addEventListener("change", () => localStorage.setItem("loom." + name, els[name].value));
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = els.apiKey.value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function showEmpty() {
  if (els.log.children.length === 0) {
    const p = document.createElement("p");
    p.className = "empty";
    p.textContent = "Send a message to start.";
    els.log.appendChild(p);
  }
}

function addMessage(role, text) {
  const empty = els.log.querySelector(".empty");
  if (empty) empty.remove();
  const div = document.createElement("div");
  div.className = "msg " + role;
  const content = document.createElement("pre");
  content.className = "content";
  content.textContent = text;
  div.appendChild(content);
  els.log.appendChild(div);
  els.log.scrollTop = els.log.scrollHeight;
  return div;
}

function setStats(div, text) {
  let s = div.querySelector(".stats");
  if (!s) {
    s = document.createElement("div");
    s.className = "stats";
    div.appendChild(s);
  }
  s.textContent = text;
}

function setBusy(busy) {
  els.send.disabled = busy;
  els.send.hidden = busy;
  els.stop.hidden = !busy;
  els.prompt.disabled = false;
}

async function errorMessage(res) {
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) return j.error.message;
  } catch (_) { /* not JSON */ }
  return "HTTP " + res.status;
}

async function loadModels() {
  try {
    const res = await fetch("/v1/models", { headers: headers() });
    if (!res.ok) throw new Error(await errorMessage(res));
    const j = await res.json();
    els.model.replaceChildren();
    for (const m of j.data) {
      const o = document.createElement("option");
      o.value = m.id;
      o.textContent = m.context_length ? `${m.id} (context ${m.context_length})` : m.id;
      els.model.appendChild(o);
    }
  } catch (e) {
    els.health.textContent = "models: " + e.message;
    els.health.classList.add("bad");
  }
}

async function pollHealth() {
  try {
    const res = await fetch("/health");
    const j = await res.json();
    els.health.classList.remove("bad");
    els.health.textContent =
        `${j.slots_busy}/${j.slots} slots busy · ${j.queue} waiting`;
  } catch (e) {
    els.health.classList.add("bad");
    els.health.textContent = "server unreachable";
  }
}

function numberOrNull(input) {
  const v = input.value.trim();
  if (v === "") return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

// Reads server-sent events from a fetch response, calling onData(json) for each `data:` line.
async function readEvents(res, onData) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") return;
        onData(JSON.parse(data));
      }
    }
  }
}

// The reply's figures: the server's own timings (sent with the final chunk) when it gave them, so
// they are right however the stream was cut into network reads; else the browser's clock.
function formatStats(r) {
  const parts = [];
  const t = r.timings;
  const ttft = t && typeof t.ttft_ms === "number" ? t.ttft_ms : r.ttft;
  if (ttft !== null) parts.push(`TTFT ${Math.round(ttft)} ms`);
  if (t && typeof t.predicted_per_second === "number") {
    parts.push(`${t.predicted_per_second.toFixed(1)} tokens/s`);
  } else if (!t && r.tokens > 1 && r.last > r.first) {
    const rate = (r.tokens - 1) / ((r.last - r.first) / 1000);
    parts.push(`${rate.toFixed(1)} tokens/s`);
  }
  parts.push(`${r.exact ? "" : "~"}${r.tokens} tokens`);
  if (r.finish) parts.push(r.finish);
  return parts.join(" · ");
}

async function send(text) {
  if (state.controller) return;
  addMessage("user", text);
  state.history.push({ role: "user", content: text });
  const reply = addMessage("assistant", "");
  reply.classList.add("streaming");
  const content = reply.querySelector(".content");

  const messages = [];
  const system = els.system.value.trim();
  if (system) messages.push({ role: "system", content: system });
  messages.push(...state.history);
  const body = {
    model: els.model.value,
    messages,
    stream: true,
    stream_options: { include_usage: true },
  };
  const temperature = numberOrNull(els.temperature);
  const topP = numberOrNull(els.topP);
  const maxTokens = numberOrNull(els.maxTokens);
  const seed = numberOrNull(els.seed);
  if (temperature !== null) body.temperature = temperature;
  if (topP !== null) body.top_p = topP;
  if (maxTokens !== null) body.max_tokens = Math.round(maxTokens);
  if (seed !== null) body.seed = Math.round(seed);

  const r = { ttft: null, first: 0, last: 0, tokens: 0, exact: false, finish: "", timings: null };
  const controller = new AbortController();
  state.controller = controller;
  setBusy(true);
  const start = performance.now();
  let text_out = "";
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(body), signal: controller.signal,
    });
    if (!res.ok) throw new Error(await errorMessage(res));
    await readEvents(res, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message || "generation failed");
      if (chunk.timings) r.timings = chunk.timings;
      if (chunk.usage) {
        r.tokens = chunk.usage.completion_tokens;
        r.exact = true;
      }
      const choice = chunk.choices && chunk.choices[0];
      if (!choice) return;
      const delta = choice.delta && choice.delta.content;
      if (delta) {
        const now = performance.now();
        if (r.ttft === null) {
          r.ttft = now - start;
          r.first = now;
        }
        r.last = now;
        if (!r.exact) r.tokens += 1;  // about one token per chunk until usage arrives
        text_out += delta;
        content.textContent = text_out;
        els.log.scrollTop = els.log.scrollHeight;
      }
      if (choice.finish_reason) r.finish = choice.finish_reason;
      setStats(reply, formatStats(r));
    });
  } catch (e) {
    if (e.name === "AbortError") {
      r.finish = "stopped";
    } else {
      reply.classList.add("error");
      content.textContent = text_out ? text_out + "\n" : "";
      content.textContent += "Error: " + e.message;
      r.finish = "error";
    }
  } finally {
    reply.classList.remove("streaming");
    reply.dataset.finish = r.finish || "stop";
    setStats(reply, formatStats(r));
    if (text_out) state.history.push({ role: "assistant", content: text_out });
    state.controller = null;
    setBusy(false);
    els.prompt.focus();
  }
}

els.composer.addEventListener("submit", (e) => {
  e.preventDefault();
  const text = els.prompt.value;
  if (!text.trim() || state.controller) return;
  els.prompt.value = "";
  send(text);
});
els.prompt.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    els.composer.requestSubmit();
  }
});
els.stop.addEventListener("click", () => {
  if (state.controller) state.controller.abort();
});
els.newChat.addEventListener("click", () => {
  if (state.controller) state.controller.abort();
  state.history = [];
  els.log.replaceChildren();
  showEmpty();
});
els.settingsToggle.addEventListener("click", () => {
  const open = els.settings.hidden;
  els.settings.hidden = !open;
  els.settingsToggle.setAttribute("aria-expanded", String(open));
});
els.apiKey.addEventListener("change", loadModels);

showEmpty();
loadModels();
pollHealth();
setInterval(pollHealth, 5000);
