// The operator account page: asks for the account's API key (kept in this tab's sessionStorage,
// sent only in the Authorization header), reads GET /v1/account every few seconds and shows the
// account's balances, its nodes, each node's earnings per job and per reserved-slot period, and
// why a node gets no work.  Everything from the hub is written with textContent, never as HTML.
"use strict";

const KEY_ITEM = "loom-account-key";
const REFRESH_MS = 5000;
const TIMEOUT_MS = 8000;

const $ = (id) => document.getElementById(id);
let timer = 0;
let lastOk = 0;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el("td", c));
  return tr;
}

function num(text, negative) {
  return el("td", text, negative ? "num negative" : "num");
}

function when(ms) {
  return new Date(ms).toISOString().replace("T", " ").slice(0, 19) + " UTC";
}

function minutes(m) {
  return String(Math.floor(m / 60)).padStart(2, "0") + ":" + String(m % 60).padStart(2, "0");
}

function slotText(s) {
  if (!s) return "—";
  const window = s.begin_minute === 0 && s.end_minute === 1440
    ? "all day" : `${minutes(s.begin_minute)}-${minutes(s.end_minute)} UTC`;
  let t = `${s.state} for ${s.model}, ${window}: ${(100 * s.availability_30d).toFixed(1)}% of ` +
          `${s.probes_30d} probes answered (30 days)`;
  if (s.lost_reason) t += `; lost: ${s.lost_reason}`;
  return t;
}

function message(text) {
  const m = $("message");
  m.textContent = text;
  m.hidden = !text;
}

function showForm(show) {
  $("key-form").hidden = !show;
  if (show) $("key").focus();
}

function renderNodes(nodes) {
  const body = $("nodes").tBodies[0];
  body.replaceChildren();
  for (const n of nodes) {
    const reasons = el("td");
    if (n.idle_reasons.length) {
      const ul = el("ul", null, "reasons");
      for (const r of n.idle_reasons) ul.appendChild(el("li", r));
      reasons.appendChild(ul);
    } else {
      reasons.textContent = n.connected ? "it gets work" : "—";
    }
    const tr = row([el("td", n.name), el("td", n.node_id, "id"), el("td", n.state, `state ${n.state}`),
                    num(n.pending), num(n.available), el("td", slotText(n.slot)), reasons]);
    tr.className = "node";
    tr.dataset.node = n.node_id;
    body.appendChild(tr);
  }
  $("no-nodes").hidden = nodes.length > 0;
  $("node-count").textContent = nodes.length === 1 ? "1 node" : `${nodes.length} nodes`;
}

function earningsTable(caption, head, rows) {
  const table = el("table");
  table.appendChild(el("caption", caption, "note"));
  const thead = el("thead");
  thead.appendChild(row(head.map((h) => el("th", h, h === "credits" || h === "tokens" ? "num" : ""))));
  table.appendChild(thead);
  const tbody = el("tbody");
  for (const r of rows) tbody.appendChild(r);
  table.appendChild(tbody);
  return table;
}

function renderEarnings(nodes) {
  const box = $("earnings");
  box.replaceChildren(el("h2", "Earnings, newest first"));
  for (const n of nodes) {
    const section = el("div", null, "node-earnings");
    section.dataset.node = n.node_id;
    section.appendChild(el("h3", `${n.name} (${n.node_id})`));
    const jobs = [], slots = [], other = [];
    for (const e of n.earnings) {
      let tr;
      if (e.kind === "tokens") {
        tr = row([el("td", when(e.at_ms)), el("td", e.job_id, "id"), el("td", e.model),
                  num(e.tokens), num(e.credits)]);
        jobs.push(tr);
      } else if (e.kind === "slot") {
        const probes = e.probes === null ? "—" : `${e.probes_answered} of ${e.probes}`;
        tr = row([el("td", when(e.at_ms)), el("td", `slot ${e.slot_id}, period ${e.period}`),
                  el("td", e.model), el("td", probes), num(e.credits)]);
        slots.push(tr);
      } else {
        tr = row([el("td", when(e.at_ms)), el("td", e.kind), el("td", e.attempt_id || e.ref, "id"),
                  el("td", e.memo), num(e.credits, e.credits_micro < 0)]);
        other.push(tr);
      }
      tr.className = `earning ${e.kind}`;
    }
    if (!n.earnings.length) section.appendChild(el("p", "Nothing earned yet.", "note"));
    if (jobs.length) {
      section.appendChild(earningsTable("per job: its attempt's share of the charge",
                                        ["when", "job", "model", "tokens", "credits"], jobs));
    }
    if (slots.length) {
      section.appendChild(earningsTable("per reserved-slot period: its availability credit",
                                        ["when", "period", "model", "probes answered", "credits"],
                                        slots));
    }
    if (other.length) {
      section.appendChild(earningsTable("taken back (a failed check, an untrusted node)",
                                        ["when", "kind", "attempt", "why", "credits"], other));
    }
    if (!n.earnings_complete) {
      section.appendChild(el("p", `the latest ${n.earnings.length} are shown`, "note"));
    }
    box.appendChild(section);
  }
}

function render(a) {
  $("account-name").textContent = a.account.name;
  $("b-consumer").textContent = a.consumer.available;
  $("b-held").textContent = a.consumer.held;
  $("b-pending").textContent = a.operator.pending;
  $("b-available").textContent = a.operator.available;
  renderNodes(a.nodes);
  renderEarnings(a.nodes);
  $("updated").textContent = `Last read ${when(a.generated_ms)}.`;
  $("account").hidden = false;
}

async function refresh() {
  clearTimeout(timer);
  const key = sessionStorage.getItem(KEY_ITEM);
  if (!key) {
    showForm(true);
    $("live").textContent = "not signed in";
    $("live").className = "live off";
    return;
  }
  const abort = new AbortController();
  const giveUp = setTimeout(() => abort.abort(), TIMEOUT_MS);
  let res;
  try {
    res = await fetch("/v1/account", {
      headers: { Authorization: `Bearer ${key}` }, cache: "no-store", signal: abort.signal,
    });
  } catch (e) {
    res = null;
  } finally {
    clearTimeout(giveUp);
  }
  if (res && res.status === 401) {
    sessionStorage.removeItem(KEY_ITEM);
    $("account").hidden = true;
    $("live").textContent = "not signed in";
    $("live").className = "live off";
    message("The hub refused this API key: it is wrong, revoked, or not a key of this hub. " +
            "Enter a key of your account.");
    showForm(true);
    return;
  }
  let body = null;
  if (res && res.ok) body = await res.json().catch(() => null);
  if (!body || body.version !== 1) {
    const why = !res ? "no answer" : res.ok ? "an answer this page cannot read" : `HTTP ${res.status}`;
    const since = lastOk ? ` The figures below are from ${when(lastOk)}.` : "";
    message(`Cannot reach the hub (${why}); trying again every ${REFRESH_MS / 1000} s.${since}`);
    $("live").textContent = "hub unreachable";
    $("live").className = "live off";
  } else {
    lastOk = body.generated_ms;
    message("");
    showForm(false);
    render(body);
    $("live").textContent = "live";
    $("live").className = "live";
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

$("key-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const key = $("key").value.trim();
  if (!key) return;
  sessionStorage.setItem(KEY_ITEM, key);
  $("key").value = "";
  message("");
  refresh();
});

$("forget").addEventListener("click", () => {
  sessionStorage.removeItem(KEY_ITEM);
  clearTimeout(timer);
  lastOk = 0;
  $("account").hidden = true;
  message("");
  refresh();
});

refresh();
