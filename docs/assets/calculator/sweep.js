/* Sweeps: the memory of the fullest stage against the sequence length, the micro-batch size and the GPU count,
 * with the fit boundary of each (the CLI's reverse questions), as small SVG charts. Python computes every
 * point, position and label (estimator/plan/sweep.py through the "sweep" request of estimator/web/plan.py); this
 * file only scales bytes to pixels. A point is a button: it sets that value. "Fewest GPUs with any layout"
 * asks Python's layout search (estimator.plan.search.min_gpus, with the search options of search_options.js). Methods of the Calculator (calculator.js), mixed
 * in from window.mmeSweep; the panel (.mme-sweeps) carries data-state (pending | done | error) and fires
 * "sweep:done" with the request's time in detail.ms.
 */
(function () {
  "use strict";
  if (window.mmeSweep) return;            // loaded right after the calculator and again at the page's end
  const h = window.mmeRender.h;
  const W = 320, HT = 190, L = 44, R = 12, T = 16, B = 34;   // the chart's viewBox and margins

  function chart(s, v, onPick) {
    const plot = W - L - R, ph = HT - T - B;
    const x = (pos) => L + pos * plot, y = (b) => T + ph - (v.scale_bytes ? (b / v.scale_bytes) * ph : 0);
    const id = `mme-sweep-${s.name}`;
    const svg = h("svg:svg", { viewBox: `0 0 ${W} ${HT}`, class: "mme-svg mme-sweep-chart", role: "img",
                               "aria-labelledby": `${id}-title ${id}-desc` },
      h("svg:title", { id: `${id}-title` }, `${s.label}: GiB on the device of the fullest stage`),
      h("svg:desc", { id: `${id}-desc` }, `${s.boundary_text}. ` +
        s.points.map((p) => `${p.label}: ${p.gib} GiB${p.fits ? "" : ", does not fit"}`).join("; ") + "."));
    for (const t of v.ticks) {
      svg.append(h("svg:line", { x1: L, x2: W - R, y1: y(t.bytes), y2: y(t.bytes), class: "mme-grid" }),
        h("svg:text", { x: L - 4, y: y(t.bytes) + 3.5, "text-anchor": "end", class: "mme-text mme-tick" }, t.label));
    }
    for (const t of s.x_ticks) {
      svg.append(h("svg:text", { x: x(t.pos), y: HT - B + 13, "text-anchor": t.pos > 0.95 ? "end" : t.pos < 0.05 ? "start" : "middle",
                                 class: "mme-text mme-tick mme-x-tick" }, t.label));
    }
    svg.append(h("svg:text", { x: L + plot / 2, y: HT - 2, "text-anchor": "middle", class: "mme-text mme-tick mme-x-unit" }, s.unit));
    const cy = y(v.capacity_bytes);
    svg.append(h("svg:line", { x1: L, x2: W - R, y1: cy, y2: cy, class: "mme-cap" }),
      h("svg:text", { x: L + 3, y: cy - 4, class: "mme-text mme-tick mme-capacity-label" }, `${v.gpu} ${v.capacity_label}`),
      h("svg:text", { x: L - 4, y: T - 5, "text-anchor": "end", class: "mme-text mme-tick" }, "GiB"));
    const mark = (pos, cls, label, anchorTop) => {
      const mx = x(pos);
      svg.append(h("svg:line", { x1: mx, x2: mx, y1: T, y2: T + ph, class: cls }),
        h("svg:text", { x: mx + (pos > 0.6 ? -3 : 3), y: anchorTop ? T + 9 : T + ph - 4,
                        "text-anchor": pos > 0.6 ? "end" : "start", class: `mme-text mme-tick ${cls}-label` }, label));
    };
    if (s.boundary) mark(s.boundary.pos, "mme-boundary", s.boundary.label, true);
    mark(s.current.pos, "mme-now", `now ${s.current.label}`, false);
    svg.append(h("svg:polyline", { class: "mme-sweep-line", fill: "none",
                                   points: s.points.map((p) => `${x(p.pos)},${y(p.bytes)}`).join(" ") }));
    for (const p of s.points) {
      svg.append(h("svg:circle", { cx: x(p.pos), cy: y(p.bytes), r: 4.5, tabindex: "0", role: "button",
                                   class: `mme-sweep-point ${p.fits ? "mme-ok" : "mme-no"}`, "data-x": p.x,
                                   "aria-label": `${p.label} ${s.unit}: ${p.gib} GiB (stage ${p.stage}), ` +
                                     `${p.fits ? "fits" : "does not fit"}; set it`,
                                   onclick: () => onPick(s.field, p.x),
                                   onkeydown: (ev) => { if (ev.key === "Enter" || ev.key === " ") onPick(s.field, p.x); } },
        h("svg:title", {}, `${p.label} ${s.unit}: ${p.gib} GiB (stage ${p.stage})${p.clipped ? ", off the chart" : ""}, ` +
          (p.fits ? "fits" : "does not fit"))));
    }
    return h("figure", { class: "mme-sweep", "data-sweep": s.name },
      h("figcaption", {}, h("strong", {}, s.label), h("br"), h("span", { class: "mme-boundary-text" }, s.boundary_text)),
      svg, h("p", { class: "mme-doc" }, s.reason));
  }

  window.mmeSweep = {
    sweepPanel() {
      const box = this.sweepBox = h("details", { class: "mme-sweeps", open: Boolean(this.sweepOpen) },
        h("summary", {}, "Sweeps: memory against sequence length, micro-batch size and GPUs"));
      box.addEventListener("toggle", () => { this.sweepOpen = box.open; if (box.open) this.runSweep(); });
      if (this.sweepOpen) setTimeout(() => this.runSweep());
      return box;
    },

    runSweep() {
      const box = this.sweepBox;
      if (!box || !box.open || this.source !== "python" || !this.engine.ready) return;
      const key = JSON.stringify(this.state);
      if (this.sweep && this.sweep.key === key) return this.drawSweep();
      const sw = this.sweep = { key, res: null, t0: performance.now() };
      this.drawSweep();
      this.engine.call({ op: "sweep", state: this.state }).then((res) => {
        sw.res = res;
        sw.ms = performance.now() - sw.t0;
        if (this.sweep === sw) this.drawSweep();
      }, (err) => {
        sw.res = { errors: [{ message: `The request failed: ${err.message}` }] };
        if (this.sweep === sw) this.drawSweep();
      });
    },

    drawSweep() {
      const box = this.sweepBox, sw = this.sweep, res = sw.res;
      const summary = box.querySelector("summary");
      if (!res) {
        box.dataset.state = "pending";
        return box.replaceChildren(summary, h("p", { class: "mme-doc", role: "status" }, "Sweeping…"));
      }
      box.dataset.state = res.errors ? "error" : "done";
      if (res.errors) {
        box.replaceChildren(summary, h("p", { class: "mme-err" }, res.errors.map((e) => e.message).join(" ")));
      } else {
        const pick = (field, value) => this.apply({ [field]: value }, field);
        this.minGpusBox = h("div", { class: "mme-min-gpus" }, h("button", { type: "button", class: "md-button",
          onclick: () => this.fewestGpus() }, "Fewest GPUs with any layout"));
        box.replaceChildren(summary,
          h("p", { class: "mme-doc" }, `Each point is this configuration with one setting changed, re-estimated: ` +
            `${res.unit}; the dashed line is the GPU's capacity. Click a point to use that value.`),
          h("div", { class: "mme-sweep-grid" }, res.series.map((s) => chart(s, res, pick))), this.minGpusBox);
      }
      box.dispatchEvent(new CustomEvent("sweep:done", { bubbles: true, detail: { ms: sw.ms } }));
    },

    fewestGpus(into) {
      const box = into || this.minGpusBox, key = JSON.stringify(this.state);
      box.replaceChildren(h("p", { class: "mme-doc", role: "status" }, "Searching the layouts on 1, 2, 4, … GPUs…"));
      const options = this.searchOptions ? this.searchOptions() : null;
      this.engine.call({ op: "sweep", state: this.state, min_gpus: true, options }).then((res) => {
        if (JSON.stringify(this.state) !== key || !box.isConnected) return;
        const m = res.min_gpus;
        box.replaceChildren(res.errors ? h("p", { class: "mme-err" }, res.errors.map((e) => e.message).join(" "))
          : h("p", { class: "mme-min-gpus-answer", role: "status" }, "Fewest GPUs with any layout: ",
            h("strong", {}, m.reason), m.words ? [h("br"), h("small", {}, m.words)] : null));
        box.dispatchEvent(new CustomEvent("sweep:done", { bubbles: true, detail: { minGpus: m } }));
      }, () => {});
    }
  };
})();
