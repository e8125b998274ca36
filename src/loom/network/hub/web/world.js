// The hub's world page: /world.json gives the snapshot, then an event stream (/world/events) the
// machines that changed and the totals.  The map is drawn on a canvas in an equirectangular projection from
// the embedded Natural Earth land outlines (TopoJSON, decoded here); the machine table renders only
// the rows in view, so 10,000 machines cost a few dozen DOM rows.
"use strict";

const ROW_H = 28;
const STATE_ORDER = { serving: 0, online: 1, suspect: 2, offline: 3 };
const COLORS = { serving: "#1a7f37", online: "#2f6fdf", suspect: "#c27c0e", offline: "#9aa3af" };
const OCEAN = "#f4f7fb", LAND = "#d9dee7", POD = "#7c3aed";

const machines = new Map();  // name -> row
let sorted = [];             // rows in table order (filtered)
let totals = null;
let land = null;             // offscreen canvas with the land drawn, or null
let dirty = false;

const $ = (id) => document.getElementById(id);

// ---- formatting ----
function fmtCount(n) {
  if (n >= 1e9) return (n / 1e9).toFixed(1) + " B";
  if (n >= 1e6) return (n / 1e6).toFixed(1) + " M";
  if (n >= 1e4) return (n / 1e3).toFixed(1) + " k";
  return String(n);
}
function fmtBytes(b) {
  const gb = b / 2 ** 30;
  return gb >= 1024 ? (gb / 1024).toFixed(1) + " TB" : gb.toFixed(gb >= 10 ? 0 : 1) + " GB";
}
const dash = "—";
const pct = (x) => (x === null || x === undefined ? dash : (x * 100).toFixed(x >= 0.999 ? 0 : 1) + "%");
function podText(p) {
  if (!p) return "";
  const ranks = p.ranks;
  const links = ranks <= 6 ? Array(ranks).fill("■").join("─") : "■─■─…─■";
  return `${links} ${p.tp}×${p.pp}`;
}

// ---- TopoJSON: arcs (delta-encoded when quantized) into rings of [lon, lat] ----
function decodeArcs(topo) {
  const t = topo.transform;
  return topo.arcs.map((arc) => {
    let x = 0, y = 0;
    return arc.map((p) => {
      if (!t) return [p[0], p[1]];
      x += p[0];
      y += p[1];
      return [x * t.scale[0] + t.translate[0], y * t.scale[1] + t.translate[1]];
    });
  });
}
function ringOf(indices, arcs) {
  const ring = [];
  for (const i of indices) {
    const arc = i >= 0 ? arcs[i] : arcs[~i].slice().reverse();
    // Consecutive arcs share their joining point.
    for (let k = ring.length ? 1 : 0; k < arc.length; ++k) ring.push(arc[k]);
  }
  return ring;
}
function polygonsOf(geometry, arcs) {
  if (geometry.type === "Polygon") return [geometry.arcs.map((r) => ringOf(r, arcs))];
  if (geometry.type === "MultiPolygon") {
    return geometry.arcs.map((poly) => poly.map((r) => ringOf(r, arcs)));
  }
  if (geometry.type === "GeometryCollection") {
    return geometry.geometries.flatMap((g) => polygonsOf(g, arcs));
  }
  return [];
}

// ---- the map ----
const project = (lon, lat, w, h) => [((lon + 180) / 360) * w, ((90 - lat) / 180) * h];

// A ring that crosses the antimeridian jumps by ~360 degrees of longitude.  Unwrapped (each step
// taken the short way round), a ring around a pole (Antarctica) ends a full turn from where it
// began and is closed along the pole's edge of the map; any other crossing ring is drawn again one
// turn over, so that both halves show.
function unwrap(ring) {
  const out = [ring[0].slice()];
  for (let k = 1; k < ring.length; ++k) {
    let lon = ring[k][0];
    const prev = out[k - 1][0];
    while (lon - prev > 180) lon -= 360;
    while (lon - prev < -180) lon += 360;
    out.push([lon, ring[k][1]]);
  }
  const turn = out[out.length - 1][0] - out[0][0];
  if (Math.abs(turn) > 180) {
    const pole = out.reduce((s, p) => s + p[1], 0) < 0 ? -90 : 90;
    out.push([out[out.length - 1][0], pole], [out[0][0], pole]);
  }
  return out;
}

