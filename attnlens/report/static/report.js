/* The report and comparison pages: head map, head cards, interactive tables, figures. */

AL.L = AL.data.layers || 0;
AL.H = AL.data.heads || 0;

/* Rows of a table belonging to one head. */
AL.headRows = function (table, layer, head) {
  const ls = table.col("layer").values;
  const hs = table.col("head").values;
  const rows = [];
  for (let r = 0; r < table.n; r++) if (ls[r] === layer && hs[r] === head) rows.push(r);
  return rows;
};

AL.labelColumns = function (table) {
  return table.columns.filter((c) => !["layer", "head", "measure", "value"].includes(c.name)
    && !AL.isNumeric(c.kind) && c.kind !== "bool" && new Set(c.values).size > 1);
};

AL.passes = function (table, r, where) {
  return (where || []).every(([name, allowed]) => {
    const c = table.col(name);
    return !c || allowed.map(String).includes(String(c.values[r]));
  });
};

/* Per (label) the values of every head, sorted high to low: for ranks and bars. */
AL.measureStats = {};
AL.statsFor = function (table, labels, key) {
  const id = `${table.name}|${key}`;
  if (AL.measureStats[id]) return AL.measureStats[id];
  const m = table.col("measure").values;
  const v = table.col("value").values;
  const values = [];
  for (let r = 0; r < table.n; r++) {
    const k = labels.map((c) => c.values[r]).concat([m[r]]).join(" ");
    if (k === key && v[r] !== null) values.push(v[r]);
  }
  values.sort((a, b) => b - a);
  AL.measureStats[id] = values;
  return values;
};

AL.miniTable = function (table, rows, columns) {
  const cols = columns.map((n) => table.col(n)).filter(Boolean);
  const t = AL.el("table", { class: "mini" }, AL.el("tr", {}, cols.map((c) => AL.el("th", { text: c.name }))));
  for (const r of rows) t.append(AL.el("tr", {}, cols.map((c) => AL.el("td", { class: AL.isNumeric(c.kind) ? "num" : "", text: AL.fmt(c.values[r], c.kind) }))));
  return AL.el("div", { class: "mini-wrap" }, t);
};

/* A value's place among every head's values of the same measure: missing values and
   values that are the same for every head get no bar and no rank. */
AL.rankCells = function (v, all) {
  if (v === null || v === undefined) return [AL.el("td", { class: "missing", text: "missing" }), AL.el("td", { class: "rank", text: "" })];
  const lo = all[all.length - 1];
  const hi = all[0];
  if (!(hi > lo)) return [AL.el("td", { class: "hint", text: "same for every head" }), AL.el("td", { class: "rank", text: "" })];
  const bar = AL.el("span", { class: "bar" });
  const fill = AL.el("span", { class: "fill" });
  fill.style.width = `${Math.round(100 * (v - lo) / (hi - lo))}%`;
  bar.append(fill);
  const rank = all.filter((x) => x > v).length + 1;
  return [AL.el("td", { title: `range over heads ${AL.fmt(lo)} .. ${AL.fmt(hi)}` }, bar),
    AL.el("td", { class: "rank", text: `#${rank} of ${all.length}`, title: "#1 = the highest value among the heads" })];
};

/* "beyond the null" when the value lies above the null model's upper 95 % bound (or below
   its lower one); the bounds come from a randomly initialised copy of the model. */
AL.nullCell = function (table, r, v) {
  const high = table.col("null_high");
  if (!high) return null;
  const hv = high.values[r];
  const mean = table.col("null_mean") ? table.col("null_mean").values[r] : null;
  const low = table.col("null_low") ? table.col("null_low").values[r] : null;
  if (hv === null || v === null) return AL.el("td", { class: "null missing", text: "no null" });
  const beyond = v > hv || (low !== null && v < low);
  return AL.el("td", { class: `null${beyond ? " beyond" : ""}`, text: beyond ? "beyond" : "within",
    title: `random-init model: mean ${AL.fmt(mean)}, 95 % range ${low === null ? "" : AL.fmt(low) + " .. "}${AL.fmt(hv)}` });
};

