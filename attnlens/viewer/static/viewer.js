/* attnlens attention viewer: head view (lines between tokens, windowed), text view (the text
   coloured by one token's attention), model view (every head as a thumbnail), matrix view
   (overview + a detail window built from tiles on demand). Tokens reach the page only through
   textContent and fillText. Data format: attnlens/viewer/data.py and packing.py. */

const V = AL.data;
const N = V.n;
const LAYERS = V.layers;
const HEADS = V.heads;
const KV = V.kv_heads || HEADS;
const CAUSAL = !!V.causal;
const PROMPT = V.prompt_length === null || V.prompt_length === undefined ? N : V.prompt_length;
const OFFSET = HEADS.reduce((acc, h, l) => { acc.push(l ? acc[l - 1] + HEADS[l - 1] : 0); return acc; }, []);
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd"];
const BLUES = ["#ffffff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"];
const MASK_FILL = "#e9ebf0";
const MASK_LINE = "#b3b8c4";
const DPR = Math.min(2, window.devicePixelRatio || 1);
const FONT = "12px system-ui, -apple-system, 'Segoe UI', Roboto, Arial, sans-serif";
const STATS = { tiles: 0, decodeMs: 0 };
window.AL_VIEWER = { stats: STATS };

function bytesOf(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

function headName(l, h) { return `L${l}H${h}`; }
function fmtW(w) { return w === 0 ? "0" : w >= 1e-3 ? w.toFixed(4) : w.toExponential(2); }
function tokenName(i) { return `"${V.tokens[i]}" (${i})`; }
function masked(i, j) { return CAUSAL && j > i; }

/* ---------------- Packed attention: exact float32, dense or sparse rows ---------------- */
class Packed {
  constructor(p) {
    this.n = p.n;
    this.count = p.count;
    this.format = p.format;
    this.mass = p.mass;
    this.cap = p.cap;
    this.stats = p.stats;
    if (p.format === "dense") {
      this.data = new Float32Array(bytesOf(p.data).buffer);
      return;
    }
    this.offsets = new Uint32Array(bytesOf(p.offsets).buffer);
    const index = bytesOf(p.index).buffer;
    this.index = p.index_bits === 16 ? new Uint16Array(index) : new Uint32Array(index);
    this.value = new Float32Array(bytesOf(p.value).buffer);
    const restMass = new Float32Array(bytesOf(p.rest_mass).buffer);
    const restCount = new Uint32Array(bytesOf(p.rest_count).buffer);
    this.rest = new Float32Array(restMass.length); /* the mean unstored weight of each row */
    for (let r = 0; r < restMass.length; r++) this.rest[r] = restCount[r] ? restMass[r] / restCount[r] : 0;
    this.columns = new Map();
  }

  get dense() { return this.format === "dense"; }

  /* out[j] += scale * weight of (query i, key j) in matrix m; unstored keys at the row's mean. */
  addRow(m, i, out, scale) {
    const n = this.n;
    if (this.dense) {
      const base = (m * n + i) * n;
      for (let j = 0; j < n; j++) out[j] += this.data[base + j] * scale;
      return;
    }
    const r = m * n + i;
    const rest = this.rest[r];
    if (rest > 0) {
      const end = CAUSAL ? i + 1 : n;
      for (let j = 0; j < end; j++) out[j] += rest * scale;
    }
    for (let e = this.offsets[r]; e < this.offsets[r + 1]; e++) out[this.index[e]] += (this.value[e] - rest) * scale;
  }

  /* Entries of matrix m grouped by key (built once per matrix, on first use). */
  byKey(m) {
    if (this.columns.has(m)) return this.columns.get(m);
    const n = this.n;
    const first = this.offsets[m * n];
    const last = this.offsets[m * n + n];
    const start = new Uint32Array(n + 1);
    for (let e = first; e < last; e++) start[this.index[e] + 1]++;
    for (let j = 0; j < n; j++) start[j + 1] += start[j];
    const fill = start.slice(0, n);
    const entry = new Uint32Array(last - first);
    const row = new Uint32Array(last - first);
    for (let i = 0; i < n; i++) {
      for (let e = this.offsets[m * n + i]; e < this.offsets[m * n + i + 1]; e++) {
        const slot = fill[this.index[e]]++;
        entry[slot] = e;
        row[slot] = i;
      }
    }
    const found = { start: start, entry: entry, row: row };
    this.columns.set(m, found);
    return found;
  }

  /* out[i] += scale * weight of (query i, key j): who attends to key j. */
  addColumn(m, j, out, scale) {
    const n = this.n;
    if (this.dense) {
      for (let i = 0; i < n; i++) out[i] += this.data[(m * n + i) * n + j] * scale;
      return;
    }
    for (let i = CAUSAL ? j : 0; i < n; i++) out[i] += this.rest[m * n + i] * scale;
    const col = this.byKey(m);
    for (let s = col.start[j]; s < col.start[j + 1]; s++) {
      const i = col.row[s];
      out[i] += (this.value[col.entry[s]] - this.rest[m * n + i]) * scale;
    }
  }

  /* One weight: {value, stored (exact), bound (the largest an unstored weight can be)}. */
  cell(m, i, j) {
    const n = this.n;
    if (this.dense) return { value: this.data[(m * n + i) * n + j], stored: true };
    const r = m * n + i;
    const a = this.offsets[r];
    const b = this.offsets[r + 1];
    for (let e = a; e < b; e++) if (this.index[e] === j) return { value: this.value[e], stored: true };
    return { value: this.rest[r], stored: this.rest[r] === 0, bound: b > a ? this.value[b - 1] : 0 };
  }

  /* out [rows x cols] += scale * the block of matrix m at (i0, j0): one tile. */
  addBlock(m, i0, j0, rows, cols, out, scale) {
    const n = this.n;
    for (let a = 0; a < rows; a++) {
      const i = i0 + a;
      if (this.dense) {
        const base = (m * n + i) * n + j0;
        for (let b = 0; b < cols; b++) out[a * cols + b] += this.data[base + b] * scale;
        continue;
      }
      const r = m * n + i;
      const rest = this.rest[r];
      if (rest > 0) {
        const end = Math.min(cols, (CAUSAL ? i + 1 : n) - j0);
        for (let b = 0; b < end; b++) out[a * cols + b] += rest * scale;
      }
      for (let e = this.offsets[r]; e < this.offsets[r + 1]; e++) {
        const b = this.index[e] - j0;
        if (b >= 0 && b < cols) out[a * cols + b] += (this.value[e] - rest) * scale;
      }
    }
  }

  /* out [R x R] = max over blocks (the whole matrix m at R x R), scaled, maxed in. */
  addOverview(m, R, out, scale) {
    const n = this.n;
    const f = R / n;
    if (this.dense) {
      for (let i = 0; i < n; i++) {
        const a = Math.floor(i * f) * R;
        const base = (m * n + i) * n;
        for (let j = 0; j < n; j++) {
          const p = a + Math.floor(j * f);
          const v = this.data[base + j] * scale;
          if (v > out[p]) out[p] = v;
        }
      }
      return;
    }
    for (let i = 0; i < n; i++) {
      const r = m * n + i;
      const a = Math.floor(i * f) * R;
      const rest = this.rest[r] * scale;
      if (rest > 0) {
        const last = Math.floor(((CAUSAL ? i + 1 : n) - 1) * f);
        for (let b = 0; b <= last; b++) if (rest > out[a + b]) out[a + b] = rest;
      }
      for (let e = this.offsets[r]; e < this.offsets[r + 1]; e++) {
        const p = a + Math.floor(this.index[e] * f);
        const v = this.value[e] * scale;
        if (v > out[p]) out[p] = v;
      }
    }
  }
}

class Thumbs {
  constructor(t) {
    this.side = t.side;
    this.codes = new Uint16Array(bytesOf(t.data).buffer);
  }

  value(m, a, b) { return this.codes[(m * this.side + a) * this.side + b] / 65535; }
}

const t0 = performance.now();
const PATTERNS = new Packed(V.patterns);
const THUMBS = new Thumbs(V.thumbs);
const OVERLAYS = (V.overlays || []).map((o) => Object.assign({}, o, { packed: new Packed(o.matrices), thumbs: new Thumbs(o.thumbs) }));
STATS.decodeMs = performance.now() - t0;

/* Role badges of the report the page came from: "L-H" -> {roles, evidence}. */
const ROLES = new Map(((V.roles || {}).heads || []).map((r) => [`${r.layer}-${r.head}`, r]));
const ROLE_SHORT = { positional: "pos", syntactic: "syn", "rare-word": "rare" };
function roleBadges(l, h) {
  const r = ROLES.get(`${l}-${h}`);
  if (!r) return null;
  return AL.el("span", { class: "badges", title: r.evidence || r.roles.join(", ") },
    r.roles.map((name) => AL.el("span", { class: `badge role-${name.replace(/[^a-z]/g, "")}`, text: ROLE_SHORT[name] || name })));
}
function roleText(l, h) {
  const r = ROLES.get(`${l}-${h}`);
  return r ? ` · ${r.roles.join(", ")}` : "";
}

/* GQA: the key/value head a query head reads, and the size of its group. */
function groupSize(l) { return KV[l] && KV[l] < HEADS[l] && HEADS[l] % KV[l] === 0 ? HEADS[l] / KV[l] : 1; }
function kvOf(l, h) { return Math.floor(h / groupSize(l)); }
function headTitle(l, h) {
  const g = groupSize(l);
  const shared = g > 1 ? ` (key/value head ${kvOf(l, h)}, shared by heads ${kvOf(l, h) * g}–${kvOf(l, h) * g + g - 1})` : "";
  return `${headName(l, h)}${shared}${roleText(l, h)}`;
}

/* ---------------- State, and the page's address ---------------- */
const initial = V.initial || {};
const VIEWS = ["head", "text", "model", "matrix"];
const S = {
  view: VIEWS.includes(initial.view) ? initial.view : "head",
  layer: Math.min(LAYERS - 1, initial.layer || 0),
  heads: null,
  source: "heads", /* or an overlay name */
  topk: 3,
  sqrt: N > 48, /* square-root colours by default for long inputs: weights are small */
  relative: true, /* text view: colour by weight / the row's largest */
  direction: "from", /* text view: the hovered token's attention (from) or what it receives (to) */
  hover: null, /* {side: "query" | "key" | "cell", ...} */
  pinned: null,
  win: 0, /* head view: first row of the window */
  mwin: { i: 0, j: 0 }, /* matrix view: top-left cell of the detail window */
};
S.heads = new Set(initial.heads || allHeads(S.layer));

function allHeads(l) { return Array.from({ length: HEADS[l] }, (_, h) => h); }

function readAddress() {
  const hash = decodeURIComponent(window.location.hash.replace(/^#/, ""));
  if (!hash) return;
  const p = new URLSearchParams(hash);
  const int = (k) => (p.has(k) && /^\d+$/.test(p.get(k)) ? Number(p.get(k)) : null);
  const layer = int("layer");
  if (layer !== null && layer < LAYERS) { S.layer = layer; S.heads = new Set(allHeads(layer)); }
  const list = (p.get("heads") || p.get("head") || "").split(",").filter((x) => /^\d+$/.test(x)).map(Number).filter((h) => h < HEADS[S.layer]);
  if (list.length) S.heads = new Set(list);
  if (VIEWS.includes(p.get("view"))) S.view = p.get("view");
  if (p.get("source") && OVERLAYS.some((o) => o.name === p.get("source"))) S.source = p.get("source");
  const query = int("query");
  const key = int("key");
  if (query !== null && query < N) {
    S.pinned = { side: "query", index: query };
    S.win = query;
    S.mwin = { i: query, j: key !== null && key < N ? key : query };
  }
  if (key !== null && key < N && query !== null && query < N) S.pinnedKey = key;
}

function writeAddress() {
  const parts = [`layer=${S.layer}`, `heads=${sortedHeads().join(",")}`, `view=${S.view}`];
  if (S.source !== "heads") parts.push(`source=${S.source}`);
  if (S.pinned && S.pinned.side === "query") parts.push(`query=${S.pinned.index}`);
  try { history.replaceState(null, "", `#${parts.join("&")}`); } catch (e) { /* some file:// hosts refuse */ }
}

function sortedHeads() { return Array.from(S.heads).sort((a, b) => a - b).filter((h) => h < HEADS[S.layer]); }

/* The matrices shown now: [{label, colour, packed, m, head}] (selected heads, or the overlay). */
function selection() {
  if (S.source !== "heads") {
    const o = OVERLAYS.find((x) => x.name === S.source);
    return o ? [{ label: o.label, colour: "#333", packed: o.packed, m: S.layer }] : [];
  }
  return sortedHeads().map((h) => ({ label: headName(S.layer, h), colour: PALETTE[h % PALETTE.length], head: h,
    packed: PATTERNS, m: OFFSET[S.layer] + h }));
}

function describe() {
  if (S.source !== "heads") return `${S.source}, layer ${S.layer}`;
  const hs = sortedHeads();
  if (hs.length === 1) return headTitle(S.layer, hs[0]);
  const heads = hs.length === HEADS[S.layer] ? "all heads" : hs.length ? `heads ${hs.join(", ")}` : "no head";
  return `layer ${S.layer}, ${heads}`;
}

/* The mean over the selected matrices of row i (from) or column j (to), as a Float32Array. */
function meanLine(index, direction) {
  const mats = selection();
  const out = new Float32Array(N);
  const scale = mats.length ? 1 / mats.length : 0;
  for (const s of mats) {
    if (direction === "from") s.packed.addRow(s.m, index, out, scale);
    else s.packed.addColumn(s.m, index, out, scale);
  }
  return out;
}

function lineOf(s, index, direction) {
  const out = new Float32Array(N);
  if (direction === "from") s.packed.addRow(s.m, index, out, 1);
  else s.packed.addColumn(s.m, index, out, 1);
  return out;
}

function topIndices(row, k, from, to) {
  const best = [];
  for (let j = from || 0; j < (to === undefined ? row.length : to); j++) {
    const v = row[j];
    if (v <= 0) continue;
    if (best.length < k) { best.push(j); best.sort((a, b) => row[b] - row[a]); } else if (v > row[best[k - 1]]) {
      best[k - 1] = j;
      best.sort((a, b) => row[b] - row[a]);
    }
  }
  return best;
}

function setupCanvas(canvas, w, h) {
  canvas.width = Math.round(w * DPR);
  canvas.height = Math.round(h * DPR);
  canvas.style.width = `${w}px`;
  canvas.style.height = `${h}px`;
  const ctx = canvas.getContext("2d");
  ctx.setTransform(DPR, 0, 0, DPR, 0, 0);
  return ctx;
}

function blue(t) { return AL.scale(BLUES, S.sqrt ? Math.sqrt(Math.max(0, t)) : t); }

let HATCH = null;
function hatch(ctx) {
  if (!HATCH) {
    const tile = document.createElement("canvas");
    tile.width = 6;
    tile.height = 6;
    const c = tile.getContext("2d");
    c.fillStyle = MASK_FILL;
    c.fillRect(0, 0, 6, 6);
    c.strokeStyle = MASK_LINE;
    c.lineWidth = 1;
    c.beginPath();
    c.moveTo(-1, 7); c.lineTo(7, -1);
    c.moveTo(-1, 1); c.lineTo(1, -1);
    c.moveTo(5, 7); c.lineTo(7, 5);
    c.stroke();
    HATCH = tile;
  }
  return ctx.createPattern(HATCH, "repeat");
}

function clip(ctx, text, width) {
  if (ctx.measureText(text).width <= width) return text;
  let s = text;
  while (s.length > 1 && ctx.measureText(`${s}…`).width > width) s = s.slice(0, -1);
  return `${s}…`;
}

let TOKEN_WIDTH = null;
function tokenWidth(ctx) {
  if (TOKEN_WIDTH !== null) return TOKEN_WIDTH;
  let w = 70;
  const step = Math.max(1, Math.floor(N / 4000)); /* long texts: a sample of the tokens */
  for (let i = 0; i < N; i += step) w = Math.max(w, ctx.measureText(V.tokens[i]).width);
  TOKEN_WIDTH = Math.min(170, Math.ceil(w) + 14);
  return TOKEN_WIDTH;
}

/* ---------------- The readout, at the cursor ---------------- */
function tip(text, x, y) {
  const box = document.getElementById("readout");
  if (!text) { box.classList.remove("on"); box.textContent = ""; return; }
  box.textContent = text;
  box.classList.add("on");
  const w = box.offsetWidth;
  const h = box.offsetHeight;
  const left = Math.min(window.innerWidth - w - 8, x + 16);
  const top = y + 18 + h > window.innerHeight ? y - h - 12 : y + 18;
  box.style.left = `${Math.max(4, left)}px`;
  box.style.top = `${Math.max(4, top)}px`;
}

function describeQuery(i, limit) {
  const parts = selection().map((s) => {
    const row = lineOf(s, i, "from");
    const j = topIndices(row, 1)[0];
    return j === undefined ? "" : `${s.label}: ${tokenName(j)} ${fmtW(row[j])}`;
  }).filter(Boolean);
  return `${tokenName(i)} attends most to: ${parts.slice(0, limit).join(" · ")}${parts.length > limit ? " …" : ""}`;
}

/* ---------------- Head view (windowed) ---------------- */
const HV = { ROW: 20, TOP: 46, STUB: 22, GAP: 330, MARGIN: 16, MINI: 14 };

function headRows() {
  const fit = Math.floor((window.innerHeight - (initial.embed ? 190 : 250)) / HV.ROW);
  return Math.min(N, Math.max(12, Math.min(initial.embed ? 24 : 48, fit)));
}

function clampWin(rows) { S.win = Math.max(0, Math.min(N - rows, S.win)); }

function headGeometry(canvas) {
  const probe = canvas.getContext("2d");
  probe.font = FONT;
  const tw = tokenWidth(probe);
  const rows = headRows();
  const xl = HV.MARGIN + tw;
  const xr = xl + HV.GAP;
  const top = HV.TOP + HV.STUB;
  return { tw, rows, xl, xr, top, mini: xr + tw + 14, W: xr + tw + 14 + HV.MINI + HV.MARGIN, H: top + rows * HV.ROW + HV.STUB + 8 };
}

function drawHeadView(canvas) {
  const g = headGeometry(canvas);
  clampWin(g.rows);
  const ctx = setupCanvas(canvas, g.W, g.H);
  Object.assign(canvas.dataset, { tokenWidth: g.tw, top: g.top, row: HV.ROW, win: S.win, rows: g.rows, margin: HV.MARGIN });
  const lo = S.win;
  const hi = S.win + g.rows;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, g.W, g.H);
  ctx.font = "600 13px system-ui, sans-serif";
  ctx.fillStyle = "#1d2330";
  ctx.textBaseline = "middle";
  ctx.fillText(`${V.model} · ${describe()}`, HV.MARGIN, 14);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#5b6475";
  const range = N > g.rows ? ` · tokens ${lo}–${hi - 1} of ${N} (scroll, or click the strip)` : "";
  ctx.fillText(`from (query) → to (key)${range}`, HV.MARGIN, 32);
  const y = (i) => g.top + (i - lo) * HV.ROW + HV.ROW / 2;
  const yAbove = g.top - HV.STUB / 2;
  const yBelow = g.top + g.rows * HV.ROW + HV.STUB / 2;
  const mats = selection();
  const active = S.pinned || S.hover;
  const glow = { query: new Float32Array(N), key: new Float32Array(N) };
  const glowColour = { query: [], key: [] };
  const stubs = { queryAbove: 0, queryBelow: 0, keyAbove: 0, keyBelow: 0 };
  ctx.lineCap = "round";
  const fade = mats.length > 1 ? 1 / Math.sqrt(mats.length) : 1;
  const BUCKETS = 12; /* lines grouped by weight: one stroke per group keeps many lines fast */
  for (const m of mats) {
    const paths = Array.from({ length: BUCKETS }, () => new Path2D());
    const used = new Array(BUCKETS).fill(false);
    const line = (yi, yj, w) => {
      const b = Math.min(BUCKETS - 1, Math.floor(w * BUCKETS));
      paths[b].moveTo(g.xl + 2, yi);
      paths[b].bezierCurveTo(g.xl + HV.GAP * 0.45, yi, g.xr - HV.GAP * 0.45, yj, g.xr - 2, yj);
      used[b] = true;
    };
    const toKey = (i, j, w, outside) => {
      if (j < lo) outside.above += w; else if (j >= hi) outside.below += w; else line(y(i), y(j), w);
    };
    if (active && active.side === "query") {
      const i = active.index;
      const row = lineOf(m, i, "from");
      const outside = { above: 0, below: 0 };
      for (let j = 0; j < N; j++) {
        const w = row[j];
        if (w <= 0) continue;
        if (j >= lo && j < hi) {
          if (w >= 0.01 && i >= lo && i < hi) line(y(i), y(j), w);
          if (w > glow.key[j]) { glow.key[j] = w; glowColour.key[j] = m.colour; }
        } else if (j < lo) outside.above += w; else outside.below += w;
      }
      if (i >= lo && i < hi) {
        if (outside.above >= 0.01) line(y(i), yAbove, Math.min(1, outside.above));
        if (outside.below >= 0.01) line(y(i), yBelow, Math.min(1, outside.below));
      }
      stubs.keyAbove = Math.max(stubs.keyAbove, outside.above);
      stubs.keyBelow = Math.max(stubs.keyBelow, outside.below);
    } else if (active && active.side === "key") {
      const j = active.index;
      const col = lineOf(m, j, "to");
      for (let i = lo; i < hi; i++) {
        const w = col[i];
        if (w < 0.01) continue;
        if (j >= lo && j < hi) line(y(i), y(j), w);
        else line(y(i), j < lo ? yAbove : yBelow, w);
        if (w > glow.query[i]) { glow.query[i] = w; glowColour.query[i] = m.colour; }
      }
    } else {
      for (let i = lo; i < hi; i++) {
        const row = lineOf(m, i, "from");
        const outside = { above: 0, below: 0 };
        for (const j of topIndices(row, S.topk)) toKey(i, j, row[j], outside);
        if (outside.above >= 0.01) line(y(i), yAbove, Math.min(1, outside.above));
        if (outside.below >= 0.01) line(y(i), yBelow, Math.min(1, outside.below));
      }
    }
    ctx.strokeStyle = m.colour;
    for (let b = 0; b < BUCKETS; b++) {
      if (!used[b]) continue;
      const w = (b + 0.5) / BUCKETS;
      ctx.globalAlpha = Math.min(1, 0.12 + 0.88 * w) * (active ? 1 : fade);
      ctx.lineWidth = 0.6 + 2.6 * w;
      ctx.stroke(paths[b]);
    }
  }
  ctx.globalAlpha = 1;
  /* Stubs: attention to the tokens above and below the window. */
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#5b6475";
  if (lo > 0) {
    ctx.fillText(`↑ ${lo} tokens above${stubs.keyAbove ? ` · weight ${fmtW(stubs.keyAbove)}` : ""}`, g.xr + 6, yAbove);
  }
  if (hi < N) {
    ctx.fillText(`↓ ${N - hi} tokens below${stubs.keyBelow ? ` · weight ${fmtW(stubs.keyBelow)}` : ""}`, g.xr + 6, yBelow);
  }
  ctx.font = FONT;
  const pattern = hatch(ctx);
  for (let i = lo; i < hi; i++) {
    for (const [side, x] of [["query", HV.MARGIN], ["key", g.xr]]) {
      const isActive = active && active.side === side && active.index === i;
      const off = active && side === "key" && active.side === "query" && masked(active.index, i);
      const w = glow[side][i];
      if (off) {
        ctx.fillStyle = pattern;
        ctx.fillRect(x, y(i) - HV.ROW / 2 + 1, g.tw, HV.ROW - 2);
      } else if (w > 0 || isActive) {
        ctx.globalAlpha = isActive ? 1 : Math.min(0.85, 0.06 + w);
        ctx.fillStyle = isActive ? "#1d2330" : glowColour[side][i];
        ctx.fillRect(x, y(i) - HV.ROW / 2 + 1, g.tw, HV.ROW - 2);
        ctx.globalAlpha = 1;
      }
      ctx.fillStyle = isActive || w > 0.5 ? "#fff" : off ? "#8a909c" : i >= PROMPT ? "#6a3d9a" : "#1d2330";
      ctx.textAlign = side === "query" ? "right" : "left";
      ctx.fillText(clip(ctx, V.tokens[i], g.tw - 10), side === "query" ? x + g.tw - 6 : x + 6, y(i));
    }
  }
  ctx.textAlign = "left";
  drawStrip(ctx, g, active, mats);
}

/* The whole text as a strip beside the keys: the active token's attention, and the window. */
function drawStrip(ctx, g, active, mats) {
  if (N <= g.rows) return;
  const x = g.mini;
  const top = g.top;
  const height = g.rows * HV.ROW;
  ctx.fillStyle = "#f3f4f7";
  ctx.fillRect(x, top, HV.MINI, height);
  if (active && mats.length) {
    const line = meanLine(active.index, active.side === "query" ? "from" : "to");
    const buckets = new Float32Array(height);
    for (let p = 0; p < N; p++) {
      const b = Math.floor(p * height / N);
      if (line[p] > buckets[b]) buckets[b] = line[p];
    }
    let max = 0;
    for (const v of buckets) max = Math.max(max, v);
    for (let b = 0; b < height; b++) {
      if (!buckets[b]) continue;
      ctx.fillStyle = AL.rgb(AL.scale(BLUES, Math.sqrt(buckets[b] / (max || 1))));
      ctx.fillRect(x, top + b, HV.MINI, 1);
    }
  }
  ctx.strokeStyle = "#1d2330";
  ctx.lineWidth = 1.5;
  ctx.strokeRect(x - 1, top + S.win * height / N, HV.MINI + 2, Math.max(3, g.rows * height / N));
}

function headViewHit(canvas, event) {
  const g = headGeometry(canvas);
  const rect = canvas.getBoundingClientRect();
  const x = event.clientX - rect.left;
  const yy = event.clientY - rect.top;
  if (x >= g.mini && x <= g.mini + HV.MINI && yy >= g.top && yy <= g.top + g.rows * HV.ROW && N > g.rows) {
    return { side: "strip", index: Math.floor((yy - g.top) / (g.rows * HV.ROW) * N) };
  }
  const i = S.win + Math.floor((yy - g.top) / HV.ROW);
  if (yy < g.top || i >= S.win + g.rows || i >= N) return null;
  if (x >= HV.MARGIN && x <= HV.MARGIN + g.tw) return { side: "query", index: i };
  if (x >= g.xr && x <= g.xr + g.tw) return { side: "key", index: i };
  return null;
}

function describeActive(a) {
  if (!a) return "";
  if (a.side === "query") return describeQuery(a.index, 4);
  const col = meanLine(a.index, "to");
  const who = topIndices(col, 3).map((i) => `${tokenName(i)} ${fmtW(col[i])}`).join(" · ");
  return `tokens attending most to ${tokenName(a.index)} (mean of the heads shown): ${who}`;
}

function headView(stage) {
  const canvas = AL.el("canvas", { class: "main head" });
  stage.append(AL.el("div", { class: "canvas-wrap head" }, canvas));
  const draw = () => drawHeadView(canvas);
  if (S.pinned && S.pinned.side !== "strip") S.win = S.pinned.index - Math.floor(headRows() / 2);
  draw();
  canvas.addEventListener("mousemove", (event) => {
    const h = headViewHit(canvas, event);
    if (h && h.side === "strip") { tip(`click: show tokens around ${h.index}`, event.clientX, event.clientY); return; }
    if (JSON.stringify(h) !== JSON.stringify(S.hover)) {
      S.hover = h;
      if (!S.pinned) draw();
    }
    const a = S.pinned || h;
    tip(a ? describeActive(a) + (S.pinned ? " (pinned: click it again to release)" : "") : "", event.clientX, event.clientY);
  });
  canvas.addEventListener("mouseleave", () => { S.hover = null; if (!S.pinned) draw(); tip(""); });
  canvas.addEventListener("click", (event) => {
    const h = headViewHit(canvas, event);
    if (h && h.side === "strip") { S.win = h.index - Math.floor(headRows() / 2); draw(); return; }
    S.pinned = h && !(S.pinned && S.pinned.side === h.side && S.pinned.index === h.index) ? h : null;
    draw();
    writeAddress();
    tip(S.pinned ? `${describeActive(S.pinned)} (pinned: click it again to release)` : "", event.clientX, event.clientY);
  });
  canvas.addEventListener("wheel", (event) => {
    if (N <= headRows()) return;
    event.preventDefault();
    S.win += Math.sign(event.deltaY) * Math.max(1, Math.round(Math.abs(event.deltaY) / HV.ROW));
    draw();
  }, { passive: false });
}

/* ---------------- Text view ---------------- */
let TEXT = null; /* {spans: [span per token]} of the text view shown */

function textView(stage) {
  const box = AL.el("div", { class: "textview", id: "textview" });
  const spans = new Array(N);
  const frag = document.createDocumentFragment();
  for (let i = 0; i < N; i++) {
    if (i === PROMPT && PROMPT < N) frag.append(AL.el("span", { class: "gen-mark", text: "▸ generated:" }), " ");
    const piece = V.pieces ? V.pieces[i] : null;
    let span;
    if (piece === null || piece === undefined) {
      span = document.createElement("span");
      span.className = "tok special";
      span.textContent = V.tokens[i];
      frag.append(span);
    } else {
      /* The whitespace before a word stays outside its span (a space-only token keeps it). */
      const body = piece.replace(/^\s+/, "");
      const lead = body ? piece.slice(0, piece.length - body.length) : "";
      if (lead) frag.append(lead);
      span = document.createElement("span");
      span.className = piece ? "tok" : "tok empty";
      span.textContent = body || piece || "·";
      frag.append(span);
    }
    if (i >= PROMPT) span.classList.add("gen");
    span.dataset.i = i;
    spans[i] = span;
  }
  box.append(frag);
  const legend = AL.el("div", { class: "text-legend", id: "text-legend" });
  stage.append(legend, box);
  TEXT = { spans: spans, legend: legend, box: box };
  const at = (event) => (event.target && event.target.dataset && event.target.dataset.i !== undefined ? Number(event.target.dataset.i) : null);
  box.addEventListener("mousemove", (event) => {
    const i = at(event);
    const h = i === null ? null : { side: S.direction === "from" ? "query" : "key", index: i };
    if (JSON.stringify(h) !== JSON.stringify(S.hover)) {
      S.hover = h;
      if (!S.pinned) colourText();
    }
    const a = S.pinned || h;
    tip(a ? textReadout(a) : "", event.clientX, event.clientY);
  });
  box.addEventListener("mouseleave", () => { S.hover = null; if (!S.pinned) colourText(); tip(""); });
  box.addEventListener("click", (event) => {
    const i = at(event);
    if (i === null) return;
    S.pinned = S.pinned && S.pinned.index === i ? null : { side: S.direction === "from" ? "query" : "key", index: i };
    colourText();
    writeAddress();
    tip(S.pinned ? `${textReadout(S.pinned)} (pinned: click it again to release)` : "", event.clientX, event.clientY);
  });
  colourText();
}

function textReadout(a) {
  const line = meanLine(a.index, a.side === "query" ? "from" : "to");
  const top = topIndices(line, 5).map((j) => `${tokenName(j)} ${fmtW(line[j])}`).join(" · ");
  const what = selection().length > 1 ? ` (mean of ${selection().length} heads)` : "";
  return a.side === "query" ? `${tokenName(a.index)} attends most to${what}: ${top}`
    : `tokens attending most to ${tokenName(a.index)}${what}: ${top}`;
}

function colourText() {
  if (!TEXT) return;
  const t = performance.now();
  const a = S.pinned || S.hover;
  const spans = TEXT.spans;
  if (!a || !selection().length) {
    for (const span of spans) { span.style.background = ""; span.style.color = ""; span.classList.remove("masked", "active"); }
    TEXT.legend.textContent = "Hover a token to colour the text by its attention; click to pin it.";
    return;
  }
  const from = a.side === "query";
  const line = meanLine(a.index, from ? "from" : "to");
  let max = 0;
  for (let j = 0; j < N; j++) if (line[j] > max) max = line[j];
  const norm = S.relative && max > 0 ? 1 / max : 1;
  for (let j = 0; j < N; j++) {
    const span = spans[j];
    const off = from ? masked(a.index, j) : masked(j, a.index);
    span.classList.toggle("masked", off);
    span.classList.toggle("active", j === a.index);
    if (off || line[j] <= 0) { span.style.background = ""; span.style.color = ""; continue; }
    const c = blue(line[j] * norm);
    span.style.background = AL.rgb(c);
    span.style.color = AL.textOn(c);
  }
  TEXT.legend.textContent = "";
  const bar = AL.el("span", { class: "legend-bar" });
  bar.style.background = `linear-gradient(to right, ${BLUES.join(",")})`;
  TEXT.legend.append(`${from ? "Attention of" : "Attention received by"} ${tokenName(a.index)}: 0 `, bar,
    ` ${fmtW(S.relative ? max : 1)}${S.relative ? " (its largest weight)" : ""}${S.sqrt ? ", √ scale" : ""}`);
  if (CAUSAL) {
    TEXT.legend.append(AL.el("span", { class: "tok masked legend-mask", text: "masked" }),
      " = hidden by the causal mask (not weight 0)");
  }
  STATS.colourMs = performance.now() - t;
}

/* ---------------- Matrix view: overview + detail window from tiles ---------------- */
const MV = { TILE: 32, DETAIL: 48, CELL: 12, OVER: 440, SINGLE: 64 };
const TILES = new Map(); /* "selection|ti|tj" -> Float32Array [TILE x TILE] (LRU) */
let OVERVIEW = { key: null, data: null, R: 0 };

function selectionKey() { return `${S.layer}|${S.source}|${sortedHeads().join(",")}`; }

function tile(ti, tj) {
  const key = `${selectionKey()}|${ti}|${tj}`;
  if (TILES.has(key)) {
    const hit = TILES.get(key);
    TILES.delete(key);
    TILES.set(key, hit);
    return hit;
  }
  const i0 = ti * MV.TILE;
  const j0 = tj * MV.TILE;
  const rows = Math.min(MV.TILE, N - i0);
  const cols = Math.min(MV.TILE, N - j0);
  const out = new Float32Array(rows * cols);
  const mats = selection();
  for (const s of mats) s.packed.addBlock(s.m, i0, j0, rows, cols, out, 1 / mats.length);
  const made = { rows, cols, data: out };
  TILES.set(key, made);
  STATS.tiles++;
  if (TILES.size > 512) TILES.delete(TILES.keys().next().value);
  return made;
}

function weightAt(i, j) {
  const t = tile(Math.floor(i / MV.TILE), Math.floor(j / MV.TILE));
  return t.data[(i % MV.TILE) * t.cols + (j % MV.TILE)];
}

function overview(R) {
  const key = `${selectionKey()}|${R}`;
  if (OVERVIEW.key === key) return OVERVIEW;
  const out = new Float32Array(R * R);
  const mats = selection();
  for (const s of mats) {
    if (mats.length === 1) s.packed.addOverview(s.m, R, out, 1);
    else {
      const one = new Float32Array(R * R);
      s.packed.addOverview(s.m, R, one, 1);
      for (let p = 0; p < R * R; p++) out[p] += one[p] / mats.length; /* mean of block maxima */
    }
  }
  OVERVIEW = { key, data: out, R };
  return OVERVIEW;
}

function matrixGeometry(ctx) {
  const single = N <= MV.SINGLE;
  const tw = Math.min(130, tokenWidth(ctx));
  const D = Math.min(N, single ? N : MV.DETAIL);
  const cell = single ? Math.max(9, Math.min(22, Math.floor(600 / N))) : MV.CELL;
  const over = single ? 0 : Math.min(MV.OVER, Math.max(260, N));
  const ox = 48;
  const oy = 62;
  const dx = (single ? HV.MARGIN : ox + over + 30) + tw;
  const dy = 34 + tw;
  const W = dx + D * cell + 70;
  const H = Math.max(oy + over, dy + D * cell) + 46;
  return { single, tw, D, cell, over, ox, oy, dx, dy, W, H };
}

function clampMwin(D) {
  S.mwin.i = Math.max(0, Math.min(N - D, S.mwin.i));
  S.mwin.j = Math.max(0, Math.min(N - D, S.mwin.j));
}

function paintCells(ctx, x, y, rows, cols, size, value) {
  const image = new ImageData(cols, rows);
  for (let a = 0; a < rows; a++) {
    for (let b = 0; b < cols; b++) {
      const c = blue(value(a, b));
      const p = 4 * (a * cols + b);
      image.data[p] = c[0]; image.data[p + 1] = c[1]; image.data[p + 2] = c[2]; image.data[p + 3] = 255;
    }
  }
  const tmp = document.createElement("canvas");
  tmp.width = cols;
  tmp.height = rows;
  tmp.getContext("2d").putImageData(image, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, x, y, cols * size, rows * size);
}

function drawMatrix(canvas, hoverOnly) {
  if (hoverOnly && canvas.base) {
    const ctx = canvas.getContext("2d");
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(canvas.base, 0, 0);
    ctx.setTransform(DPR, 0, 0, DPR, 0, 0);
    matrixMarker(ctx, canvas.geometry);
    return;
  }
  const probe = canvas.getContext("2d");
  probe.font = FONT;
  const g = matrixGeometry(probe);
  clampMwin(g.D);
  const ctx = setupCanvas(canvas, g.W, g.H);
  canvas.geometry = g;
  Object.assign(canvas.dataset, { left: g.dx, top: g.dy, cell: g.cell, i0: S.mwin.i, j0: S.mwin.j, detail: g.D, over: g.over, ox: g.ox, oy: g.oy });
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, g.W, g.H);
  ctx.font = "600 13px system-ui, sans-serif";
  ctx.fillStyle = "#1d2330";
  ctx.textBaseline = "middle";
  const mats = selection();
  const label = mats.length === 1 ? `${describe()}` : `mean of ${mats.length} heads of layer ${S.layer}`;
  ctx.fillText(`${V.model} · ${label}`, HV.MARGIN, 14);
  const pattern = hatch(ctx);
  ctx.font = "11px system-ui, sans-serif";
  if (!g.single) {
    const R = Math.min(N, g.over);
    const o = overview(R);
    paintCells(ctx, g.ox, g.oy, R, R, g.over / R, (a, b) => o.data[a * R + b]);
    if (CAUSAL) { /* the masked triangle (key after query), hatched */
      const c = g.over / N;
      ctx.fillStyle = pattern;
      ctx.beginPath();
      ctx.moveTo(g.ox + c, g.oy);
      ctx.lineTo(g.ox + g.over, g.oy);
      ctx.lineTo(g.ox + g.over, g.oy + g.over - c);
      ctx.closePath();
      ctx.fill();
    }
    ctx.strokeStyle = "#c9ced8";
    ctx.strokeRect(g.ox - 0.5, g.oy - 0.5, g.over + 1, g.over + 1);
    ctx.fillStyle = "#5b6475";
    ctx.fillText(`whole matrix (${N} × ${N}; each pixel the largest weight of its block): click to show a part`, g.ox, g.oy - 30);
    const step = Math.pow(10, Math.floor(Math.log10(N / 4)));
    const ticks = N / step > 8 ? step * 5 : step;
    ctx.textAlign = "right";
    for (let i = 0; i < N; i += ticks) ctx.fillText(String(i), g.ox - 4, g.oy + (i + 0.5) * g.over / N);
    ctx.textAlign = "center";
    for (let j = 0; j < N; j += ticks) ctx.fillText(String(j), g.ox + (j + 0.5) * g.over / N, g.oy - 10);
    ctx.textAlign = "left";
    ctx.strokeStyle = "#e6194b";
    ctx.lineWidth = 1.5;
    const f = g.over / N;
    ctx.strokeRect(g.ox + S.mwin.j * f, g.oy + S.mwin.i * f, Math.max(3, g.D * f), Math.max(3, g.D * f));
  }
  /* The detail window: tiles decoded on demand. */
  const i0 = S.mwin.i;
  const j0 = S.mwin.j;
  paintCells(ctx, g.dx, g.dy, g.D, g.D, g.cell, (a, b) => weightAt(i0 + a, j0 + b));
  if (CAUSAL) {
    ctx.fillStyle = pattern;
    for (let a = 0; a < g.D; a++) {
      const first = Math.max(0, i0 + a + 1 - j0);
      if (first < g.D) ctx.fillRect(g.dx + first * g.cell, g.dy + a * g.cell, (g.D - first) * g.cell, g.cell);
    }
  }
  ctx.strokeStyle = "#c9ced8";
  ctx.lineWidth = 1;
  ctx.strokeRect(g.dx - 0.5, g.dy - 0.5, g.D * g.cell + 1, g.D * g.cell + 1);
  ctx.fillStyle = "#1d2330";
  const labels = g.cell >= 9;
  if (labels) {
    ctx.textAlign = "right";
    for (let a = 0; a < g.D; a++) ctx.fillText(clip(ctx, V.tokens[i0 + a], g.tw - 8), g.dx - 5, g.dy + (a + 0.5) * g.cell);
    ctx.save();
    ctx.translate(g.dx, g.dy - 5);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    for (let b = 0; b < g.D; b++) ctx.fillText(clip(ctx, V.tokens[j0 + b], g.tw - 8), 0, (b + 0.5) * g.cell);
    ctx.restore();
  }
  ctx.textAlign = "left";
  ctx.fillStyle = "#5b6475";
  const where = g.single ? "" : ` · queries ${i0}–${i0 + g.D - 1}, keys ${j0}–${j0 + g.D - 1} (wheel: move; shift: sideways)`;
  ctx.fillText(`query (row) attends to key (column)${where}`, g.dx, g.dy + g.D * g.cell + 14);
  if (CAUSAL) {
    ctx.fillStyle = pattern;
    ctx.fillRect(g.dx, g.dy + g.D * g.cell + 26, 22, 11);
    ctx.fillStyle = "#5b6475";
    ctx.fillText("masked by the causal mask (key after query), not weight 0", g.dx + 28, g.dy + g.D * g.cell + 32);
  }
  const barX = g.dx + g.D * g.cell + 20;
  const side = g.D * g.cell;
  for (let k = 0; k < side; k++) {
    ctx.fillStyle = AL.rgb(blue(1 - k / side));
    ctx.fillRect(barX, g.dy + k, 12, 1.5);
  }
  ctx.fillStyle = "#1d2330";
  ctx.fillText("1", barX + 16, g.dy + 4);
  ctx.fillText(S.sqrt ? "0 (√)" : "0", barX + 16, g.dy + side - 4);
  canvas.base = document.createElement("canvas");
  canvas.base.width = canvas.width;
  canvas.base.height = canvas.height;
  canvas.base.getContext("2d").drawImage(canvas, 0, 0);
  matrixMarker(ctx, g);
}

function matrixMarker(ctx, g) {
  if (!S.hover || S.hover.side !== "cell") return;
  const { i, j } = S.hover;
  ctx.strokeStyle = "#e6194b";
  ctx.lineWidth = 2;
  ctx.strokeRect(g.dx + (j - S.mwin.j) * g.cell - 1, g.dy + (i - S.mwin.i) * g.cell - 1, g.cell + 2, g.cell + 2);
}

function matrixHit(canvas, event) {
  const g = canvas.geometry;
  const rect = canvas.getBoundingClientRect();
  const x = event.clientX - rect.left;
  const y = event.clientY - rect.top;
  const a = Math.floor((y - g.dy) / g.cell);
  const b = Math.floor((x - g.dx) / g.cell);
  if (a >= 0 && a < g.D && b >= 0 && b < g.D) return { side: "cell", i: S.mwin.i + a, j: S.mwin.j + b };
  if (!g.single && x >= g.ox && x < g.ox + g.over && y >= g.oy && y < g.oy + g.over) {
    return { side: "overview", i: Math.floor((y - g.oy) / g.over * N), j: Math.floor((x - g.ox) / g.over * N) };
  }
  return null;
}

function cellReadout(i, j) {
  const head = `query ${tokenName(i)} → key ${tokenName(j)}`;
  if (masked(i, j)) return `${head}: masked by the causal mask (the key comes after the query)`;
  const mats = selection();
  let sum = 0;
  let exact = true;
  let bound = 0;
  for (const s of mats) {
    const c = s.packed.cell(s.m, i, j);
    sum += c.value / mats.length;
    if (!c.stored) { exact = false; bound = Math.max(bound, c.bound); }
  }
  if (exact) return `${head}: ${fmtW(sum)}${mats.length > 1 ? ` (mean of ${mats.length} heads)` : ""}`;
  return `${head}: ≈ ${fmtW(sum)} (not stored: at most ${fmtW(bound)}, its row's smallest stored weight; drawn at the row's mean unstored weight)`;
}

function matrixView(stage) {
  const canvas = AL.el("canvas", { class: "main matrix" });
  stage.append(AL.el("div", { class: "canvas-wrap matrix" }, canvas));
  if (S.pinned && S.pinned.side === "query") {
    const D = Math.min(N, N <= MV.SINGLE ? N : MV.DETAIL);
    S.mwin = { i: S.pinned.index - Math.floor(D / 2), j: (S.pinnedKey !== undefined ? S.pinnedKey : S.pinned.index) - Math.floor(D / 2) };
  }
  drawMatrix(canvas);
  canvas.addEventListener("mousemove", (event) => {
    const h = matrixHit(canvas, event);
    if (JSON.stringify(h) !== JSON.stringify(S.hover)) { S.hover = h; drawMatrix(canvas, true); }
    if (!h) { tip(""); return; }
    if (h.side === "cell") tip(cellReadout(h.i, h.j), event.clientX, event.clientY);
    else tip(`around query ${h.i}, key ${h.j}: click to show this part`, event.clientX, event.clientY);
  });
  canvas.addEventListener("mouseleave", () => { S.hover = null; drawMatrix(canvas, true); tip(""); });
  canvas.addEventListener("click", (event) => {
    const h = matrixHit(canvas, event);
    if (!h || h.side !== "overview") return;
    const D = canvas.geometry.D;
    S.mwin = { i: h.i - Math.floor(D / 2), j: h.j - Math.floor(D / 2) };
    drawMatrix(canvas);
  });
  canvas.addEventListener("wheel", (event) => {
    const g = canvas.geometry;
    if (g.single) return;
    event.preventDefault();
    const step = Math.max(1, Math.round(Math.abs(event.deltaY) / 20)) * Math.sign(event.deltaY);
    if (event.shiftKey) S.mwin.j += step; else { S.mwin.i += step; S.mwin.j += step; }
    drawMatrix(canvas);
  }, { passive: false });
}

/* ---------------- Model view: precomputed thumbnails ---------------- */
const THUMB = 84;

function drawThumb(canvas, thumbs, m) {
  const ctx = setupCanvas(canvas, THUMB, THUMB);
  const side = thumbs.side;
  paintCells(ctx, 0, 0, side, side, THUMB / side, (a, b) => thumbs.value(m, a, b));
  if (CAUSAL) {
    ctx.fillStyle = hatch(ctx);
    const c = THUMB / side;
    ctx.beginPath();
    ctx.moveTo(c, 0);
    ctx.lineTo(THUMB, 0);
    ctx.lineTo(THUMB, THUMB - c);
    ctx.closePath();
    ctx.fill();
  }
}

function modelView(stage) {
  const maxHeads = Math.max(...HEADS);
  const g = HEADS.every((h, l) => h === maxHeads && groupSize(l) === groupSize(0)) ? groupSize(0) : 1;
  const columns = [];
  for (let h = 0; h < maxHeads; h++) {
    if (g > 1 && h && h % g === 0) columns.push("10px");
    columns.push(`${THUMB + 6}px`);
  }
  for (let k = 0; k < OVERLAYS.length; k++) columns.push(`${THUMB + 6}px`);
  const grid = AL.el("div", { class: "model-grid" });
  grid.style.gridTemplateColumns = `auto ${columns.join(" ")}`;
  if (g > 1) { /* GQA: which query heads share a key/value head */
    grid.append(AL.el("div", { class: "mg-corner", text: "key/value head" }));
    for (let k = 0; k < maxHeads / g; k++) {
      if (k) grid.append(AL.el("div"));
      const label = AL.el("div", { class: "mg-group", text: `KV ${k}: heads ${k * g}–${k * g + g - 1}` });
      label.style.gridColumn = `span ${g}`;
      grid.append(label);
    }
    for (let k = 0; k < OVERLAYS.length; k++) grid.append(AL.el("div"));
  }
  grid.append(AL.el("div", { class: "mg-corner", text: "layer \\ head" }));
  for (let h = 0; h < maxHeads; h++) {
    if (g > 1 && h && h % g === 0) grid.append(AL.el("div"));
    grid.append(AL.el("div", { class: "mg-col", text: h }));
  }
  for (const o of OVERLAYS) grid.append(AL.el("div", { class: "mg-col", text: o.name }));
  const jobs = [];
  for (let l = 0; l < LAYERS; l++) {
    grid.append(AL.el("div", { class: "mg-row", text: l }));
    for (let h = 0; h < maxHeads; h++) {
      if (g > 1 && h && h % g === 0) grid.append(AL.el("div"));
      if (h >= HEADS[l]) { grid.append(AL.el("div")); continue; }
      const canvas = AL.el("canvas", { class: "thumb", title: `${headTitle(l, h)}: click to enlarge`, "data-layer": l, "data-head": h, "data-kv": kvOf(l, h) });
      canvas.addEventListener("click", () => { S.layer = l; S.heads = new Set([h]); S.source = "heads"; show("matrix"); });
      grid.append(AL.el("div", { class: "mg-cell" }, canvas, roleBadges(l, h)));
      jobs.push(() => drawThumb(canvas, THUMBS, OFFSET[l] + h));
    }
    for (const o of OVERLAYS) {
      const canvas = AL.el("canvas", { class: "thumb overlay", title: `${o.label}, layer ${l}: click to enlarge` });
      canvas.addEventListener("click", () => { S.layer = l; S.source = o.name; show("matrix"); });
      grid.append(AL.el("div", { class: "mg-cell" }, canvas));
      jobs.push(() => drawThumb(canvas, o.thumbs, l));
    }
  }
  stage.append(grid);
  const run = () => {
    const until = performance.now() + 30;
    while (jobs.length && performance.now() < until) jobs.shift()();
    if (jobs.length) requestAnimationFrame(run);
    else { grid.setAttribute("data-drawn", "1"); postHeight(); }
  };
  requestAnimationFrame(run);
}

function modelViewPng() {
  const thumbs = Array.from(document.querySelectorAll(".model-grid canvas.thumb"));
  const grid = document.querySelector(".model-grid").getBoundingClientRect();
  const W = Math.ceil(grid.width) + 16;
  const H = Math.ceil(grid.height) + 40;
  const canvas = document.createElement("canvas");
  const ctx = setupCanvas(canvas, W, H);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, W, H);
  ctx.fillStyle = "#1d2330";
  ctx.font = "600 13px system-ui, sans-serif";
  ctx.fillText(`${V.model}: every head (rows: layers, columns: heads)`, 8, 18);
  for (const thumb of thumbs) {
    const r = thumb.getBoundingClientRect();
    ctx.drawImage(thumb, r.left - grid.left + 8, r.top - grid.top + 32, THUMB, THUMB);
  }
  return canvas;
}