function drawLand(topo, w, h) {
  const arcs = decodeArcs(topo);
  const off = document.createElement("canvas");
  off.width = w;
  off.height = h;
  const g = off.getContext("2d");
  g.fillStyle = LAND;
  for (const object of Object.values(topo.objects)) {
    for (const polygon of polygonsOf(object, arcs)) {
      g.beginPath();
      for (const ring of polygon.map(unwrap)) {
        const lons = ring.map((p) => p[0]);
        const shifts = [0];
        if (Math.min(...lons) < -180) shifts.push(360);
        if (Math.max(...lons) > 180) shifts.push(-360);
        for (const shift of shifts) {
          ring.forEach(([lon, lat], k) => {
            const [x, y] = project(lon + shift, lat, w, h);
            if (k === 0) g.moveTo(x, y);
            else g.lineTo(x, y);
          });
          g.closePath();
        }
      }
      g.fill("evenodd");
    }
  }
  return off;
}

function drawMap() {
  const canvas = $("map");
  const g = canvas.getContext("2d");
  const w = canvas.width, h = canvas.height;
  g.fillStyle = OCEAN;
  g.fillRect(0, 0, w, h);
  if (land) {
    g.drawImage(land, 0, 0);
  } else {
    g.strokeStyle = LAND;
    g.beginPath();
    for (let lon = -180; lon <= 180; lon += 30) g.moveTo(...project(lon, 90, w, h)), g.lineTo(...project(lon, -90, w, h));
    for (let lat = -90; lat <= 90; lat += 30) g.moveTo(...project(-180, lat, w, h)), g.lineTo(...project(180, lat, w, h));
    g.stroke();
  }
  // Machines grouped by (rounded) location: one disc per place, its size the count, its colour
  // the liveliest state there; pods as linked rings of their ranks.
  const places = new Map();
  for (const m of machines.values()) {
    if (!m.location) continue;
    const key = m.location.join(",");
    let p = places.get(key);
    if (!p) places.set(key, (p = { loc: m.location, n: 0, best: "offline", pods: [] }));
    p.n += 1;
    if (STATE_ORDER[m.state] < STATE_ORDER[p.best]) p.best = m.state;
    if (m.pod) p.pods.push(m);
  }
  for (const p of places.values()) {
    const [x, y] = project(p.loc[1], p.loc[0], w, h);
    const r = 3 + Math.min(12, 2 * Math.sqrt(p.n));
    g.beginPath();
    g.arc(x, y, r, 0, 2 * Math.PI);
    g.fillStyle = COLORS[p.best];
    g.globalAlpha = 0.8;
    g.fill();
    g.globalAlpha = 1;
    p.pods.slice(0, 4).forEach((m, k) => {
      const ranks = Math.min(m.pod.ranks, 16);
      const rr = r + 5 + 4 * k;
      g.strokeStyle = POD;
      g.fillStyle = POD;
      g.beginPath();
      for (let i = 0; i <= ranks; ++i) {
        const a = (2 * Math.PI * i) / ranks;
        const px = x + rr * Math.cos(a), py = y + rr * Math.sin(a);
        if (i === 0) g.moveTo(px, py);
        else g.lineTo(px, py);
      }
      g.stroke();
      for (let i = 0; i < ranks; ++i) {
        const a = (2 * Math.PI * i) / ranks;
        g.fillRect(x + rr * Math.cos(a) - 2, y + rr * Math.sin(a) - 2, 4, 4);
      }
    });
  }
}

async function loadLand() {
  const res = await fetch("/world/land-110m.json").catch(() => null);
  if (!res || !res.ok) {
    $("map-note").textContent = "Land outlines were not built into this hub (npm was missing " +
        "when it was built): machines are drawn on a plain grid of longitude and latitude.";
    return;
  }
  const canvas = $("map");
  land = drawLand(await res.json(), canvas.width, canvas.height);
  dirty = true;
}

// ---- totals and models ----
function renderTotals() {
  if (!totals) return;
  $("t-online").textContent = fmtCount(totals.machines_online);
  $("t-serving").textContent = fmtCount(totals.machines_serving);
  $("t-offline").textContent = fmtCount(totals.machines_offline);
  $("t-memory").textContent = fmtBytes(totals.memory_bytes);
  $("t-tokens").textContent = fmtCount(totals.tokens_per_day);
  const body = $("models").tBodies[0];
  body.replaceChildren(...totals.models.map((m) => {
    const tr = document.createElement("tr");
    for (const v of [m.name, m.holders, m.loaded, m.tokens_per_s ? m.tokens_per_s.toFixed(1) : dash,
                     m.requests_last_hour, m.queued]) {
      const td = document.createElement("td");
      td.textContent = String(v);
      tr.appendChild(td);
    }
    return tr;
  }));
}