AL.cardBlock = {
  measures(table, item, layer, head) {
    if (!table.col("measure") || !table.col("value")) return null;
    const rows = AL.headRows(table, layer, head).filter((r) => AL.passes(table, r, item.where));
    if (!rows.length) return null;
    const labels = AL.labelColumns(table);
    const hasNull = !!table.col("null_high");
    const out = AL.el("table", { class: "mini measures" });
    out.append(AL.el("tr", { class: "legend" }, AL.el("th", {}), AL.el("th", { class: "num", text: "value" }),
      AL.el("th", { text: "low → high" }), AL.el("th", { class: "rank", text: "rank" }),
      ...(hasNull ? [AL.el("th", { text: "null" })] : [])));
    for (const r of rows) {
      const key = labels.map((c) => c.values[r]).concat([table.col("measure").values[r]]).join(" ");
      const v = table.col("value").values[r];
      const all = AL.statsFor(table, labels, key);
      const cells = [AL.el("th", { text: key }), AL.el("td", { class: v === null ? "num missing" : "num", text: v === null ? "—" : AL.fmt(v), title: String(v) }),
        ...AL.rankCells(v, all)];
      if (hasNull) cells.push(AL.nullCell(table, r, v));
      out.append(AL.el("tr", {}, cells));
    }
    const note = "rank #1 = the highest value among the heads; bar: where the value lies between the lowest and the highest head"
      + (hasNull ? "; null: beyond or within the 95 % range of a randomly initialised model's heads" : "");
    return AL.el("div", { class: "mini-wrap" }, out, AL.el("p", { class: "card-note", text: note }));
  },
  row(table, item, layer, head) {
    const rows = AL.headRows(table, layer, head);
    if (!rows.length) return null;
    const r = rows[0];
    const names = (item.columns && item.columns.length ? item.columns : table.columns.map((c) => c.name))
      .filter((n) => n !== "layer" && n !== "head" && table.col(n));
    const dl = AL.el("dl", { class: "kv" });
    for (const n of names) {
      const c = table.col(n);
      if (c.values[r] === null || c.values[r] === "") continue;
      dl.append(AL.el("dt", { text: n }), AL.el("dd", { text: AL.fmt(c.values[r], c.kind) }));
    }
    return dl;
  },
  rows(table, item, layer, head) {
    const rows = AL.headRows(table, layer, head).filter((r) => AL.passes(table, r, item.where));
    if (!rows.length) return null;
    const cols = (item.columns && item.columns.length ? item.columns : table.columns.map((c) => c.name))
      .filter((n) => n !== "layer" && n !== "head");
    return AL.miniTable(table, rows, cols);
  },
  top(table, item, layer, head) {
    const sort = table.col(item.sort);
    if (!sort) return null;
    let rows = AL.headRows(table, layer, head).filter((r) => AL.passes(table, r, item.where) && sort.values[r] !== null);
    if (!rows.length) return null;
    const above = item.above && item.above.length === 2 ? item.above.map((n) => table.col(n)) : null;
    if (above && above[0] && above[1]) {
      rows = rows.filter((r) => above[0].values[r] !== null && above[1].values[r] !== null && above[0].values[r] > above[1].values[r]);
      if (!rows.length) return AL.el("p", { class: "hint none-above", text: `None: no ${item.above[0]} of this head is above its ${item.above[1]}.` });
    }
    rows.sort((a, b) => sort.values[b] - sort.values[a]);
    const cols = (item.columns && item.columns.length ? item.columns : table.columns.map((c) => c.name))
      .filter((n) => n !== "layer" && n !== "head");
    return AL.miniTable(table, rows.slice(0, item.limit || 5), cols);
  },
  curve(table, item, layer, head) {
    const x = table.col(item.x);
    const value = table.col("value") || table.col("share");
    if (!x || !value) return null;
    const mine = new Map();
    const layerSum = new Map();
    const layerN = new Map();
    const ls = table.col("layer").values;
    const hs = table.col("head").values;
    for (let r = 0; r < table.n; r++) {
      if (ls[r] !== layer || value.values[r] === null) continue;
      const k = x.values[r];
      layerSum.set(k, (layerSum.get(k) || 0) + value.values[r]);
      layerN.set(k, (layerN.get(k) || 0) + 1);
      if (hs[r] === head) mine.set(k, value.values[r]);
    }
    if (!mine.size) return null;
    const numeric = AL.isNumeric(x.kind);
    const xs = Array.from(layerSum.keys());
    if (numeric) xs.sort((a, b) => a - b);
    const mean = xs.map((k) => layerSum.get(k) / layerN.get(k));
    const own = xs.map((k) => (mine.has(k) ? mine.get(k) : null));
    const hi = Math.max(...mean, ...own.filter((v) => v !== null), 1e-12);
    const W = 320;
    const Hh = 130;
    const left = 40;
    const bottom = Hh - 20;
    const slot = (W - left - 6) / Math.max(1, numeric ? xs.length - 1 : xs.length);
    const px = (i) => (numeric ? left + (xs.length > 1 ? i * slot : (W - left) / 2) : left + (i + 0.5) * slot);
    const py = (v) => bottom - (v / hi) * (bottom - 10);
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${Hh}`);
    svg.setAttribute("class", "curve");
    const add = (tag, attrs, text) => {
      const node = document.createElementNS(ns, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
      if (text !== undefined) node.textContent = text;
      svg.append(node);
      return node;
    };
    const points = (values) => values.map((v, i) => (v === null ? null : `${px(i).toFixed(1)},${py(v).toFixed(1)}`)).filter(Boolean).join(" ");
    add("polyline", { points: `${left},6 ${left},${bottom} ${W - 2},${bottom}`, class: "axis" });
    if (numeric) {
      add("polyline", { points: points(mean), class: "layer-mean" });
      add("polyline", { points: points(own), class: "own" });
    } else {
      own.forEach((v, i) => {
        if (v === null) return;
        add("rect", { x: (px(i) - slot * 0.32).toFixed(1), y: py(v).toFixed(1), width: (slot * 0.64).toFixed(1),
          height: Math.max(0, bottom - py(v)).toFixed(1), class: "own-bar" });
      });
      mean.forEach((v, i) => add("line", { x1: (px(i) - slot * 0.42).toFixed(1), x2: (px(i) + slot * 0.42).toFixed(1),
        y1: py(v).toFixed(1), y2: py(v).toFixed(1), class: "layer-mean" }));
    }
    const step = Math.max(1, Math.ceil(xs.length / (numeric ? 7 : 12)));
    xs.forEach((k, i) => {
      if (i % step === 0 || i === xs.length - 1) add("text", { x: px(i), y: Hh - 6, "text-anchor": "middle" }, AL.fmt(k));
    });
    add("text", { x: left - 4, y: 14, "text-anchor": "end" }, AL.fmt(hi));
    add("text", { x: left - 4, y: bottom, "text-anchor": "end" }, "0");
    const legend = AL.el("div", { class: "curve-legend" }, AL.el("span", { class: numeric ? "key own" : "key own-bar", text: "this head" }),
      AL.el("span", { class: "key layer-mean", text: `mean of layer ${layer}` }), AL.el("span", { text: `x: ${item.x}` }));
    return AL.el("div", {}, svg, legend);
  },
};

/* The measure a head's examples open on: its positional offset's measure, else the example
   measure where the head ranks highest among the heads in head_stats. */
AL.exampleMeasure = function (measures, layer, head) {
  const role = AL.roleOf(layer, head);
  const byOffset = { "P-1": "to_prev", "P+0": "to_self", "P+1": "to_next" };
  if (role && role.label) {
    for (const part of role.label.split(" ")) if (byOffset[part] && measures.includes(byOffset[part])) return byOffset[part];
  }
  const stats = AL.tables.head_stats;
  if (stats && stats.col("measure") && stats.col("value")) {
    let best = null;
    let bestShare = Infinity;
    for (const r of AL.headRows(stats, layer, head)) {
      const m = stats.col("measure").values[r];
      const v = stats.col("value").values[r];
      if (!measures.includes(m) || v === null) continue;
      const all = AL.statsFor(stats, AL.labelColumns(stats), AL.labelColumns(stats).map((c) => c.values[r]).concat([m]).join(" "));
      if (!(all[0] > all[all.length - 1])) continue;
      const share = (all.filter((x) => x > v).length + 1) / all.length;
      if (share < bestShare) { bestShare = share; best = m; }
    }
    if (best) return best;
  }
  return measures[0];
};

/* A small pattern matrix: the head's weights over the example's window (percent). */
AL.patternMatrix = function (tokens, rows, query, key, start) {
  const n = tokens.length;
  const cell = 13;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  const labelW = 64;
  svg.setAttribute("viewBox", `0 0 ${labelW + n * cell} ${labelW + n * cell}`);
  svg.setAttribute("class", "pattern-matrix");
  const add = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    svg.append(node);
    return node;
  };
  tokens.forEach((t, i) => {
    const short = t.length > 9 ? `${t.slice(0, 8)}…` : t;
    const cls = (start + i === query ? "q" : "") + (start + i === key ? " k" : "");
    add("text", { x: labelW - 3, y: labelW + i * cell + cell - 3, "text-anchor": "end", class: cls }, short);
    add("text", { x: 0, y: 0, transform: `translate(${labelW + i * cell + cell - 3},${labelW - 3}) rotate(-60)`, class: cls }, short);
  });
  rows.forEach((row, i) => row.forEach((v, j) => {
    const rect = add("rect", { x: labelW + j * cell, y: labelW + i * cell, width: cell - 1, height: cell - 1 });
    rect.style.fill = `rgba(31, 90, 200, ${Math.min(1, v / 100).toFixed(3)})`;
    if (start + i === query && start + j === key) rect.setAttribute("class", "qk");
    const title = document.createElementNS(ns, "title");
    title.textContent = `${tokens[i]} → ${tokens[j]}: ${v} %`;
    rect.append(title);
  }));
  return svg;
};

AL.exampleItem = function (table, r) {
  const col = (n) => (table.col(n) ? table.col(n).values[r] : null);
  let tokens = [];
  try { tokens = JSON.parse(col("window_tokens") || "[]"); } catch (error) { tokens = []; }
  const rows = String(col("window") || "").split(";").filter((s) => s.length).map((s) => s.split(" ").map(Number));
  const query = col("query");
  const key = col("key");
  const start = col("window_start") || 0;
  const strip = AL.el("div", { class: "ex-tokens" });
  tokens.forEach((t, i) => {
    const pos = start + i;
    const cls = `tok${pos === query ? " q" : ""}${pos === key ? " k" : ""}`;
    strip.append(AL.el("span", { class: cls, text: t, title: pos === query ? "query" : pos === key ? "key" : "" }));
  });
  const head = AL.el("div", { class: "ex-head" },
    AL.el("span", { class: "ex-rank", text: `#${col("rank")}` }),
    AL.el("span", { class: "ex-value", text: `${AL.fmt(col("value"))}` }),
    AL.el("span", { class: "ex-qk", text: `${col("query_token")} → ${col("key_token")}` }));
  const page = col("viewer_page");
  if (page) {
    const layer = AL.card.layer;
    const headN = AL.card.head;
    const href = `${page}#layer=${layer}&head=${headN}&view=text&query=${query}&key=${key}`;
    head.append(AL.el("a", { class: "ex-open", href: href, target: "_blank", rel: "noopener", text: "open in viewer",
      title: `the viewer on this sentence, L${layer}H${headN} selected, the query token pinned` }));
  }
  const item = AL.el("li", { class: "example" }, head, AL.el("div", { class: "ex-sentence", text: col("sentence") || "" }), strip);
  if (rows.length && tokens.length) item.append(AL.patternMatrix(tokens, rows, query, key, start));
  return item;
};

