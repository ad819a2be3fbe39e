/* attnlens attention viewer: head view (lines between tokens), model view (every head as a
   thumbnail), matrix heatmap. Everything is drawn on canvases; tokens reach the page only
   through textContent and fillText. Data format: attnlens/viewer/data.py. */

const V = AL.data;
const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
  "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a", "#637939", "#8c6d31", "#7b4173", "#3182bd"];
const BLUES = ["#ffffff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b"];
const DPR = Math.min(2, window.devicePixelRatio || 1);
const FONT = "12px system-ui, -apple-system, 'Segoe UI', Roboto, Arial, sans-serif";

function bytesOf(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/* Packed [count, n, n] matrices (dense 16/8-bit codes or per-row top-k). */
class Packed {
  constructor(p) {
    this.n = p.n;
    this.count = p.count;
    this.format = p.format;
    if (p.format === "dense") {
      const bytes = bytesOf(p.data);
      this.codes = p.bits === 16 ? new Uint16Array(bytes.buffer) : bytes;
      this.scale = 1 / (Math.pow(2, p.bits) - 1);
    } else {
      this.k = p.k;
      this.index = new Uint16Array(bytesOf(p.index).buffer);
      this.value = new Uint16Array(bytesOf(p.value).buffer);
      this.scale = 1 / 65535;
    }
    this.cache = new Map();
  }

  /* Matrix m as a Float32Array [query_pos * n + key_pos] (the 24 last used are kept). */
  matrix(m) {
    if (this.cache.has(m)) {
      const hit = this.cache.get(m);
      this.cache.delete(m);
      this.cache.set(m, hit);
      return hit;
    }
    const n = this.n;
    const out = new Float32Array(n * n);
    if (this.format === "dense") {
      const base = m * n * n;
      for (let i = 0; i < n * n; i++) out[i] = this.codes[base + i] * this.scale;
    } else {
      const k = this.k;
      const base = m * n * k;
      for (let i = 0; i < n; i++) {
        for (let t = 0; t < k; t++) out[i * n + this.index[base + i * k + t]] = this.value[base + i * k + t] * this.scale;
      }
    }
    this.cache.set(m, out);
    if (this.cache.size > 24) this.cache.delete(this.cache.keys().next().value);
    return out;
  }
}

const N = V.n;
const LAYERS = V.layers;
const HEADS = V.heads;
/* Each layer's heads by their original numbers (a structurally pruned layer keeps them). */
const HEAD_IDS = V.head_ids || HEADS.map((n) => Array.from({ length: n }, (_, h) => h));
const num = (l, h) => HEAD_IDS[l][h];
const OFFSET = HEADS.reduce((acc, h, l) => { acc.push(l ? acc[l - 1] + HEADS[l - 1] : 0); return acc; }, []);
const PATTERNS = new Packed(V.patterns);
const OVERLAYS = (V.overlays || []).map((o) => Object.assign({}, o, { packed: new Packed(o.matrices) }));

const initial = V.initial || {};
const S = {
  view: initial.view || "head",
  layer: Math.min(LAYERS - 1, initial.layer || 0),
  heads: new Set(initial.heads || Array.from({ length: HEADS[Math.min(LAYERS - 1, initial.layer || 0)] }, (_, h) => h)),
  source: "heads", /* or an overlay name */
  topk: 3,
  sqrt: N > 48, /* square-root colours by default for long inputs: weights are small */
  hover: null, /* {side: "query" | "key", index} */
  pinned: null,
};

/* The matrices shown now: [{label, colour, data}] (selected heads, or the overlay). */
function currentMatrices() {
  if (S.source !== "heads") {
    const o = OVERLAYS.find((x) => x.name === S.source);
    return o ? [{ label: o.label, colour: "#333", data: o.packed.matrix(S.layer) }] : [];
  }
  return Array.from(S.heads).sort((a, b) => a - b).filter((h) => h < HEADS[S.layer])
    .map((h) => ({ label: `head ${S.layer}-${num(S.layer, h)}`, colour: PALETTE[h % PALETTE.length], head: h,
      data: PATTERNS.matrix(OFFSET[S.layer] + h) }));
}

function describe() {
  if (S.source !== "heads") return `${S.source}, layer ${S.layer}`;
  const hs = Array.from(S.heads).sort((a, b) => a - b);
  const heads = hs.length === HEADS[S.layer] ? "all heads" : hs.length ? `heads ${hs.map((h) => num(S.layer, h)).join(", ")}` : "no head";
  return `layer ${S.layer}, ${heads}`;
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

function blue(t) {
  return AL.scale(BLUES, S.sqrt ? Math.sqrt(Math.max(0, t)) : t);
}

function readout(text) {
  document.getElementById("readout").textContent = text || "\u00a0";
}

function tokenName(i) {
  return `"${V.tokens[i]}" (${i})`;
}

/* ---------------- Head view ---------------- */
const HV = { ROW: 20, TOP: 46, GAP: 360, MARGIN: 16 };

function tokenWidth(ctx) {
  let w = 70;
  for (const t of V.tokens) w = Math.max(w, ctx.measureText(t).width);
  return Math.min(190, Math.ceil(w) + 14);
}

function topIndices(row, k) {
  const best = [];
  for (let j = 0; j < row.length; j++) {
    const v = row[j];
    if (v <= 0) continue;
    if (best.length < k) { best.push(j); best.sort((a, b) => row[b] - row[a]); } else if (v > row[best[k - 1]]) {
      best[k - 1] = j;
      best.sort((a, b) => row[b] - row[a]);
    }
  }
  return best;
}

/* Each row's k largest weights of a matrix (cached per matrix and k). */
const TOPS = new Map();
function topRows(m, k) {
  const key = `${S.layer}|${m.label}|${k}|${S.source}`;
  if (TOPS.has(key)) return TOPS.get(key);
  const rows = [];
  for (let i = 0; i < N; i++) rows.push(topIndices(m.data.subarray(i * N, (i + 1) * N), k));
  TOPS.set(key, rows);
  if (TOPS.size > 64) TOPS.delete(TOPS.keys().next().value);
  return rows;
}

function drawHeadView(canvas) {
  const probe = canvas.getContext("2d");
  probe.font = FONT;
  const tw = tokenWidth(probe);
  const W = HV.MARGIN * 2 + tw * 2 + HV.GAP;
  const H = HV.TOP + N * HV.ROW + 16;
  const ctx = setupCanvas(canvas, W, H);
  canvas.dataset.tokenWidth = tw;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, W, H);
  ctx.font = "600 13px system-ui, sans-serif";
  ctx.fillStyle = "#1d2330";
  ctx.textBaseline = "middle";
  ctx.fillText(`${V.model} · ${describe()}`, HV.MARGIN, 14);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#5b6475";
  ctx.textAlign = "right";
  ctx.fillText("from (query)", HV.MARGIN + tw - 6, 34);
  ctx.textAlign = "left";
  ctx.fillText("to (key)", HV.MARGIN + tw + HV.GAP + 6, 34);
  const xl = HV.MARGIN + tw;
  const xr = HV.MARGIN + tw + HV.GAP;
  const y = (i) => HV.TOP + i * HV.ROW + HV.ROW / 2;
  const mats = currentMatrices();
  const active = S.pinned || S.hover;
  const glowLeft = new Float32Array(N);
  const glowRight = new Float32Array(N);
  const glowColour = { left: new Array(N), right: new Array(N) };
  ctx.lineCap = "round";
  const scale = mats.length > 1 ? 1 / Math.sqrt(mats.length) : 1;
  /* Lines are grouped by weight into BUCKETS paths per head: one stroke per group keeps
     thousands of lines (512 tokens x top-k x heads) fast to draw. */
  const BUCKETS = 12;
  for (const m of mats) {
    const paths = Array.from({ length: BUCKETS }, () => new Path2D());
    const used = new Array(BUCKETS).fill(false);
    const line = (i, j, w) => {
      const b = Math.min(BUCKETS - 1, Math.floor(w * BUCKETS));
      const path = paths[b];
      path.moveTo(xl + 2, y(i));
      path.bezierCurveTo(xl + HV.GAP * 0.45, y(i), xr - HV.GAP * 0.45, y(j), xr - 2, y(j));
      used[b] = true;
    };
    if (active && active.side === "query") {
      const i = active.index;
      const row = m.data.subarray(i * N, (i + 1) * N);
      for (const j of topIndices(row, Math.min(N, 64))) {
        if (row[j] < 0.01) break;
        line(i, j, row[j]);
        if (row[j] > glowRight[j]) { glowRight[j] = row[j]; glowColour.right[j] = m.colour; }
      }
    } else if (active && active.side === "key") {
      const j = active.index;
      for (let i = 0; i < N; i++) {
        const w = m.data[i * N + j];
        if (w < 0.01) continue;
        line(i, j, w);
        if (w > glowLeft[i]) { glowLeft[i] = w; glowColour.left[i] = m.colour; }
      }
    } else {
      const tops = topRows(m, S.topk);
      for (let i = 0; i < N; i++) for (const j of tops[i]) line(i, j, m.data[i * N + j]);
    }
    ctx.strokeStyle = m.colour;
    for (let b = 0; b < BUCKETS; b++) {
      if (!used[b]) continue;
      const w = (b + 0.5) / BUCKETS;
      ctx.globalAlpha = Math.min(1, 0.12 + 0.88 * w) * (active ? 1 : scale);
      ctx.lineWidth = 0.6 + 2.6 * w;
      ctx.stroke(paths[b]);
    }
  }
  ctx.globalAlpha = 1;
  ctx.font = FONT;
  for (let i = 0; i < N; i++) {
    for (const [side, glow, colours, x] of [["query", glowLeft, glowColour.left, HV.MARGIN], ["key", glowRight, glowColour.right, xr]]) {
      const isActive = active && active.side === side && active.index === i;
      if (glow[i] > 0 || isActive) {
        ctx.globalAlpha = isActive ? 1 : Math.min(0.85, 0.06 + glow[i]);
        ctx.fillStyle = isActive ? "#1d2330" : colours[i];
        ctx.fillRect(x, y(i) - HV.ROW / 2 + 1, tw, HV.ROW - 2);
        ctx.globalAlpha = 1;
      }
      ctx.fillStyle = isActive || glow[i] > 0.5 ? "#fff" : "#1d2330";
      ctx.textAlign = side === "query" ? "right" : "left";
      const text = clip(ctx, V.tokens[i], tw - 10);
      ctx.fillText(text, side === "query" ? x + tw - 6 : x + 6, y(i));
    }
  }
  ctx.textAlign = "left";
}

function clip(ctx, text, width) {
  if (ctx.measureText(text).width <= width) return text;
  let s = text;
  while (s.length > 1 && ctx.measureText(`${s}…`).width > width) s = s.slice(0, -1);
  return `${s}…`;
}

function headViewHit(canvas, event) {
  const rect = canvas.getBoundingClientRect();
  const x = event.clientX - rect.left;
  const yy = event.clientY - rect.top;
  const tw = Number(canvas.dataset.tokenWidth);
  const i = Math.floor((yy - HV.TOP) / HV.ROW);
  if (i < 0 || i >= N) return null;
  if (x >= HV.MARGIN && x <= HV.MARGIN + tw) return { side: "query", index: i };
  if (x >= HV.MARGIN + tw + HV.GAP && x <= HV.MARGIN + 2 * tw + HV.GAP) return { side: "key", index: i };
  return null;
}

function describeActive(a) {
  if (!a) return "";
  const mats = currentMatrices();
  if (a.side === "query") {
    const parts = mats.map((m) => {
      const row = m.data.subarray(a.index * N, (a.index + 1) * N);
      const j = topIndices(row, 1)[0];
      return j === undefined ? "" : `${m.label}: ${tokenName(j)} ${row[j].toFixed(3)}`;
    }).filter(Boolean);
    return `${tokenName(a.index)} attends most to: ${parts.slice(0, 4).join(" · ")}${parts.length > 4 ? " …" : ""}`;
  }
  return `tokens attending to ${tokenName(a.index)} (lines weighted by attention)`;
}

/* ---------------- Matrix view ---------------- */
let MATRIX_CACHE = { key: null, value: null };
function matrixData() {
  const key = `${S.layer}|${S.source}|${Array.from(S.heads).sort((a, b) => a - b).join(",")}`;
  if (MATRIX_CACHE.key === key) return MATRIX_CACHE.value;
  MATRIX_CACHE = { key: key, value: computeMatrixData() };
  return MATRIX_CACHE.value;
}

function computeMatrixData() {
  const mats = currentMatrices();
  if (mats.length === 1) return { data: mats[0].data, label: mats[0].label };
  const out = new Float32Array(N * N);
  for (const m of mats) for (let i = 0; i < N * N; i++) out[i] += m.data[i] / mats.length;
  return { data: out, label: `mean of ${mats.length} heads of layer ${S.layer}` };
}

/* The heatmap is drawn once into a base image; hovering only adds the marker on top. */
function drawMatrix(canvas, hoverOnly) {
  if (hoverOnly && canvas.base) {
    const ctx = canvas.getContext("2d");
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.drawImage(canvas.base, 0, 0);
    ctx.setTransform(DPR, 0, 0, DPR, 0, 0);
    matrixMarker(ctx, canvas);
    return;
  }
  const { data, label } = matrixData();
  const probe = canvas.getContext("2d");
  probe.font = FONT;
  const labels = N <= 64;
  const side = Math.max(280, Math.min(720, N * 14));
  const cell = side / N;
  const tw = labels ? tokenWidth(probe) : 36;
  const top = 34 + (labels ? tw : 18);
  const left = HV.MARGIN + tw;
  const W = left + side + 80;
  const H = top + side + 30;
  const ctx = setupCanvas(canvas, W, H);
  Object.assign(canvas.dataset, { left, top, cell });
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, W, H);
  ctx.font = "600 13px system-ui, sans-serif";
  ctx.fillStyle = "#1d2330";
  ctx.textBaseline = "middle";
  ctx.fillText(`${V.model} · ${label}`, HV.MARGIN, 14);
  const image = new ImageData(N, N);
  for (let i = 0; i < N * N; i++) {
    const c = blue(data[i]);
    image.data[4 * i] = c[0];
    image.data[4 * i + 1] = c[1];
    image.data[4 * i + 2] = c[2];
    image.data[4 * i + 3] = 255;
  }
  const tmp = document.createElement("canvas");
  tmp.width = N;
  tmp.height = N;
  tmp.getContext("2d").putImageData(image, 0, 0);
  ctx.imageSmoothingEnabled = cell < 1;
  ctx.drawImage(tmp, left, top, side, side);
  ctx.strokeStyle = "#c9ced8";
  ctx.strokeRect(left - 0.5, top - 0.5, side + 1, side + 1);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = "#1d2330";
  if (labels) {
    ctx.textAlign = "right";
    for (let i = 0; i < N; i++) ctx.fillText(clip(ctx, V.tokens[i], tw - 8), left - 5, top + (i + 0.5) * cell);
    ctx.save();
    ctx.translate(left, top - 5);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    for (let j = 0; j < N; j++) ctx.fillText(clip(ctx, V.tokens[j], tw - 8), 0, (j + 0.5) * cell);
    ctx.restore();
  } else {
    const step = Math.pow(10, Math.floor(Math.log10(N / 4)));
    const ticks = N / step > 12 ? step * 5 : step;
    ctx.textAlign = "right";
    for (let i = 0; i < N; i += ticks) ctx.fillText(String(i), left - 5, top + (i + 0.5) * cell);
    ctx.textAlign = "center";
    for (let j = 0; j < N; j += ticks) ctx.fillText(String(j), left + (j + 0.5) * cell, top - 9);
  }
  ctx.textAlign = "left";
  ctx.fillStyle = "#5b6475";
  ctx.fillText("query (row) attends to key (column)", left, top + side + 16);
  const barX = left + side + 22;
  for (let k = 0; k < side; k++) {
    ctx.fillStyle = AL.rgb(blue(1 - k / side));
    ctx.fillRect(barX, top + k, 12, 1.5);
  }
  ctx.fillStyle = "#1d2330";
  ctx.fillText("1", barX + 16, top + 4);
  ctx.fillText(S.sqrt ? "0 (√)" : "0", barX + 16, top + side - 4);
  canvas.base = document.createElement("canvas");
  canvas.base.width = canvas.width;
  canvas.base.height = canvas.height;
  canvas.base.getContext("2d").drawImage(canvas, 0, 0);
  matrixMarker(ctx, canvas);
}

