/* attnlens attention viewer, part 4 of 4: state and the page's address, the readout at the
   cursor, the head view (windowed), the model view, the controls; then the page starts.
   Tokens reach the page only through textContent and fillText. */

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
  const list = (p.get("heads") || p.get("head") || "").split(",").filter((x) => /^\d+$/.test(x))
    .map((x) => HEAD_IDS[S.layer].indexOf(Number(x))).filter((h) => h >= 0); /* numbers -> positions */
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
  const parts = [`layer=${S.layer}`, `heads=${sortedHeads().map((h) => num(S.layer, h)).join(",")}`, `view=${S.view}`];
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
  const heads = hs.length === HEADS[S.layer] ? "all heads" : hs.length ? `heads ${hs.map((h) => num(S.layer, h)).join(", ")}` : "no head";
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
  if (S.pinned && S.centredOn !== `head|${S.pinned.index}`) { /* once per pinned token */
    S.win = S.pinned.index - Math.floor(headRows() / 2);
    S.centredOn = `head|${S.pinned.index}`;
  }
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
    if (S.pinned) S.centredOn = `head|${S.pinned.index}`; /* pinned in view: no jump */
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
  /* one column per head number: a pruned layer leaves its removed heads' cells empty */
  const maxHeads = Math.max(...HEAD_IDS.map((ids) => (ids.length ? Math.max(...ids) + 1 : 0)));
  const g = HEADS.every((h, l) => h === maxHeads && groupSize(l) === groupSize(0)) ? groupSize(0) : 1;
  const at = (l, c) => HEAD_IDS[l].indexOf(c); /* position of head number c, -1 if removed */
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
    for (let c = 0; c < maxHeads; c++) {
      if (g > 1 && c && c % g === 0) grid.append(AL.el("div"));
      const h = at(l, c);
      if (h < 0) { grid.append(AL.el("div", { class: "thumb-gap" })); continue; }
      const canvas = AL.el("canvas", { class: "thumb", title: `${headTitle(l, h)}: click to enlarge`, "data-layer": l, "data-head": c, "data-kv": kvOf(l, h) });
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
    const chip = AL.el("button", { type: "button", class: `chip${on ? " on" : ""}`, "data-head": num(S.layer, h),
      title: `${headTitle(S.layer, h)} (shift-click: only this head)`, text: num(S.layer, h), disabled: S.source !== "heads",
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
  const heads = S.source === "heads" ? sortedHeads().map((h) => num(S.layer, h)).join("-") : S.source;
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