AL.cardBlock.examples = function (table, item, layer, head) {
  if (!table.col("measure") || !table.col("rank")) return null;
  const rows = AL.headRows(table, layer, head);
  if (!rows.length) return null;
  const m = table.col("measure").values;
  const measures = Array.from(new Set(rows.map((r) => m[r])));
  const select = AL.el("select", { class: "ex-measure", "aria-label": "example measure" });
  for (const name of measures) select.append(AL.el("option", { value: name, text: name }));
  select.value = AL.exampleMeasure(measures, layer, head);
  const list = AL.el("ol", { class: "examples" });
  const draw = () => {
    list.textContent = "";
    rows.filter((r) => m[r] === select.value)
      .sort((a, b) => table.col("rank").values[a] - table.col("rank").values[b])
      .forEach((r) => list.append(AL.exampleItem(table, r)));
  };
  select.addEventListener("change", draw);
  draw();
  return AL.el("div", { class: "examples-block" },
    AL.el("div", { class: "ex-controls" }, AL.el("span", { class: "hint", text: "sentences where this head shows " }), select,
      AL.el("span", { class: "hint", text: " most (query token blue, key orange)" })), list);
};

AL.card = { layer: null, head: null };

AL.roleOf = function (layer, head) {
  const roles = AL.data.roles;
  return roles && roles.cells[layer] ? roles.cells[layer][head] : null;
};