function matrixMarker(ctx, canvas) {
  if (!S.hover || S.hover.side !== "cell") return;
  const { i, j } = S.hover;
  const d = canvas.dataset;
  const cell = Number(d.cell);
  const left = Number(d.left);
  const top = Number(d.top);
  ctx.strokeStyle = "#e6194b";
  ctx.lineWidth = 2;
  ctx.strokeRect(left + j * cell - 1, top + i * cell - 1, Math.max(cell, 2) + 2, Math.max(cell, 2) + 2);
}

function matrixHit(canvas, event) {
  const rect = canvas.getBoundingClientRect();
  const d = canvas.dataset;
  const j = Math.floor((event.clientX - rect.left - Number(d.left)) / Number(d.cell));
  const i = Math.floor((event.clientY - rect.top - Number(d.top)) / Number(d.cell));
  return i >= 0 && i < N && j >= 0 && j < N ? { side: "cell", i: i, j: j } : null;
}

/* ---------------- Model view ---------------- */
const THUMB = 84;

function drawThumb(canvas, matrix) {
  const ctx = setupCanvas(canvas, THUMB, THUMB);
  const size = Math.min(N, THUMB);
  const image = new ImageData(size, size);
  const block = N / size;
  for (let a = 0; a < size; a++) {
    const i0 = Math.floor(a * block);
    const i1 = Math.max(i0 + 1, Math.floor((a + 1) * block));
    for (let b = 0; b < size; b++) {
      const j0 = Math.floor(b * block);
      const j1 = Math.max(j0 + 1, Math.floor((b + 1) * block));
      let v = 0;
      for (let i = i0; i < i1; i++) for (let j = j0; j < j1; j++) v = Math.max(v, matrix[i * N + j]);
      const c = blue(v);
      const p = 4 * (a * size + b);
      image.data[p] = c[0];
      image.data[p + 1] = c[1];
      image.data[p + 2] = c[2];
      image.data[p + 3] = 255;
    }
  }
  const tmp = document.createElement("canvas");
  tmp.width = size;
  tmp.height = size;
  tmp.getContext("2d").putImageData(image, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(tmp, 0, 0, THUMB, THUMB);
}

/* Columns of the model view: one per head number (a pruned layer leaves its removed heads'
   cells empty). */
const COLUMNS = Math.max(...HEAD_IDS.map((ids) => (ids.length ? Math.max(...ids) + 1 : 0)));

function modelView(stage) {
  const maxHeads = COLUMNS;
  const grid = AL.el("div", { class: "model-grid" });
  grid.style.gridTemplateColumns = `auto repeat(${maxHeads + OVERLAYS.length}, ${THUMB + 6}px)`;
  grid.append(AL.el("div", { class: "mg-corner", text: "layer \\ head" }));
  for (let c = 0; c < maxHeads; c++) grid.append(AL.el("div", { class: "mg-col", text: c }));
  for (const o of OVERLAYS) grid.append(AL.el("div", { class: "mg-col", text: o.name }));
  const jobs = [];
  for (let l = 0; l < LAYERS; l++) {
    grid.append(AL.el("div", { class: "mg-row", text: l }));
    for (let c = 0; c < maxHeads; c++) {
      const h = HEAD_IDS[l].indexOf(c); /* position of head number c in this layer */
      if (h < 0) { grid.append(AL.el("div", { class: "thumb-gap" })); continue; }
      const canvas = AL.el("canvas", { class: "thumb", title: `head ${l}-${c}: click to enlarge`, "data-layer": l, "data-head": c });
      canvas.addEventListener("click", () => { S.layer = l; S.heads = new Set([h]); S.source = "heads"; show("matrix"); });
      grid.append(canvas);
      jobs.push(() => drawThumb(canvas, PATTERNS.matrix(OFFSET[l] + h)));
    }
    for (const [i, o] of OVERLAYS.entries()) {
      const canvas = AL.el("canvas", { class: "thumb overlay", title: `${o.label}, layer ${l}: click to enlarge`, "data-layer": l, "data-column": maxHeads + i });
      canvas.addEventListener("click", () => { S.layer = l; S.source = o.name; show("matrix"); });
      grid.append(canvas);
      jobs.push(() => drawThumb(canvas, o.packed.matrix(l)));
    }
  }
  stage.append(grid);
  const run = () => {
    const until = performance.now() + 30;
    while (jobs.length && performance.now() < until) jobs.shift()();
    if (jobs.length) requestAnimationFrame(run);
    else grid.setAttribute("data-drawn", "1");
  };
  requestAnimationFrame(run);
}

function modelViewPng() {
  const maxHeads = COLUMNS;
  const cols = maxHeads + OVERLAYS.length;
  const W = 40 + cols * (THUMB + 6);
  const H = 40 + LAYERS * (THUMB + 6);
  const canvas = document.createElement("canvas");
  const ctx = setupCanvas(canvas, W, H);
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, W, H);
  ctx.fillStyle = "#1d2330";
  ctx.font = "600 13px system-ui, sans-serif";
  ctx.fillText(`${V.model}: every head (rows: layers, columns: heads)`, 8, 18);
  document.querySelectorAll(".model-grid canvas.thumb").forEach((thumb) => {
    const l = Number(thumb.getAttribute("data-layer"));
    const c = Number(thumb.getAttribute("data-column") || thumb.getAttribute("data-head"));
    ctx.drawImage(thumb, 34 + c * (THUMB + 6), 34 + l * (THUMB + 6), THUMB, THUMB);
  });
  return canvas;
}

