/* Interactive tables: every row, sort (click a header), search, per-column filters
   (text: substring, "=exact", "!not"; numbers: ">0.5", "<=3", "0.2..0.8", "=5"),
   pages, and two more views where they read better: wide (one column per measure) and
   layer x head grid. */

AL.PAGE_SIZES = [25, 100, 500, 0]; /* 0 = all */

AL.isNumeric = (kind) => kind === "int" || kind === "num";

AL.parseFilter = function (text, kind) {
  const t = text.trim();
  if (!t) return null;
  const number = "(-?(?:\\d+\\.?\\d*|\\.\\d+)(?:e[-+]?\\d+)?)";
  if (AL.isNumeric(kind)) {
    let m = t.match(new RegExp(`^${number}\\s*\\.\\.\\s*${number}$`, "i"));
    if (m) {
      const a = Number(m[1]);
      const b = Number(m[2]);
      return (v) => v !== null && v >= a && v <= b;
    }
    m = t.match(new RegExp(`^(<=|>=|<|>|=|!=)\\s*${number}$`, "i"));
    if (m) {
      const x = Number(m[2]);
      const ops = { "<": (v) => v < x, ">": (v) => v > x, "<=": (v) => v <= x,
        ">=": (v) => v >= x, "=": (v) => v === x, "!=": (v) => v !== x };
      const op = ops[m[1]];
      return (v) => v !== null && op(v);
    }
    m = t.match(new RegExp(`^${number}$`, "i"));
    if (m) {
      const x = Number(m[1]);
      return (v) => v !== null && (v === x || AL.fmt(v) === t);
    }
    return undefined; /* not understood */
  }
  if (kind === "bool") {
    if (/^(y|yes|true|1)$/i.test(t)) return (v) => v === true;
    if (/^(n|no|false|0)$/i.test(t)) return (v) => v === false;
    return undefined;
  }
  const lower = t.toLowerCase();
  if (lower.startsWith("=")) return (v) => v !== null && String(v).toLowerCase() === lower.slice(1);
  if (lower.startsWith("!")) return (v) => v === null || !String(v).toLowerCase().includes(lower.slice(1));
  return (v) => v !== null && String(v).toLowerCase().includes(lower);
};

/* The wide view of a long table: one row per combination of the other columns, one column
   per distinct value of pivot[0] holding pivot[1]. */
AL.pivotTable = function (table, pivot) {
  const [across, value] = pivot;
  const a = table.col(across);
  const v = table.col(value);
  if (!a || !v) return null;
  const keep = table.columns.filter((c) => c.name !== across && c.name !== value);
  const names = [];
  const seen = new Map();
  a.values.forEach((x) => { const k = String(x); if (!seen.has(k)) { seen.set(k, names.length); names.push(k); } });
  const rows = new Map();
  const order = [];
  for (let i = 0; i < table.n; i++) {
    const key = keep.map((c) => c.values[i]).join("\u0001");
    let row = rows.get(key);
    if (!row) {
      row = { first: i, sums: new Array(names.length).fill(0), counts: new Array(names.length).fill(0) };
      rows.set(key, row);
      order.push(row);
    }
    const x = v.values[i];
    if (x !== null && x !== undefined) {
      const j = seen.get(String(a.values[i]));
      row.sums[j] += x;
      row.counts[j] += 1;
    }
  }
  const columns = keep.map((c) => ({ name: c.name, kind: c.kind, values: order.map((r) => c.values[r.first]) }));
  names.forEach((name, j) => {
    const kind = v.kind === "int" && order.every((r) => r.counts[j] <= 1) ? "int" : "num";
    columns.push({ name: name, kind: kind, values: order.map((r) => (r.counts[j] ? r.sums[j] / r.counts[j] : null)) });
  });
  const index = {};
  columns.forEach((c, i) => { index[c.name] = i; });
  return { name: table.name, columns: columns, n: order.length, index: index,
    col: (n) => (n in index ? columns[index[n]] : null) };
};

