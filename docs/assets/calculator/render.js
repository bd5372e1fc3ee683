/* The calculator's results, drawn from what Python returned (estimator/web/view.py): the verdict, the
 * per-stage table, the stacked-bar chart, the assumptions, the exports and the layout-search results.
 * No arithmetic on memory happens here: every number arrives formatted, the chart only scales bytes to
 * pixels. Segment colours are the classes of the build-time charts (estimator.css), so a part of the
 * memory has one colour on every page. window.mmeRender holds the functions calculator.js calls.
 */
(function () {
  "use strict";
  if (window.mmeRender) return;           // loaded right after the calculator and again at the page's end

  function h(tag, attrs, ...children) {
    const el = tag.startsWith("svg:") ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
      : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v); else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat(Infinity)) if (c !== null && c !== undefined && c !== false) el.append(c);
    return el;
  }

  /* ---- updating in place: an answer usually changes numbers, not the shape of the table or the chart, and
   * new elements cost the browser their style, layout and paint; patched ones only what changed. */
  // `old` made like `fresh` (the same elements, listeners only through h's on* attributes, none here, or
  // listeners that do the same in both): its attributes and text set to fresh's; where the shape differs, fresh's
  // nodes are taken. Returns the node now in the document.
  function patch(old, fresh) {
    if (old.nodeType !== fresh.nodeType || old.nodeName !== fresh.nodeName) {
      old.replaceWith(fresh);
      return fresh;
    }
    if (old.nodeType !== 1) {
      if (old.nodeValue !== fresh.nodeValue) old.nodeValue = fresh.nodeValue;
      return old;
    }
    for (const a of [...old.attributes]) if (!fresh.hasAttribute(a.name)) old.removeAttribute(a.name);
    for (const a of fresh.attributes) if (old.getAttribute(a.name) !== a.value) old.setAttribute(a.name, a.value);
    const olds = [...old.childNodes], kids = [...fresh.childNodes];
    if (olds.length === kids.length) {
      kids.forEach((k, i) => patch(olds[i], k));
      return old;
    }
    // A child more or less (a note shown or gone, a stage added): the children alike at both ends are patched, the
    // ones between taken from fresh, so that one paragraph more does not rebuild a whole table beside it.
    const kind = (n) => (n.nodeType === 1 ? `${n.nodeName}.${n.getAttribute("class") || ""}` : n.nodeName);
    const n = Math.min(olds.length, kids.length);
    let head = 0, tail = 0;
    while (head < n && kind(olds[head]) === kind(kids[head])) head++;
    while (tail < n - head && kind(olds[olds.length - 1 - tail]) === kind(kids[kids.length - 1 - tail])) tail++;
    const at = olds[olds.length - tail] || null;        // the first of the children kept at the end
    olds.slice(head, olds.length - tail).forEach((x) => x.remove());
    kids.slice(head, kids.length - tail).forEach((k) => old.insertBefore(k, at));
    for (let i = 0; i < head; i++) patch(olds[i], kids[i]);
    for (let i = 1; i <= tail; i++) patch(olds[olds.length - i], kids[kids.length - i]);
    return old;
  }

  // `parent`'s children made `nodes`, in order, without moving a node already in its place.
  function place(parent, nodes) {
    nodes.forEach((n, i) => {
      const cur = parent.childNodes[i];
      if (cur === n) return;
      if (cur) parent.replaceChild(n, cur); else parent.append(n);
    });
    while (parent.childNodes.length > nodes.length) parent.lastChild.remove();
  }

  /* ---- copying */
  function fallbackCopy(text) {
    const area = h("textarea", { readonly: true, class: "mme-offscreen" });
    area.value = text;
    document.body.append(area);
    area.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (err) { ok = false; }
    area.remove();
    return ok;
  }

  function copy(text, button) {
    const label = button.dataset.label || (button.dataset.label = button.textContent);
    const said = (word) => {
      button.textContent = word;
      button.dataset.copied = word === "Copied" ? "1" : "0";
      clearTimeout(button.copyTimer);
      button.copyTimer = setTimeout(() => { button.textContent = label; }, 2000);
    };
    const fallback = () => said(fallbackCopy(text) ? "Copied" : "Copy failed: select the text");
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(text).then(() => said("Copied"), fallback);
    else fallback();
  }

  /* ---- the verdict */
  function verdict(v, vocabulary) {
    if (!v.verdict) return h("p", { class: "mme-verdict mme-verdict-none" }, "Choose a GPU for a fit verdict.");
    const d = v.verdict;
    return h("div", { class: `mme-verdict mme-v-${d.verdict}`, "data-verdict": d.verdict },
      h("p", {}, h("strong", { class: "mme-word" }, d.lead), d.rest),
      d.band_text ? h("p", { class: "mme-band", "data-band": d.band.driver }, h("small", {}, d.band_text)) : null,
      d.why.length ? h("ul", { class: "mme-why" }, d.why.map((w) => h("li", {}, w))) : null,
      d.moe_overload_headroom ? h("details", { class: "mme-overload", "data-overload": String(d.moe_overload_headroom.factor) },
        h("summary", {}, d.moe_overload_headroom.text), h("p", {}, d.moe_overload_headroom.evidence)) : null,
      h("details", { class: "mme-vocabulary" }, h("summary", {}, "What fits, fits within the error band and does not fit mean"),
        h("dl", {}, vocabulary.map((x) => [h("dt", {}, x.word), h("dd", {}, x.meaning)]))));
  }

  /* ---- the table */
  const DETAIL = new Set(["weights", "gradients", "optimizer", "activations", "transient", "reserved"]);

  function table(v) {
    const fit = v.capacity_bytes !== null;
    const cls = (key) => (DETAIL.has(key) ? "mme-detail" : null);
    return h("div", { class: "mme-table-wrap" }, h("table", { class: "mme-table" },
      h("caption", {}, `Memory of one GPU of each pipeline stage, in ${v.unit}`),
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Stage"), h("th", { scope: "col", class: "mme-layers" }, "Layers"),
        v.columns.map((c) => h("th", { scope: "col", class: cls(c.key) }, c.label)),
        fit ? h("th", { scope: "col" }, "Verdict") : null)),
      h("tbody", {}, v.rows.map((row) => h("tr", { class: row.peak ? "mme-peak" : null, "data-stage": row.stage },
        h("th", { scope: "row" }, String(row.stage), row.peak ? h("span", { class: "mme-peak-tag" }, " peak") : null),
        h("td", { class: "mme-layers" }, row.layers, row.extras ? h("small", {}, h("br"), "+ ", row.extras) : null),
        v.columns.map((c) => h("td", { "data-col": c.key, class: cls(c.key) }, row.cells[c.key])),
        fit ? h("td", { "data-fits": row.fits, class: "mme-fit-cell" }, row.fits_text) : null)))));
  }

  /* ---- the chart, drawn at the width it is shown at so that its text keeps its size */
  function chart(v, width) {
    const W = Math.max(280, Math.round(width || 640));
    const left = 58, right = W < 480 ? 64 : 80, bar = 18, gap = 10, top = 22, axis = 34;
    const plot = W - left - right;
    const H = top + v.bars.length * (bar + gap) + axis;
    const x = (b) => left + (v.scale_bytes ? (b / v.scale_bytes) * plot : 0);
    const svg = h("svg:svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "mme-svg mme-calc-chart",
                               role: "img", "aria-labelledby": "mme-chart-title mme-chart-desc" },
      h("svg:title", { id: "mme-chart-title" }, "Memory of one GPU of each pipeline stage, in GiB"),
      h("svg:desc", { id: "mme-chart-desc" }, v.bars.map((b) => `Stage ${b.stage}: ${b.label} on the device (` +
        b.segments.map((s) => `${v.segments.find((g) => g.name === s.name).label.toLowerCase()} ${s.gib}`).join(", ") +
        "). ").join("") + (v.capacity_label ? `GPU capacity: ${v.capacity_label}.` : "")));
    for (const t of v.ticks) {
      const tx = x(t.bytes);
      svg.append(h("svg:line", { x1: tx, x2: tx, y1: top - 4, y2: H - axis + 4, class: "mme-grid" }),
        h("svg:text", { x: tx, y: H - axis + 17, "text-anchor": "middle", class: "mme-text mme-tick" }, t.label));
    }
    svg.append(h("svg:text", { x: left + plot / 2, y: H - 4, "text-anchor": "middle", class: "mme-text mme-tick" },
      "GiB per GPU"));
    v.bars.forEach((b, i) => {
      const y = top + i * (bar + gap);
      let at = left;
      svg.append(h("svg:text", { x: left - 6, y: y + bar - 5, "text-anchor": "end", class: "mme-text" }, `Stage ${b.stage}`));
      for (const s of b.segments) {
        const w = Math.max(0, x(s.bytes) - left);
        if (w > 0) {
          svg.append(h("svg:rect", { x: at, y, width: w, height: bar, class: `mme-seg mme-${s.name}` },
            h("svg:title", {}, `Stage ${b.stage}: ${v.segments.find((g) => g.name === s.name).label} ${s.gib} GiB`)));
        }
        at += w;
      }
      svg.append(h("svg:text", { x: W - right + 6, y: y + bar - 5, class: "mme-text mme-bar-label" }, b.label));
    });
    if (v.capacity_bytes) {
      const cx = x(v.capacity_bytes);
      svg.append(h("svg:line", { x1: cx, x2: cx, y1: top - 6, y2: H - axis + 4, class: "mme-cap" }),
        h("svg:text", { x: cx, y: top - 10, "text-anchor": cx > left + plot * 0.6 ? "end" : "start",
                        class: "mme-text mme-tick mme-capacity-label" }, v.capacity_label));
    }
    const legend = h("ul", { class: "mme-legend" }, v.segments.map((s) =>
      h("li", {}, h("span", { class: `mme-swatch mme-${s.name}` }), s.label)));
    return h("figure", { class: "mme-figure" }, svg, legend);
  }

  /* ---- exports */
  function exports(ex, open, onToggle) {
    const items = [["yaml", "Copy YAML"], ["cli", "Copy CLI command"], ["megatron", "Copy Megatron arguments"],
                   ["bridge", "Copy Megatron-Bridge overrides"]];
    const box = h("details", { class: "mme-exports", open },
      h("summary", {}, "This configuration as YAML, a CLI command, Megatron-LM arguments, Megatron-Bridge overrides"));
    box.addEventListener("toggle", () => onToggle(box.open));
    if (ex) {
      box.append(...items.filter(([k]) => ex[k]).map(([k, label]) => h("div", { class: "mme-export" },
        h("button", { type: "button", class: "md-button", "data-copy": k,
                      onclick: (ev) => copy(ex[k], ev.currentTarget) }, label),
        h("pre", { class: `mme-export-${k}` }, ex[k]))));
    } else if (open) {
      box.append(h("p", {}, "Writing…"));
    }
    return box;
  }

  /* ---- layout search */
  function layouts(res, opts) {
    const box = h("section", { class: "mme-layouts", "aria-label": "Layouts that fit" });
    if (res.pending) {
      box.append(h("p", { class: "mme-badge", role: "status" },
        `Searching the layouts of this model on ${res.gpus ? res.gpus.toLocaleString("en-US") + (res.gpus === 1 ? " GPU" : " GPUs") : "these GPUs"}… ` +
        `${res.seconds || 0} s`));
      return box;
    }
    box.append(h("h3", { id: "mme-layouts-title" }, `Layouts that fit ${res.gpus ? res.gpus.toLocaleString("en-US") + " × " : ""}${res.gpu || "the GPU"}`));
    if (res.errors) {
      box.append(h("p", { class: "mme-err" }, res.errors.map((e) => e.message).join(" ")));
      return box;
    }
    if (opts.stale) {
      box.append(h("p", { class: "mme-stale", role: "note" }, "The configuration changed since this search: " +
        "these layouts are for the settings it was run with. ",
        h("button", { type: "button", class: "md-button", onclick: opts.rerun }, "Search again")));
    }
    box.append(h("p", {}, res.summary),
      res.current ? h("p", { class: "mme-current", "data-rank": res.current.rank || "",
                             "data-valid": String(res.current.valid) }, res.current.text) : null,
      res.notes.length ? h("p", { class: "mme-doc" }, res.notes.join(" ")) : null,
      h("p", { class: "mme-doc mme-notation" }, res.notation));
    box.append(h("div", { class: "mme-table-wrap" }, h("table", { class: "mme-table mme-layout-table" },
      // each header aligned as its column's cells (left for words, right for figures)
      h("thead", {}, h("tr", {}, ["#", "Layout", "Peak on device", "Headroom", "Why", ""].map((t) =>
        h("th", { scope: "col", class: t === "Layout" || t === "Why" ? "mme-layers" : null }, t)))),
      // On a phone each row is a card (calculator.css): the cells name themselves through data-label.
      h("tbody", {}, res.layouts.map((lay, i) => h("tr", { "data-rank": i + 1, class: opts.inUse === i ? "mme-in-use" : null },
        h("td", { class: "mme-l-rank", "data-label": "#" }, String(i + 1)),
        h("td", { class: "mme-layers mme-l-layout" }, h("code", { title: lay.words }, lay.label), h("br"), h("small", {}, lay.words)),
        h("td", { class: "mme-l-peak", "data-label": "Peak on device" }, lay.peak),
        h("td", { class: "mme-l-headroom", "data-label": "Headroom" }, lay.headroom),
        h("td", { class: "mme-layers mme-l-why" }, h("small", {}, lay.why)),
        h("td", { class: "mme-l-use" }, opts.inUse === i ? h("span", { class: "mme-in-use-tag" }, "in use")
          : h("button", { type: "button", class: "md-button mme-use", disabled: opts.stale || null,
                          onclick: () => opts.use(i) }, "Use this layout"))))))));
    return box;
  }

  window.mmeRender = { h, patch, place, copy, verdict, table, chart, exports, layouts };
})();