/* ---------------- Controls and views ---------------- */
function controls() {
  const root = document.getElementById("controls");
  root.textContent = "";
  const layer = AL.el("select", { id: "layer", "aria-label": "layer", onchange: (e) => {
    S.layer = Number(e.target.value);
    S.heads = new Set(Array.from(S.heads).filter((h) => h < HEADS[S.layer]));
    if (!S.heads.size) S.heads = new Set(Array.from({ length: HEADS[S.layer] }, (_, h) => h));
    S.pinned = null;
    render();
  } });
  for (let l = 0; l < LAYERS; l++) layer.append(AL.el("option", { value: l, text: `layer ${l}`, selected: l === S.layer }));
  const parts = S.view === "model" ? [] : [AL.el("label", { class: "ctl" }, "Layer ", layer)];
  if (OVERLAYS.length && S.view !== "model") {
    const source = AL.el("select", { id: "source", "aria-label": "what to show", onchange: (e) => { S.source = e.target.value; S.pinned = null; render(); } });
    source.append(AL.el("option", { value: "heads", text: "attention heads", selected: S.source === "heads" }));
    for (const o of OVERLAYS) source.append(AL.el("option", { value: o.name, text: o.label, selected: S.source === o.name, title: o.about || "" }));
    parts.push(AL.el("label", { class: "ctl" }, "Show ", source));
  }
  if (S.view !== "model") {
    const chips = AL.el("span", { class: "chips", id: "heads" });
    for (let h = 0; h < HEADS[S.layer]; h++) {
      const on = S.heads.has(h) && S.source === "heads";
      const chip = AL.el("button", { type: "button", class: `chip${on ? " on" : ""}`, "data-head": num(S.layer, h), title: `head ${S.layer}-${num(S.layer, h)} (shift-click: only this head)`,
        text: num(S.layer, h), disabled: S.source !== "heads", onclick: (e) => {
          if (e.shiftKey || S.view === "matrix" && !e.ctrlKey && !e.metaKey) S.heads = new Set([h]);
          else if (S.heads.has(h)) S.heads.delete(h);
          else S.heads.add(h);
          render();
        } });
      chip.style.setProperty("--chip", PALETTE[h % PALETTE.length]);
      chips.append(chip);
    }
    parts.push(AL.el("span", { class: "ctl" }, "Heads ", chips,
      AL.el("button", { type: "button", class: "mini", text: "all", onclick: () => { S.heads = new Set(Array.from({ length: HEADS[S.layer] }, (_, h) => h)); render(); } }),
      AL.el("button", { type: "button", class: "mini", text: "none", onclick: () => { S.heads = new Set(); render(); } })));
  }
  if (S.view === "head") {
    parts.push(AL.el("label", { class: "ctl", title: "lines drawn per token when none is hovered" }, "Lines per token ",
      AL.el("input", { type: "number", id: "topk", min: 1, max: 20, value: S.topk, onchange: (e) => { S.topk = Math.max(1, Math.min(20, Number(e.target.value) || 1)); render(); } })));
  } else {
    parts.push(AL.el("label", { class: "ctl", title: "square-root colour scale shows small weights" }, AL.el("input", { type: "checkbox", id: "sqrt", checked: S.sqrt,
      onchange: (e) => { S.sqrt = e.target.checked; render(); } }), " √ scale"));
  }
  parts.push(AL.el("button", { type: "button", id: "save-png", text: "Save PNG", onclick: savePng }));
  root.append(...parts);
}