class TableWidget {
  constructor(root, table, spec) {
    this.root = root;
    this.base = table;
    this.spec = spec || {};
    this.hasHeads = !!(table.col("layer") && table.col("head"));
    this.views = ["rows"];
    if (this.spec.pivot && table.col(this.spec.pivot[0]) && table.col(this.spec.pivot[1])) this.views.push("wide");
    if (this.hasHeads) this.views.push("grid");
    let view = this.spec.view && this.spec.view !== "auto" ? this.spec.view : (this.views.includes("wide") ? "wide" : "rows");
    if (!this.views.includes(view)) view = "rows";
    this.state = { view: view, sort: null, desc: false, filters: {}, search: "", page: 0, size: 25 };
    this.build();
  }

  current() {
    if (this.state.view === "wide") {
      if (!this.wide) this.wide = AL.pivotTable(this.base, this.spec.pivot);
      return this.wide;
    }
    return this.base;
  }

  build() {
    this.root.textContent = "";
    const bar = AL.el("div", { class: "tw-bar" });
    if (this.views.length > 1) {
      const names = { rows: "Rows", wide: "One row per head", grid: "Layer × head" };
      if (this.spec.pivot) names.wide = `Wide (${this.spec.pivot[0]} as columns)`;
      const group = AL.el("span", { class: "tw-views", role: "group", "aria-label": "view" });
      for (const v of this.views) {
        group.append(AL.el("button", { type: "button", class: v === this.state.view ? "on" : "",
          text: names[v], "data-view": v,
          onclick: () => { this.state.view = v; this.state.sort = null; this.state.filters = {}; this.state.page = 0; this.build(); } }));
      }
      bar.append(group);
    }
    if (this.state.view !== "grid") {
      this.searchBox = AL.el("input", { type: "search", class: "tw-search", placeholder: "Search all columns", "aria-label": "search",
        value: this.state.search,
        oninput: (e) => { this.state.search = e.target.value; this.state.page = 0; this.refresh(); } });
      bar.append(this.searchBox);
      const size = AL.el("select", { class: "tw-size", "aria-label": "rows per page",
        onchange: (e) => { this.state.size = Number(e.target.value); this.state.page = 0; this.refresh(); } });
      for (const s of AL.PAGE_SIZES) {
        size.append(AL.el("option", { value: s, text: s ? `${s} rows` : "all rows", selected: s === this.state.size }));
      }
      bar.append(size);
      bar.append(AL.el("button", { type: "button", class: "tw-reset", text: "Reset",
        onclick: () => { this.state.sort = null; this.state.filters = {}; this.state.search = ""; this.state.page = 0; this.build(); } }));
    }
    this.root.append(bar);
    if (this.state.view === "grid") {
      this.root.append(this.gridView());
      return;
    }
    this.status = AL.el("div", { class: "tw-status", "aria-live": "polite" });
    this.scroller = AL.el("div", { class: "tw-scroll" });
    this.pager = AL.el("div", { class: "tw-pager" });
    this.root.append(this.scroller, this.status, this.pager);
    this.buildTable();
    this.refresh();
  }

  buildTable() {
    const t = this.current();
    const head = AL.el("thead");
    const names = AL.el("tr");
    const filters = AL.el("tr", { class: "tw-filters" });
    t.columns.forEach((c, i) => {
      const th = AL.el("th", { class: AL.isNumeric(c.kind) ? "num" : "", title: "Sort", tabindex: 0,
        onclick: () => this.sortBy(i), onkeydown: (e) => { if (e.key === "Enter") this.sortBy(i); } },
      c.name, AL.el("span", { class: "tw-arrow" }));
      names.append(th);
      const hint = AL.isNumeric(c.kind) ? ">0.5, 0..1" : c.kind === "bool" ? "yes / no" : "contains";
      const input = AL.el("input", { type: "text", placeholder: hint, "aria-label": `filter ${c.name}`,
        value: this.state.filters[i] || "",
        oninput: (e) => { this.state.filters[i] = e.target.value; this.state.page = 0; this.refresh(); } });
      filters.append(AL.el("th", {}, input));
    });
    head.append(names, filters);
    this.body = AL.el("tbody");
    this.table = AL.el("table", { class: "tw" }, head, this.body);
    this.headerCells = Array.from(names.children);
    this.filterInputs = Array.from(filters.querySelectorAll("input"));
    this.scroller.textContent = "";
    this.scroller.append(this.table);
  }

