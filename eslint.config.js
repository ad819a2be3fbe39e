// ESLint (pinned in package.json; `make lint`, `make test-js`): the report's and the viewer's
// scripts, and their node unit tests (tests/js).
//
// A page joins its scripts, in order, into one <script> (attnlens/report/html.py: JS,
// attnlens/viewer/page.py: JS), so a file uses names the page's other files declare at top
// level: each file gets those as globals, read from the files themselves.
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const js = require("@eslint/js");

const REPORT = "attnlens/report/static";
const VIEWER = "attnlens/viewer/static";
const PAGES = [
  [`${REPORT}/common.js`, `${REPORT}/tables.js`, `${REPORT}/report.js`],
  [`${REPORT}/common.js`, `${VIEWER}/viewer_data.js`, `${VIEWER}/viewer_text.js`,
    `${VIEWER}/viewer_matrix.js`, `${VIEWER}/viewer.js`],
];
const BROWSER = ["window", "document", "Node", "Element", "atob", "performance", "URL",
  "URLSearchParams", "setTimeout", "requestAnimationFrame", "location", "history", "console",
  "Blob", "ImageData", "navigator", "TextEncoder", "crypto", "ResizeObserver", "Path2D", "Image",
  "alert", "IntersectionObserver"];
const NODE = ["require", "module", "__dirname", "process", "console", "Buffer", "atob", "btoa",
  "performance", "URL"];

/* [name, "writable" for let/var, else "readonly"] of a file's top-level declarations */
function topLevelNames(file) {
  const text = fs.readFileSync(path.join(__dirname, file), "utf8");
  return [...text.matchAll(/^(const|let|var|function|class)\s+([A-Za-z_$][\w$]*)/gm)]
    .map((m) => [m[2], m[1] === "let" || m[1] === "var" ? "writable" : "readonly"]);
}

function pageGlobals(file) {
  const names = new Map();
  for (const page of PAGES.filter((p) => p.includes(file))) {
    for (const other of page) if (other !== file) topLevelNames(other).forEach(([n, k]) => names.set(n, k));
  }
  topLevelNames(file).forEach(([n]) => names.delete(n));
  return Object.fromEntries(names);
}

const readonly = (names) => Object.fromEntries(names.map((n) => [n, "readonly"]));
const scripts = [...new Set(PAGES.flat())];

module.exports = [
  { ignores: ["**/*", `!${REPORT}/*.js`, `!${VIEWER}/*.js`, "!tests/js/*.js", "!eslint.config.js",
    `!attnlens`, `!attnlens/report`, `!attnlens/viewer`, `!${REPORT}`, `!${VIEWER}`, "!tests",
    "!tests/js"] },
  js.configs.recommended,
  ...scripts.map((file) => ({
    files: [file],
    languageOptions: {
      ecmaVersion: 2022, sourceType: "script",
      globals: { ...readonly(BROWSER), ...pageGlobals(file) },
    },
    rules: {
      // top-level names are the page's: used by the files after this one
      "no-unused-vars": ["error", { vars: "local", args: "none", caughtErrors: "none" }],
    },
  })),
  {
    files: ["tests/js/*.js", "eslint.config.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "commonjs", globals: readonly(NODE) },
  },
];