AL.openCard = function (layer, head, keepHash) {
  if (!(layer >= 0 && layer < AL.L && head >= 0 && head < AL.H)) return;
  const card = document.getElementById("card");
  if (!card) return;
  AL.card = { layer: layer, head: head };
  card.textContent = "";
  const role = AL.roleOf(layer, head);
  const chips = AL.el("div", { class: "chips" });
  if (role) {
    for (const r of role.roles.split(", ")) {
      const chip = AL.el("span", { class: "chip", text: r });
      const colour = AL.data.roles.colors[r] || AL.data.roles.colors.none;
      chip.style.background = colour;
      chips.append(chip);
    }
  }
  const nav = (dl, dh) => () => {
    let index = layer * AL.H + head + dl * AL.H + dh;
    index = (index + AL.L * AL.H) % (AL.L * AL.H);
    AL.openCard(Math.floor(index / AL.H), index % AL.H);
  };
  card.append(AL.el("div", { class: "card-head" },
    AL.el("div", {}, AL.el("h2", { text: `L${layer}H${head}` }), AL.el("div", { class: "sub", text: `layer ${layer}, head ${head} (from 0)` })),
    AL.el("div", { class: "card-nav" },
      AL.el("button", { type: "button", title: "previous head (←)", text: "←", onclick: nav(0, -1) }),
      AL.el("button", { type: "button", title: "next head (→)", text: "→", onclick: nav(0, 1) }),
      AL.el("button", { type: "button", class: "close", title: "close (Esc)", text: "✕", onclick: AL.closeCard }))));
  card.append(chips);
  let blocks = 0;
  for (const group of AL.data.cards || []) {
    for (const item of group.items) {
      const table = AL.tables[item.table];
      if (!table || !table.col("layer") || !table.col("head")) continue;
      const make = AL.cardBlock[item.kind];
      const block = make ? make(table, item, layer, head) : null;
      if (!block) continue;
      const link = table.csv ? AL.el("a", { class: "src", href: `#table-${item.table}`, text: item.table, title: "go to the table" }) : AL.el("span", { class: "src", text: item.table });
      card.append(AL.el("section", { class: "card-block" }, AL.el("h3", {}, item.label, " ", link), block));
      blocks += 1;
    }
  }
  if (!blocks) card.append(AL.el("p", { text: "No per-head tables in this report." }));
  card.hidden = false;
  document.body.classList.add("card-open");
  document.querySelectorAll(".hg-cell.selected").forEach((c) => c.classList.remove("selected"));
  document.querySelectorAll(`.hg-cell[data-layer="${layer}"][data-head="${head}"]`).forEach((c) => c.classList.add("selected"));
  if (!keepHash) AL.setHash(`#head-${layer}-${head}`);
};

