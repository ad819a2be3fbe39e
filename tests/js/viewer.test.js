/* The viewer's pure data functions (attnlens/viewer/static/viewer_data.js): weight formatting,
   head names of pruned and grouped-query models, and the decoding of packed attention (dense,
   and sparse rows with the unstored weights at their row's mean). */
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { loadPage, plain, base64, VIEWER_DATA } = require("./page.js");

/* Two heads of one layer sharing one key/value head, numbered 3 and 7 (a pruned layer). */
const DENSE = new Float32Array([0.25, 0.75, 1, 0, /* head 3 */ 0.5, 0.5, 0.125, 0.875 /* head 7 */]);
const DATA = {
  n: 2, layers: 1, heads: [2], kv_heads: [1], head_ids: [[3, 7]], tokens: ["[CLS]", "cat"],
  causal: false,
  patterns: { n: 2, count: 2, format: "dense", data: base64(DENSE) },
  thumbs: { side: 1, data: base64(new Uint16Array([0, 65535])) },
};
const run = loadPage(VIEWER_DATA, DATA);

test("weights are written with 4 decimals, tiny ones with an exponent", () => {
  const fmtW = run("fmtW");
  assert.equal(fmtW(0), "0");
  assert.equal(fmtW(0.5), "0.5000");
  assert.equal(fmtW(0.001), "0.0010");
  assert.equal(fmtW(0.0001234), "1.23e-4");
});

test("heads keep their numbers (L0H7) and name their key/value group", () => {
  assert.equal(run("headName(0, 1)"), "L0H7");
  assert.equal(run("groupSize(0)"), 2);
  assert.equal(run("kvOf(0, 1)"), 0);
  assert.equal(run("headTitle(0, 0)"), "L0H3 (key/value head 0, shared by heads 0–1)");
  assert.equal(run("tokenName(1)"), '"cat" (1)');
});

test("dense patterns: rows, columns and single weights of each head", () => {
  const row = run("(() => { const out = new Float64Array(2); PATTERNS.addRow(1, 1, out, 2); return Array.from(out); })()");
  assert.deepEqual(plain(row), [0.25, 1.75]); // head 7, query 1, doubled
  const column = run("(() => { const out = new Float64Array(2); PATTERNS.addColumn(0, 1, out, 1); return Array.from(out); })()");
  assert.deepEqual(plain(column), [0.75, 0]); // who attends to key 1 in head 3
  assert.deepEqual(plain(run("PATTERNS.cell(0, 0, 1)")), { value: 0.75, stored: true });
  assert.deepEqual(plain(run("[THUMBS.value(0, 0, 0), THUMBS.value(1, 0, 0)]")), [0, 1]);
});

test("sparse rows: stored weights exact, the others at the row's mean unstored weight", () => {
  const sparse = {
    n: 2, count: 1, format: "sparse", index_bits: 16,
    offsets: base64(new Uint32Array([0, 1, 2])), index: base64(new Uint16Array([1, 0])),
    value: base64(new Float32Array([0.875, 0.5])),
    rest_mass: base64(new Float32Array([0.125, 0.5])), rest_count: base64(new Uint32Array([1, 1])),
  };
  run(`var SPARSE = new Packed(${JSON.stringify(sparse)});`);
  const row = run("(() => { const out = new Float64Array(2); SPARSE.addRow(0, 0, out, 1); return Array.from(out); })()");
  assert.deepEqual(plain(row), [0.125, 0.875]); // sums to 1
  const column = run("(() => { const out = new Float64Array(2); SPARSE.addColumn(0, 0, out, 1); return Array.from(out); })()");
  assert.deepEqual(plain(column), [0.125, 0.5]);
  assert.deepEqual(plain(run("SPARSE.cell(0, 0, 1)")), { value: 0.875, stored: true });
  assert.deepEqual(plain(run("SPARSE.cell(0, 0, 0)")), { value: 0.125, stored: false, bound: 0.875 });
  const block = run("(() => { const out = new Float64Array(4); SPARSE.addBlock(0, 0, 0, 2, 2, out, 1); return Array.from(out); })()");
  assert.deepEqual(plain(block), [0.125, 0.875, 0.5, 0.5]);
});