/* ---------------- Controls and views ---------------- */
function headChips() {
  const chips = AL.el("span", { class: "chips", id: "heads" });
  const g = groupSize(S.layer);
  for (let h = 0; h < HEADS[S.layer]; h++) {
    if (g > 1 && h && h % g === 0) chips.append(AL.el("span", { class: "chip-sep", title: "key/value group" }));
    const on = S.heads.has(h) && S.source === "heads";
    const chip = AL.el("button", { type: "button", class: `chip${on ? " on" : ""}`, "data-head": h,
      title: `${headTitle(S.layer, h)} (shift-click: only this head)`, text: h, disabled: S.source !== "heads",
      onclick: (e) => {
        if (e.shiftKey || S.view === "matrix" && !e.ctrlKey && !e.metaKey) S.heads = new Set([h]);
        else if (S.heads.has(h)) S.heads.delete(h);
        else S.heads.add(h);
        render();
      } });
    chip.style.setProperty("--chip", PALETTE[h % PALETTE.length]);
    const badges = roleBadges(S.layer, h);
    chips.append(badges ? AL.el("span", { class: "chip-with-badge" }, chip, badges) : chip);
  }
  return chips;
}

function controls() {
  const root = document.getElementById("controls");
  root.textContent = "";
  if (S.view === "model") {
    root.append(AL.el("button", { type: "button", id: "save-png", text: "Save PNG", onclick: savePng }));
    return;
  }
  const layer = AL.el("select", { id: "layer", "aria-label": "layer", onchange: (e) => {
    S.layer = Number(e.target.value);
    S.heads = new Set(sortedHeads());
    if (!S.heads.size) S.heads = new Set(allHeads(S.layer));
    S.pinned = null;
    render();
  } });
  for (let l = 0; l < LAYERS; l++) layer.append(AL.el("option", { value: l, text: `layer ${l}`, selected: l === S.layer }));
  const parts = [AL.el("label", { class: "ctl" }, "Layer ", layer)];
  if (OVERLAYS.length) {
    const source = AL.el("select", { id: "source", "aria-label": "what to show", onchange: (e) => { S.source = e.target.value; S.pinned = null; render(); } });
    source.append(AL.el("option", { value: "heads", text: "attention heads", selected: S.source === "heads" }));
    for (const o of OVERLAYS) source.append(AL.el("option", { value: o.name, text: o.label, selected: S.source === o.name, title: o.about || "" }));
    parts.push(AL.el("label", { class: "ctl" }, "Show ", source));
  }
  parts.push(AL.el("span", { class: "ctl" }, S.view === "text" ? "Heads (mean) " : "Heads ", headChips(),
    AL.el("button", { type: "button", class: "mini", text: "all", onclick: () => { S.heads = new Set(allHeads(S.layer)); render(); } }),
    AL.el("button", { type: "button", class: "mini", text: "none", onclick: () => { S.heads = new Set(); render(); } })));
  if (S.view === "head") {
    parts.push(AL.el("label", { class: "ctl", title: "lines drawn per token when none is hovered" }, "Lines per token ",
      AL.el("input", { type: "number", id: "topk", min: 1, max: 20, value: S.topk, onchange: (e) => { S.topk = Math.max(1, Math.min(20, Number(e.target.value) || 1)); render(); } })));
  }
  if (S.view === "text") {
    const direction = AL.el("select", { id: "direction", "aria-label": "direction", onchange: (e) => { S.direction = e.target.value; S.pinned = null; S.hover = null; render(); } });
    direction.append(AL.el("option", { value: "from", text: "where it attends (row)", selected: S.direction === "from" }),
      AL.el("option", { value: "to", text: "what attends to it (column)", selected: S.direction === "to" }));
    parts.push(AL.el("label", { class: "ctl" }, "Colour by ", direction));
    parts.push(AL.el("label", { class: "ctl", title: "colour by weight / the largest weight of the row" }, AL.el("input", { type: "checkbox", id: "relative", checked: S.relative,
      onchange: (e) => { S.relative = e.target.checked; colourText(); } }), " relative"));
  }
  if (S.view !== "head") {
    parts.push(AL.el("label", { class: "ctl", title: "square-root colour scale shows small weights" }, AL.el("input", { type: "checkbox", id: "sqrt", checked: S.sqrt,
      onchange: (e) => { S.sqrt = e.target.checked; if (S.view === "text") colourText(); else render(); } }), " √ scale"));
  }
  if (S.view !== "text") parts.push(AL.el("button", { type: "button", id: "save-png", text: "Save PNG", onclick: savePng }));
  root.append(...parts);
}

