/* The report's pure table functions (attnlens/report/static/common.js, tables.js): number
   formatting, filters, decoding, the wide (pivoted) view and the sorting of rows. */
"use strict";

const test = require("node:test");
const assert = require("node:assert/strict");
const { loadPage, plain, REPORT } = require("./page.js");

const run = loadPage(REPORT, { tables: {} });
const AL = run("AL");

/* A decoded table from plain columns: [name, kind, values]. */
function table(columns) {
  const t = {
    rows: columns[0][2].length,
    columns: columns.map((c) => c[0]),
    data: columns.map((c) => ({ kind: c[1], values: c[2] })),
  };
  return AL.decodeTable("t", t);
}

test("numbers are formatted as people read them", () => {
  assert.equal(AL.fmt(null), "–");
  assert.equal(AL.fmt(undefined), "–");
  assert.equal(AL.fmt(NaN), "–");
  assert.equal(AL.fmt(true), "yes");
  assert.equal(AL.fmt(0, "bool"), "no");
  assert.equal(AL.fmt(3), "3");
  assert.equal(AL.fmt(2e6), "2000000"); // an integer stays whole
  assert.equal(AL.fmt(2e6, "num"), "2.00e+6");
  assert.equal(AL.fmt(0.123456), "0.1235"); // 4 significant digits
  assert.equal(AL.fmt(1234.5678), "1235");
  assert.equal(AL.fmt(-0.5), "-0.5");
  assert.equal(AL.fmt(0.0001234), "1.23e-4");
  assert.equal(AL.fmt(0, "num"), "0");
  assert.equal(AL.fmt("L2H8"), "L2H8");
});

test("numeric filters: ranges, comparisons and equality; null never matches", () => {
  const f = (text) => AL.parseFilter(text, "num");
  assert.equal(f(""), null);
  assert.equal(f("   "), null);
  assert.equal(f("abc"), undefined); // not understood: the box is marked bad
  const above = f(">0.5");
  assert.deepEqual([0.6, 0.5, null].map(above), [true, false, false]);
  const atMost = f("<= 3");
  assert.deepEqual([3, 3.1, -1].map(atMost), [true, false, true]);
  const range = f("0.2..0.8");
  assert.deepEqual([0.2, 0.5, 0.8, 0.81, null].map(range), [true, true, true, false, false]);
  assert.deepEqual([5, 6].map(f("=5")), [true, false]);
  assert.deepEqual([5, 6, null].map(f("!=5")), [false, true, false]);
  assert.deepEqual([1e-4, 2e-4].map(f("1e-4")), [true, false]);
  assert.deepEqual([0.12345, 0.1].map(f("0.1235")), [true, false]); // as the cell shows it
});

test("boolean and text filters", () => {
  const yes = AL.parseFilter("yes", "bool");
  assert.deepEqual([true, false, null].map(yes), [true, false, false]);
  assert.deepEqual([true, false].map(AL.parseFilter("0", "bool")), [false, true]);
  assert.equal(AL.parseFilter("maybe", "bool"), undefined);
  const contains = AL.parseFilter("Pos", "str");
  assert.deepEqual(["positional", "syntactic", null].map(contains), [true, false, false]);
  const exact = AL.parseFilter("=nsubj", "str");
  assert.deepEqual(["nsubj", "nsubj:pass", "NSUBJ"].map(exact), [true, false, true]);
  const not = AL.parseFilter("!sub", "str");
  assert.deepEqual(["nsubj", "obj", null].map(not), [false, true, true]);
});

test("a table's dictionary-coded columns are decoded", () => {
  const t = AL.decodeTable("roles", {
    rows: 3, columns: ["head", "role"],
    data: [{ kind: "int", values: [0, 1, 2] }, { kind: "str", dict: ["pos", "syn"], codes: [1, 0, 1] }],
  });
  assert.equal(t.n, 3);
  assert.deepEqual(plain(t.col("role").values), ["syn", "pos", "syn"]);
  assert.equal(t.col("missing"), null);
  assert.equal(t.index.role, 1);
});

