/* attnlens attention viewer, part 2 of 4: the text view (the text coloured by the hovered or
   pinned token's attention). */

/* ---------------- Text view ---------------- */
let TEXT = null; /* {spans: [span per token]} of the text view shown */

function textView(stage) {
  const box = AL.el("div", { class: "textview", id: "textview" });
  const spans = new Array(N);
  const frag = document.createDocumentFragment();
  for (let i = 0; i < N; i++) {
    if (i === PROMPT && PROMPT < N) frag.append(AL.el("span", { class: "gen-mark", text: "▸ generated:" }), " ");
    const piece = V.pieces ? V.pieces[i] : null;
    let span;
    if (piece === null || piece === undefined) {
      span = document.createElement("span");
      span.className = "tok special";
      span.textContent = V.tokens[i];
      frag.append(span);
    } else {
      /* The whitespace before a word stays outside its span (a space-only token keeps it). */
      const body = piece.replace(/^\s+/, "");
      const lead = body ? piece.slice(0, piece.length - body.length) : "";
      if (lead) frag.append(lead);
      span = document.createElement("span");
      span.className = piece ? "tok" : "tok empty";
      span.textContent = body || piece || "·";
      frag.append(span);
    }
    if (i >= PROMPT) span.classList.add("gen");
    span.dataset.i = i;
    spans[i] = span;
  }
  box.append(frag);
  const legend = AL.el("div", { class: "text-legend", id: "text-legend" });
  stage.append(legend, box);
  TEXT = { spans: spans, legend: legend, box: box };
  const at = (event) => (event.target && event.target.dataset && event.target.dataset.i !== undefined ? Number(event.target.dataset.i) : null);
  box.addEventListener("mousemove", (event) => {
    const i = at(event);
    const h = i === null ? null : { side: S.direction === "from" ? "query" : "key", index: i };
    if (JSON.stringify(h) !== JSON.stringify(S.hover)) {
      S.hover = h;
      if (!S.pinned) colourText();
    }
    const a = S.pinned || h;
    tip(a ? textReadout(a) : "", event.clientX, event.clientY);
  });
  box.addEventListener("mouseleave", () => { S.hover = null; if (!S.pinned) colourText(); tip(""); });
  box.addEventListener("click", (event) => {
    const i = at(event);
    if (i === null) return;
    S.pinned = S.pinned && S.pinned.index === i ? null : { side: S.direction === "from" ? "query" : "key", index: i };
    colourText();
    writeAddress();
    tip(S.pinned ? `${textReadout(S.pinned)} (pinned: click it again to release)` : "", event.clientX, event.clientY);
  });
  colourText();
}

function textReadout(a) {
  const line = meanLine(a.index, a.side === "query" ? "from" : "to");
  const top = topIndices(line, 5).map((j) => `${tokenName(j)} ${fmtW(line[j])}`).join(" · ");
  const what = selection().length > 1 ? ` (mean of ${selection().length} heads)` : "";
  return a.side === "query" ? `${tokenName(a.index)} attends most to${what}: ${top}`
    : `tokens attending most to ${tokenName(a.index)}${what}: ${top}`;
}

function colourText() {
  if (!TEXT) return;
  const t = performance.now();
  const a = S.pinned || S.hover;
  const spans = TEXT.spans;
  const paint = (span, background, colour) => { /* style writes only where a colour changes */
    if (span.bg !== background) { span.style.background = background; span.bg = background; }
    if (span.fg !== colour) { span.style.color = colour; span.fg = colour; }
  };
  if (!a || !selection().length) {
    for (const span of spans) { paint(span, "", ""); span.classList.remove("masked", "active"); }
    TEXT.legend.textContent = "Hover a token to colour the text by its attention; click to pin it.";
    return;
  }
  const from = a.side === "query";
  const line = meanLine(a.index, from ? "from" : "to");
  let max = 0;
  for (let j = 0; j < N; j++) if (line[j] > max) max = line[j];
  const norm = S.relative && max > 0 ? 1 / max : 1;
  for (let j = 0; j < N; j++) {
    const span = spans[j];
    const off = from ? masked(a.index, j) : masked(j, a.index);
    span.classList.toggle("masked", off);
    span.classList.toggle("active", j === a.index);
    if (off || line[j] <= 0) { paint(span, "", ""); continue; }
    const c = blue(line[j] * norm);
    paint(span, AL.rgb(c), AL.textOn(c));
  }
  TEXT.legend.textContent = "";
  const bar = AL.el("span", { class: "legend-bar" });
  bar.style.background = `linear-gradient(to right, ${BLUES.join(",")})`;
  TEXT.legend.append(`${from ? "Attention of" : "Attention received by"} ${tokenName(a.index)}: 0 `, bar,
    ` ${fmtW(S.relative ? max : 1)}${S.relative ? " (its largest weight)" : ""}${S.sqrt ? ", √ scale" : ""}`);
  if (CAUSAL) {
    TEXT.legend.append(AL.el("span", { class: "tok masked legend-mask", text: "masked" }),
      " = hidden by the causal mask (not weight 0)");
  }
  STATS.colourMs = performance.now() - t;
}