  sortBy(i) {
    if (this.state.sort === i) this.state.desc = !this.state.desc;
    else { this.state.sort = i; this.state.desc = AL.isNumeric(this.current().columns[i].kind); }
    this.state.page = 0;
    this.refresh();
  }

  rowsShown() {
    const t = this.current();
    const tests = [];
    t.columns.forEach((c, i) => {
      const f = AL.parseFilter(this.state.filters[i] || "", c.kind);
      if (this.filterInputs) this.filterInputs[i].classList.toggle("bad", f === undefined);
      if (f) tests.push([c.values, f]);
    });
    const words = this.state.search.toLowerCase().split(/\s+/).filter(Boolean);
    const rows = [];
    for (let r = 0; r < t.n; r++) {
      let ok = true;
      for (const [values, f] of tests) { if (!f(values[r])) { ok = false; break; } }
      if (ok && words.length) {
        const text = t.columns.map((c) => AL.fmt(c.values[r], c.kind)).join(" ").toLowerCase()
          + " " + t.columns.map((c) => String(c.values[r])).join(" ").toLowerCase();
        ok = words.every((w) => text.includes(w));
      }
      if (ok) rows.push(r);
    }
    if (this.state.sort !== null) {
      const values = t.columns[this.state.sort].values;
      const sign = this.state.desc ? -1 : 1;
      rows.sort((a, b) => {
        const x = values[a];
        const y = values[b];
        if (x === y) return a - b;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * sign;
      });
    }
    return rows;
  }

  refresh() {
    const t = this.current();
    const rows = this.rowsShown();
    const size = this.state.size || rows.length || 1;
    const pages = Math.max(1, Math.ceil(rows.length / size));
    this.state.page = Math.min(this.state.page, pages - 1);
    const start = this.state.page * size;
    const shown = rows.slice(start, start + size);
    const fragment = document.createDocumentFragment();
    const layer = t.index.layer;
    const head = t.index.head;
    for (const r of shown) {
      const tr = AL.el("tr");
      t.columns.forEach((c, i) => {
        const v = c.values[r];
        const td = AL.el("td", { class: AL.isNumeric(c.kind) ? "num" : c.kind === "bool" ? "bool" : "" });
        if ((i === layer || i === head) && layer !== undefined && head !== undefined && v !== null) {
          const l = t.columns[layer].values[r];
          const h = t.columns[head].values[r];
          td.append(AL.el("a", { class: "headref", href: `#head-${l}-${h}`, "data-layer": l, "data-head": h,
            title: `open the card of L${l}H${h}`, text: AL.fmt(v, c.kind) }));
        } else {
          td.textContent = AL.fmt(v, c.kind);
          if (c.kind === "num" && v !== null) td.title = String(v);
        }
        tr.append(td);
      });
      fragment.append(tr);
    }
    this.body.textContent = "";
    this.body.append(fragment);
    this.headerCells.forEach((th, i) => {
      const arrow = th.querySelector(".tw-arrow");
      arrow.textContent = this.state.sort === i ? (this.state.desc ? " ▼" : " ▲") : "";
      th.setAttribute("aria-sort", this.state.sort === i ? (this.state.desc ? "descending" : "ascending") : "none");
    });
    const filtered = rows.length === t.n ? "" : ` (filtered from ${t.n.toLocaleString()})`;
    this.status.textContent = rows.length
      ? `Rows ${(start + 1).toLocaleString()}–${(start + shown.length).toLocaleString()} of ${rows.length.toLocaleString()}${filtered}`
      : `No rows match${filtered}`;
    this.pager.textContent = "";
    if (pages > 1) {
      const go = (p) => { this.state.page = p; this.refresh(); };
      this.pager.append(
        AL.el("button", { type: "button", text: "« First", disabled: this.state.page === 0, onclick: () => go(0) }),
        AL.el("button", { type: "button", text: "‹ Previous", disabled: this.state.page === 0, onclick: () => go(this.state.page - 1) }),
        AL.el("span", { text: ` page ${this.state.page + 1} of ${pages} ` }),
        AL.el("button", { type: "button", text: "Next ›", disabled: this.state.page >= pages - 1, onclick: () => go(this.state.page + 1) }),
        AL.el("button", { type: "button", text: "Last »", disabled: this.state.page >= pages - 1, onclick: () => go(pages - 1) }));
    }
  }