function savePng() {
  const heads = S.source === "heads" ? sortedHeads().join("-") : S.source;
  if (S.view === "model") return AL.saveCanvas(modelViewPng(), "attention-model-view.png");
  const canvas = document.querySelector("#stage canvas.main");
  if (canvas) AL.saveCanvas(canvas, `attention-${S.view}-layer${S.layer}-${heads || "none"}.png`);
}

function render() {
  const t = performance.now();
  document.querySelectorAll(".tabs .tab").forEach((tab) => tab.classList.toggle("on", tab.dataset.view === S.view));
  controls();
  const stage = document.getElementById("stage");
  stage.textContent = "";
  TEXT = null;
  if (S.view === "model") modelView(stage);
  else if (S.view === "text") textView(stage);
  else if (S.view === "head") headView(stage);
  else matrixView(stage);
  writeAddress();
  STATS.renderMs = performance.now() - t;
  postHeight();
}

function show(view) {
  S.view = view;
  S.hover = null;
  if (view === "model") S.pinned = null;
  tip("");
  render();
}

/* In a notebook the page sits in an iframe: tell the notebook how tall it is. */
function postHeight() {
  if (window.parent === window) return;
  const height = Math.max(document.body.scrollHeight, document.documentElement.scrollHeight);
  window.parent.postMessage({ kind: "attnlens-height", height: height }, "*");
}

readAddress();
document.querySelectorAll(".tabs .tab").forEach((tab) => tab.addEventListener("click", () => show(tab.dataset.view)));
window.addEventListener("hashchange", () => { readAddress(); render(); });
if (window.ResizeObserver) new ResizeObserver(postHeight).observe(document.body);
render();
STATS.readyMs = performance.now();
document.body.setAttribute("data-ready", "1");