AL.closeCard = function () {
  const card = document.getElementById("card");
  if (!card || card.hidden) return;
  card.hidden = true;
  document.body.classList.remove("card-open");
  document.querySelectorAll(".hg-cell.selected").forEach((c) => c.classList.remove("selected"));
  if (/^#head-/.test(location.hash)) AL.setHash("");
};

/* The address names the open card (shareable); sandboxed frames (notebooks) may refuse. */
AL.setHash = function (hash) {
  try {
    history.replaceState(null, "", hash || location.pathname + location.search);
  } catch (error) { /* an opaque-origin frame: the card still opens */ }
};

AL.fromHash = function () {
  const m = location.hash.match(/^#head-(\d+)-(\d+)$/);
  if (m) AL.openCard(Number(m[1]), Number(m[2]), true);
};

AL.headMap = function () {
  const root = document.getElementById("headmap");
  if (!root || !AL.L || !AL.H) return;
  root.textContent = "";
  const grids = AL.data.grids || [];
  const roles = AL.data.roles;
  const select = AL.el("select", { id: "colour-by", "aria-label": "colour heads by" });
  if (roles) select.append(AL.el("option", { value: "roles", text: "Roles" }));
  const groups = new Map();
  grids.forEach((g, i) => {
    if (!groups.has(g.table)) groups.set(g.table, AL.el("optgroup", { label: g.table }));
    groups.get(g.table).append(AL.el("option", { value: i, text: g.label }));
  });
  for (const g of groups.values()) select.append(g);
  const area = AL.el("div", { class: "headmap-area" });
  const draw = () => {
    area.textContent = "";
    if (select.value === "roles" && roles) {
      area.append(AL.headGrid(roles.cells.map((row) => row.map(() => null)), { cells: roles.cells, colors: roles.colors }));
      const legend = AL.el("div", { class: "role-legend" });
      for (const [name, colour] of Object.entries(roles.colors)) {
        const sw = AL.el("span", { class: "swatch" });
        sw.style.background = colour;
        legend.append(AL.el("span", {}, sw, name));
      }
      legend.append(AL.el("span", { class: "hint", text: AL.data.kind === "compare"
        ? "±: the head's roles differ between A and B (hover a head for both)"
        : "P±k: positional at offset k · Sn: syntactic for n relations · R: rare-word" }));
      area.append(legend);
    } else {
      const g = grids[Number(select.value)];
      if (g) area.append(AL.headGrid(g.values, { diverging: !!g.diverging, label: `${g.table}: ${g.label}` }));
    }
    if (AL.card.layer !== null && !document.getElementById("card").hidden) {
      document.querySelectorAll(`.hg-cell[data-layer="${AL.card.layer}"][data-head="${AL.card.head}"]`).forEach((c) => c.classList.add("selected"));
    }
  };
  select.addEventListener("change", draw);
  root.append(AL.el("div", { class: "headmap-controls" }, AL.el("label", { for: "colour-by", text: "Colour by " }), select), area);
  draw();
};

AL.tocHighlight = function () {
  const links = new Map();
  document.querySelectorAll("nav.toc a").forEach((a) => links.set(a.getAttribute("href").slice(1), a));
  if (!("IntersectionObserver" in window) || !links.size) return;
  const observer = new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (e.isIntersecting && links.has(e.target.id)) {
        links.forEach((a) => a.classList.remove("active"));
        links.get(e.target.id).classList.add("active");
      }
    }
  }, { rootMargin: "0px 0px -70% 0px" });
  document.querySelectorAll("main > section[id]").forEach((s) => observer.observe(s));
};

