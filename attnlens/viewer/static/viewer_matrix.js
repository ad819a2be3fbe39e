/* attnlens attention viewer, part 3 of 4: the matrix view (an overview of the whole matrix
   and a detail window built from tiles decoded on demand). */

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
  if (S.pinned && S.pinned.side === "query" && S.centredOn !== `matrix|${S.pinned.index}`) {
    const D = Math.min(N, N <= MV.SINGLE ? N : MV.DETAIL);
    S.mwin = { i: S.pinned.index - Math.floor(D / 2), j: (S.pinnedKey !== undefined ? S.pinnedKey : S.pinned.index) - Math.floor(D / 2) };
    S.centredOn = `matrix|${S.pinned.index}`;
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