  /* Layer x head grid of one numeric column, for the chosen values of the key columns. */
  gridView() {
    const t = this.base;
    const keys = (this.spec.keys || []);
    const labelCols = AL.gridKeys(t, keys);
    const valueCols = t.columns.filter((c) => AL.isNumeric(c.kind) && c.name !== "layer" && c.name !== "head"
      && !keys.includes(c.name));
    const wrap = AL.el("div", { class: "tw-grid" });
    if (!valueCols.length) { wrap.append(AL.el("p", { text: "No numeric column to show per head." })); return wrap; }
    if (!this.gridChoice) {
      this.gridChoice = { value: (valueCols.find((c) => c.name === "value") || valueCols[0]).name };
      for (const c of labelCols) this.gridChoice[c.name] = String(c.values[0]);
    }
    const controls = AL.el("div", { class: "tw-grid-controls" });
    const draw = AL.el("div");
    const redraw = () => { draw.textContent = ""; draw.append(this.gridTable(labelCols)); };
    for (const c of labelCols) {
      const distinct = Array.from(new Set(c.values.map(String)));
      const select = AL.el("select", { "aria-label": c.name, onchange: (e) => { this.gridChoice[c.name] = e.target.value; redraw(); } });
      for (const v of distinct) select.append(AL.el("option", { value: v, text: v, selected: this.gridChoice[c.name] === v }));
      controls.append(AL.el("label", {}, `${c.name} `, select));
    }
    if (valueCols.length > 1) {
      const select = AL.el("select", { "aria-label": "value", onchange: (e) => { this.gridChoice.value = e.target.value; redraw(); } });
      for (const c of valueCols) select.append(AL.el("option", { value: c.name, text: c.name, selected: this.gridChoice.value === c.name }));
      controls.append(AL.el("label", {}, "value ", select));
    }
    wrap.append(controls, draw);
    redraw();
    return wrap;
  }

  gridTable(labelCols) {
    const t = this.base;
    const L = AL.data.layers || (Math.max(...t.col("layer").values) + 1);
    const H = AL.data.heads || (Math.max(...t.col("head").values) + 1);
    const sums = Array.from({ length: L }, () => new Array(H).fill(0));
    const counts = Array.from({ length: L }, () => new Array(H).fill(0));
    const value = t.col(this.gridChoice.value).values;
    const layer = t.col("layer").values;
    const head = t.col("head").values;
    for (let r = 0; r < t.n; r++) {
      if (!labelCols.every((c) => String(c.values[r]) === this.gridChoice[c.name])) continue;
      const v = value[r];
      if (v === null || layer[r] >= L || head[r] >= H) continue;
      sums[layer[r]][head[r]] += v;
      counts[layer[r]][head[r]] += 1;
    }
    const grid = sums.map((row, l) => row.map((s, h) => (counts[l][h] ? s / counts[l][h] : null)));
    const averaged = counts.some((row) => row.some((c) => c > 1));
    const out = AL.el("div");
    out.append(AL.headGrid(grid, { diverging: grid.flat().some((v) => v !== null && v < 0) && grid.flat().some((v) => v !== null && v > 0),
      label: this.gridChoice.value }));
    if (averaged) out.append(AL.el("p", { class: "tw-status", text: "Several rows per head: cells show their mean." }));
    return out;
  }
}

/* The columns a layer x head grid slices on: the table's declared keys, and the text or
   yes/no columns needed to tell one head's rows apart (relation, direction, ...). A column
   that layer, head and the other columns already determine is a result (tested, syntactic,
   a dominant class): slicing on it would hide heads, so it is never offered. */