// ---- the machine table: only the rows in view are in the DOM ----
function cells(m) {
  return [m.name, m.state, m.chip ?? dash, m.memory_gb === null ? dash : `${m.memory_gb} GB`,
          m.slot, m.models.length ? m.models.join(", ") : dash,
          m.tokens_per_s ? m.tokens_per_s.toFixed(1) : dash, pct(m.reliability_30d),
          pct(m.verification_pass_rate), fmtCount(m.tokens_served_30d), podText(m.pod)];
}
function matches(m, q) {
  if (!q) return true;
  return [m.name, m.state, m.chip ?? "", m.models.join(" ")].join(" ").toLowerCase().includes(q);
}
function resort() {
  const q = $("filter").value.trim().toLowerCase();
  sorted = [...machines.values()].filter((m) => matches(m, q)).sort((a, b) =>
    STATE_ORDER[a.state] - STATE_ORDER[b.state] || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  $("count").textContent = `${sorted.length} of ${machines.size}`;
  $("spacer").style.height = `${sorted.length * ROW_H}px`;
}
const pool = [];  // row elements, reused
function renderRows() {
  const box = $("machines");
  const first = Math.max(0, Math.floor(box.scrollTop / ROW_H) - 2);
  const last = Math.min(sorted.length, first + Math.ceil(box.clientHeight / ROW_H) + 5);
  let used = 0;
  for (let i = first; i < last; ++i, ++used) {
    let row = pool[used];
    if (!row) {
      row = document.createElement("div");
      row.setAttribute("role", "row");
      for (let c = 0; c < 11; ++c) row.appendChild(document.createElement("span"));
      pool.push(row);
      box.appendChild(row);
    }
    const m = sorted[i];
    row.className = `row grid ${m.state}`;
    row.style.top = `${i * ROW_H}px`;
    row.style.display = "";
    row.dataset.name = m.name;
    cells(m).forEach((v, c) => {
      const span = row.children[c];
      if (span.textContent !== v) span.textContent = v;
      span.title = v;
    });
    row.children[1].className = `state ${m.state}`;
    row.children[10].className = "ranks";
  }
  for (let k = used; k < pool.length; ++k) pool[k].style.display = "none";
}

let marked = false;
function frame() {
  if (dirty) {
    dirty = false;
    resort();
    renderRows();
    renderTotals();
    drawMap();
    if (!marked && machines.size) {
      marked = true;
      performance.mark("world-rendered");  // (for bench/world_page.mjs)
    }
  }
  requestAnimationFrame(frame);
}

// ---- live updates ----
function applySnapshot(w) {
  if (w.version !== 1) {
    $("live").textContent = `unknown world.json version ${w.version}`;
    return false;
  }
  machines.clear();
  for (const m of w.machines) machines.set(m.name, m);
  totals = w.totals;
  dirty = true;
  return true;
}

// The snapshot by fetch (the browser parses it off the event stream's path), then the stream of
// what changes after it; a reconnected stream starts with a whole snapshot again.
async function connect() {
  const live = $("live");
  let after = "";
  try {
    const res = await fetch("/world.json");
    const w = await res.json();
    performance.mark("world-snapshot");
    if (!applySnapshot(w)) return;
    after = `?after=${w.generated_ms}`;
  } catch (e) {
    live.textContent = "reconnecting…";
  }
  const events = new EventSource("/world/events" + after);
  events.onopen = () => {
    live.textContent = "live";
    live.className = "live";
  };
  events.onerror = () => {
    live.textContent = "reconnecting…";
    live.className = "live off";
  };
  events.addEventListener("snapshot", (e) => applySnapshot(JSON.parse(e.data)));
  events.addEventListener("machine", (e) => {
    const m = JSON.parse(e.data);
    machines.set(m.name, m);
    dirty = true;
  });
  events.addEventListener("gone", (e) => {
    machines.delete(JSON.parse(e.data).name);
    dirty = true;
  });
  events.addEventListener("totals", (e) => {
    totals = JSON.parse(e.data);
    dirty = true;
  });
}

$("machines").addEventListener("scroll", () => renderRows(), { passive: true });
$("filter").addEventListener("input", () => (dirty = true));
connect();
loadLand();
requestAnimationFrame(frame);
