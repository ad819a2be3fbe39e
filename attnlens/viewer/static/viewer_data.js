/* attnlens attention viewer, part 1 of 4: the page's data (exact float32 weights, dense or
   sparse rows; thumbnails; role badges; grouped-query heads). Format: attnlens/viewer/data.py
   and packing.py. The four parts are concatenated into the page's one script in the order
   of attnlens/viewer/page.py:JS; viewer.js starts the page. */

const V = AL.data;
const N = V.n;
const LAYERS = V.layers;
const HEADS = V.heads;
const KV = V.kv_heads || HEADS;
/* Each layer's heads by their original numbers (a structurally pruned layer keeps them);
   position h of layer l is head number HEAD_IDS[l][h]. */
const HEAD_IDS = V.head_ids || HEADS.map((n) => Array.from({ length: n }, (_, h) => h));
function num(l, h) { return HEAD_IDS[l][h]; }
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

function headName(l, h) { return `L${l}H${num(l, h)}`; }
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
  const r = ROLES.get(`${l}-${num(l, h)}`);
  if (!r) return null;
  return AL.el("span", { class: "badges", title: r.evidence || r.roles.join(", ") },
    r.roles.map((name) => AL.el("span", { class: `badge role-${name.replace(/[^a-z]/g, "")}`, text: ROLE_SHORT[name] || name })));
}
function roleText(l, h) {
  const r = ROLES.get(`${l}-${num(l, h)}`);
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