AL.gridKeys = function (t, keys) {
  let kept = t.columns.filter((c) => c.name !== "layer" && c.name !== "head"
    && (keys.includes(c.name) || !AL.isNumeric(c.kind)) && new Set(c.values.map(String)).size > 1);
  const groups = (cols) => {
    const seen = new Set();
    for (let r = 0; r < t.n; r++) {
      seen.add([t.col("layer").values[r], t.col("head").values[r],
        ...cols.map((c) => String(c.values[r]))].join("\u0001"));
    }
    return seen.size;
  };
  for (let i = kept.length - 1; i >= 0; i--) { /* results follow keys in tidy tables */
    if (keys.includes(kept[i].name)) continue;
    const rest = kept.filter((_, j) => j !== i);
    if (groups(rest) === groups(kept)) kept = rest;
  }
  return kept;
};

/* A layer x head grid of values (or of role cells): each cell a button that opens the
   head's card. options: {diverging, label, cells (role cells), colors}. */
AL.headGrid = function (grid, options) {
  const opts = options || {};
  const L = grid.length;
  const H = L ? grid[0].length : 0;
  const table = AL.el("table", { class: "headgrid" });
  /* Grouped-query attention: query heads sharing a key/value head sit together. */
  const kv = (AL.data && AL.data.kv_heads) || null;
  const group = (l) => (kv && kv[l] ? Math.max(1, Math.floor(H / kv[l])) : 0);
  const head = AL.el("thead");
  if (kv && kv.every((k) => k === kv[0]) && group(0) > 1) {
    const g = group(0);
    const row = AL.el("tr", { class: "kv-groups" }, AL.el("th", { class: "corner", text: "KV head" }));
    for (let k = 0; k * g < H; k++) row.append(AL.el("th", { colspan: Math.min(g, H - k * g), class: "kv-group", text: `KV ${k}: heads ${k * g}–${Math.min(H, (k + 1) * g) - 1}` }));
    head.append(row);
  }
  const top = AL.el("tr", {}, AL.el("th", { class: "corner", text: "layer \\ head" }));
  for (let h = 0; h < H; h++) top.append(AL.el("th", { text: h, class: group(0) > 1 && h % group(0) === 0 && h ? "kv-start" : "" }));
  head.append(top);
  table.append(head);
  const body = AL.el("tbody");
  const range = opts.cells ? null : (opts.range || AL.range(grid, opts.diverging));
  for (let l = 0; l < L; l++) {
    const tr = AL.el("tr", {}, AL.el("th", { text: l }));
    for (let h = 0; h < H; h++) {
      const v = grid[l][h];
      const g = group(l);
      const cell = AL.el("td", { class: g > 1 && h % g === 0 && h ? "kv-start" : "" });
      let colour = null;
      let text = "";
      let title = `L${l}H${h}` + (group(l) > 1 ? ` (KV head ${Math.floor(h / group(l))})` : "");
      if (opts.cells) {
        const c = opts.cells[l][h];
        if (c) {
          colour = AL.hexToRgb(opts.colors[c.category] || "#f0f0f0");
          text = c.label;
          title += `: ${c.roles}${c.evidence ? ` (${c.evidence})` : ""}`;
        }
      } else if (v !== null && v !== undefined) {
        colour = AL.colourFor(v, range, opts.diverging);
        text = AL.fmt(v).replace(/^0\./, ".").replace(/^-0\./, "-.");
        title += `: ${AL.fmt(v)}`;
      } else {
        title += ": missing (no value)";
      }
      const missing = !opts.cells && (v === null || v === undefined);
      const button = AL.el("button", { type: "button", class: `hg-cell headref${missing ? " missing" : ""}`, "data-layer": l, "data-head": h, title: title, text: text });
      if (colour) { button.style.background = AL.rgb(colour); button.style.color = AL.textOn(colour); }
      cell.append(button);
      tr.append(cell);
    }
    body.append(tr);
  }
  table.append(body);
  const wrap = AL.el("div", { class: "headgrid-wrap" }, table);
  if (range) wrap.append(AL.legend(range, opts.diverging, opts.label));
  return wrap;
};