function savePng() {
  const heads = S.source === "heads" ? Array.from(S.heads).sort((a, b) => a - b).map((h) => num(S.layer, h)).join("-") : S.source;
  if (S.view === "model") return AL.saveCanvas(modelViewPng(), "attention-model-view.png");
  const canvas = document.querySelector("#stage canvas.main");
  if (canvas) AL.saveCanvas(canvas, `attention-${S.view}-layer${S.layer}-${heads || "none"}.png`);
}

function render() {
  document.querySelectorAll(".tabs .tab").forEach((t) => t.classList.toggle("on", t.dataset.view === S.view));
  controls();
  const stage = document.getElementById("stage");
  stage.textContent = "";
  if (S.view === "model") {
    modelView(stage);
    readout("Click a head to enlarge it as a matrix.");
    return;
  }
  const canvas = AL.el("canvas", { class: `main ${S.view}` });
  const wrap = AL.el("div", { class: `canvas-wrap ${S.view}` }, canvas);
  stage.append(wrap);
  const draw = () => (S.view === "head" ? drawHeadView(canvas) : drawMatrix(canvas));
  draw();
  const hit = S.view === "head" ? headViewHit : matrixHit;
  canvas.addEventListener("mousemove", (event) => {
    const h = hit(canvas, event);
    const same = JSON.stringify(h) === JSON.stringify(S.hover);
    if (same) return;
    S.hover = h;
    if (S.view === "head") {
      if (!S.pinned) { draw(); readout(describeActive(h)); }
    } else {
      drawMatrix(canvas, true);
      if (h) {
        const { data } = matrixData();
        readout(`query ${tokenName(h.i)} → key ${tokenName(h.j)}: ${data[h.i * N + h.j].toFixed(4)}`);
      } else readout("");
    }
  });
  canvas.addEventListener("mouseleave", () => {
    S.hover = null;
    if (!S.pinned) { draw(); readout(""); }
  });
  canvas.addEventListener("click", (event) => {
    if (S.view !== "head") return;
    const h = hit(canvas, event);
    S.pinned = h && !(S.pinned && S.pinned.side === h.side && S.pinned.index === h.index) ? h : null;
    draw();
    readout(S.pinned ? `${describeActive(S.pinned)} (pinned: click again to release)` : "");
  });
  readout(S.view === "head" ? "Hover a token; click to pin it." : "Hover a cell for its weight.");
}

function show(view) {
  S.view = view;
  S.hover = null;
  S.pinned = null;
  render();
}

document.querySelectorAll(".tabs .tab").forEach((tab) => tab.addEventListener("click", () => show(tab.dataset.view)));
render();
document.body.setAttribute("data-ready", "1");
