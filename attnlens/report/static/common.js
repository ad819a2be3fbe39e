/* attnlens pages: shared helpers. Every string from the data reaches the page through
   textContent or setAttribute, never as markup. */
"use strict";

const AL = {};

AL.data = JSON.parse(document.getElementById("attnlens-data").textContent);

/* el("div", {class: "x", text: "y", onclick: fn}, child, ...) */
AL.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
};

/* Numbers as people read them: 4 significant digits, exponents only when tiny or huge. */
AL.fmt = function (value, kind) {
  if (value === null || value === undefined || (typeof value === "number" && isNaN(value))) {
    return "–";
  }
  if (kind === "bool" || typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value !== "number") return String(value);
  if (kind === "int" || Number.isInteger(value) && Math.abs(value) < 1e15 && kind !== "num") {
    return String(value);
  }
  const a = Math.abs(value);
  if (a === 0) return "0";
  if (a < 1e-3 || a >= 1e6) return value.toExponential(2);
  return String(Number(value.toPrecision(4)));
};

/* Colour scales: viridis (sequential) and a blue-white-red diverging scale. */
AL.VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779",
  "#6ece58", "#b5de2b", "#fde725"];
AL.DIVERGING = ["#2166ac", "#4393c3", "#92c5de", "#d1e5f0", "#f7f7f7", "#fddbc7", "#f4a582",
  "#d6604d", "#b2182b"];

AL.hexToRgb = function (hex) {
  const n = parseInt(hex.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
};

AL.scale = function (stops, t) {
  if (!(t >= 0)) t = 0;
  if (t > 1) t = 1;
  const x = t * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const a = AL.hexToRgb(stops[i]);
  const b = AL.hexToRgb(stops[i + 1]);
  const f = x - i;
  return [0, 1, 2].map((k) => Math.round(a[k] + (b[k] - a[k]) * f));
};

AL.rgb = (c) => `rgb(${c[0]},${c[1]},${c[2]})`;
AL.textOn = (c) => (0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2] > 150 ? "#111" : "#fff");

/* Range of a grid's finite values; diverging grids are symmetric around 0. */
AL.range = function (values, diverging) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const row of values) {
    for (const v of row) {
      if (v === null || v === undefined || !isFinite(v)) continue;
      lo = Math.min(lo, v);
      hi = Math.max(hi, v);
    }
  }
  if (lo === Infinity) return [0, 1];
  if (diverging) {
    const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1;
    return [-m, m];
  }
  return lo === hi ? [lo - 0.5, hi + 0.5] : [lo, hi];
};

AL.colourFor = function (value, range, diverging) {
  const t = (value - range[0]) / (range[1] - range[0]);
  return AL.scale(diverging ? AL.DIVERGING : AL.VIRIDIS, t);
};

/* A horizontal colour bar with its two ends labelled. */
AL.legend = function (range, diverging, label) {
  const stops = (diverging ? AL.DIVERGING : AL.VIRIDIS).join(",");
  const bar = AL.el("span", { class: "legend-bar" });
  bar.style.background = `linear-gradient(to right, ${stops})`;
  return AL.el("span", { class: "legend" }, AL.el("span", { text: AL.fmt(range[0]) }), bar,
    AL.el("span", { text: AL.fmt(range[1]) }), label ? AL.el("span", { class: "legend-label", text: label }) : null);
};

/* Decode the columnar JSON of one table. */
AL.decodeTable = function (name, t) {
  const columns = t.columns.map((col, i) => {
    const c = t.data[i];
    const values = c.dict ? c.codes.map((k) => c.dict[k]) : c.values;
    return { name: col, kind: c.kind, values: values };
  });
  const index = {};
  columns.forEach((c, i) => { index[c.name] = i; });
  return Object.assign({}, t, { name: name, columns: columns, n: t.rows, index: index,
    col: (n) => (n in index ? columns[index[n]] : null) });
};

AL.tables = {};
for (const [name, t] of Object.entries(AL.data.tables || {})) AL.tables[name] = AL.decodeTable(name, t);

/* Full-size view of a figure: click any .zoomable image; Escape or a click closes it. */
AL.lightbox = function () {
  const box = document.getElementById("lightbox");
  if (!box) return;
  const close = () => { box.hidden = true; box.textContent = ""; };
  document.addEventListener("click", (event) => {
    const img = event.target.closest && event.target.closest("img.zoomable");
    if (img) {
      event.preventDefault();
      box.textContent = "";
      box.append(AL.el("img", { src: img.getAttribute("src"), alt: img.getAttribute("alt") }));
      box.hidden = false;
    } else if (!box.hidden && box.contains(event.target)) {
      close();
    }
  });
  document.addEventListener("keydown", (event) => { if (event.key === "Escape") close(); });
};

/* Save a canvas as a PNG file. */
AL.saveCanvas = function (canvas, filename) {
  canvas.toBlob((blob) => {
    const url = URL.createObjectURL(blob);
    const a = AL.el("a", { href: url, download: filename });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);
  }, "image/png");
};