AL.initReport = function () {
  document.querySelectorAll(".tablewidget[data-table]").forEach((node) => {
    const name = node.getAttribute("data-table");
    const table = AL.tables[name];
    if (table) AL.widgets[name] = new TableWidget(node, table, AL.data.tables[name]);
  });
  AL.headMap();
  AL.lightbox();
  AL.tocHighlight();
  document.addEventListener("click", (event) => {
    const ref = event.target.closest && event.target.closest(".headref[data-layer][data-head]");
    if (ref) {
      event.preventDefault();
      AL.openCard(Number(ref.getAttribute("data-layer")), Number(ref.getAttribute("data-head")));
    }
  });
  document.addEventListener("keydown", (event) => {
    const card = document.getElementById("card");
    if (!card || card.hidden || /INPUT|SELECT|TEXTAREA/.test(event.target.tagName)) return;
    if (event.key === "Escape") AL.closeCard();
    else if (event.key === "ArrowRight") card.querySelector(".card-nav button:nth-child(2)").click();
    else if (event.key === "ArrowLeft") card.querySelector(".card-nav button:nth-child(1)").click();
  });
  window.addEventListener("hashchange", AL.fromHash);
  AL.fromHash();
  document.body.setAttribute("data-ready", "1");
};

AL.widgets = {};
AL.initReport();