test("the wide view has one row per head and one column per measure (means of repeats)", () => {
  const long = table([
    ["layer", "int", [0, 0, 0, 1, 0]],
    ["head", "int", [0, 0, 1, 0, 0]],
    ["measure", "str", ["entropy", "distance", "entropy", "entropy", "entropy"]],
    ["value", "num", [1.0, 2.5, 3.0, 4.0, 2.0]],
  ]);
  const wide = AL.pivotTable(long, ["measure", "value"]);
  assert.deepEqual(wide.columns.map((c) => c.name), ["layer", "head", "entropy", "distance"]);
  assert.equal(wide.n, 3);
  assert.deepEqual(plain(wide.col("layer").values), [0, 0, 1]);
  assert.deepEqual(plain(wide.col("head").values), [0, 1, 0]);
  assert.deepEqual(plain(wide.col("entropy").values), [1.5, 3.0, 4.0]); // L0H0: mean of 1 and 2
  assert.deepEqual(plain(wide.col("distance").values), [2.5, null, null]); // missing: null
  assert.equal(AL.pivotTable(long, ["nope", "value"]), null);
});

test("an integer measure stays an integer column when no cell averages repeats", () => {
  const long = table([["head", "int", [0, 0, 1]], ["kind", "str", ["a", "b", "a"]],
    ["count", "int", [3, 4, 5]]]);
  const wide = AL.pivotTable(long, ["kind", "count"]);
  assert.deepEqual(wide.columns.map((c) => c.kind), ["int", "int", "int"]);
});

/* TableWidget.rowsShown on a table, without the page around it. */
function rowsShown(t, state) {
  const widget = { current: () => t, state: Object.assign({ sort: null, desc: false, filters: {}, search: "" }, state) };
  return plain(run("TableWidget").prototype.rowsShown.call(widget));
}

test("rows sort ascending or descending, missing values last, ties in table order", () => {
  const t = table([["name", "str", ["a", "b", "c", "d", "e"]], ["score", "num", [0.5, null, 0.1, 0.5, 0.9]]]);
  assert.deepEqual(rowsShown(t, { sort: 1 }), [2, 0, 3, 4, 1]);
  assert.deepEqual(rowsShown(t, { sort: 1, desc: true }), [4, 0, 3, 2, 1]);
  assert.deepEqual(rowsShown(t, { sort: 0, desc: true }), [4, 3, 2, 1, 0]);
  assert.deepEqual(rowsShown(t, {}), [0, 1, 2, 3, 4]);
});

test("rows are filtered per column and searched over every column", () => {
  const t = table([["role", "str", ["positional", "syntactic", "positional"]],
    ["share", "num", [0.95, 0.4, 0.7]]]);
  assert.deepEqual(rowsShown(t, { filters: { 0: "pos" } }), [0, 2]);
  assert.deepEqual(rowsShown(t, { filters: { 0: "pos", 1: ">0.8" } }), [0]);
  assert.deepEqual(rowsShown(t, { search: "SYN" }), [1]);
  assert.deepEqual(rowsShown(t, { search: "positional 0.7" }), [2]); // every word, any column
  assert.deepEqual(rowsShown(t, { filters: { 1: "nonsense" } }), [0, 1, 2]); // ignored, marked bad
});

test("colour ranges: finite values only, diverging ranges symmetric around 0", () => {
  assert.deepEqual(plain(AL.range([[1, 2], [null, 5]], false)), [1, 5]);
  assert.deepEqual(plain(AL.range([[-1, 2], [Infinity, 0.5]], true)), [-2, 2]);
  assert.deepEqual(plain(AL.range([[null]], false)), [0, 1]);
  assert.deepEqual(plain(AL.range([[3, 3]], false)), [2.5, 3.5]);
  assert.deepEqual(plain(AL.scale(["#000000", "#ffffff"], 0.5)), [128, 128, 128]);
  assert.deepEqual(plain(AL.scale(["#000000", "#ffffff"], 7)), [255, 255, 255]); // clamped
  assert.deepEqual(plain(AL.scale(["#000000", "#ffffff"], NaN)), [0, 0, 0]);
});
