/* Loads the scripts of a page, as shipped, into a sandbox for node's unit tests: the files are
   joined in the page's order into one script (as attnlens/report/page.py does) and run with a
   stand-in DOM whose only real element is the data (<script id="attnlens-data">). */
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");

const ROOT = path.resolve(__dirname, "..", "..");
const REPORT = ["attnlens/report/static/common.js", "attnlens/report/static/tables.js"];
const VIEWER_DATA = ["attnlens/report/static/common.js", "attnlens/viewer/static/viewer_data.js"];

/* Anything read, called or constructed from it gives another stand-in. */
function standIn() {
  return new Proxy(function () {}, {
    get: (target, key) => {
      if (key === Symbol.toPrimitive) return () => "";
      if (key === "then") return undefined;
      return standIn();
    },
    apply: () => standIn(),
    construct: () => standIn(),
  });
}

/* The page's scripts run on ``data``; returns ``run(expression)`` evaluated in the page. */
function loadPage(files, data) {
  const element = { textContent: JSON.stringify(data) };
  const document = new Proxy({}, {
    get: (target, key) => (key === "getElementById"
      ? (id) => (id === "attnlens-data" ? element : standIn()) : standIn()),
  });
  const window = { devicePixelRatio: 1, addEventListener() {} };
  const context = vm.createContext({ document, window, atob, performance, console, URL,
    Node: function Node() {} });
  const source = files.map((f) => fs.readFileSync(path.join(ROOT, f), "utf8")).join("\n");
  vm.runInContext(source, context, { filename: files.map((f) => path.basename(f)).join("+") });
  return (expression) => vm.runInContext(expression, context);
}

/* A value made inside the page as a plain value of this realm (deepStrictEqual compares
   prototypes, and the page's arrays have the page's Array). */
const plain = (value) => JSON.parse(JSON.stringify(value));

const base64 = (typed) => Buffer.from(typed.buffer).toString("base64");

module.exports = { loadPage, plain, base64, REPORT, VIEWER_DATA };
