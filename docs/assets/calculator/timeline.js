/* Memory over one training step and what is in the peak, drawn from what Python returned
 * (estimator/web/charts.py: the "timeline" request, asked for after each estimate). No arithmetic on
 * memory happens here: bytes are only scaled to pixels, every label arrives formatted.
 *
 * window.mmeTimeline.update(calc, res, source) asks Python for the charts of the estimate just shown and
 * draws them into calc.timelineBox, a section right after the results (emptied when the results show an
 * error); redraw(calc) draws them again at a new width. The chart's root
 * carries data-peak-stage and data-peak-label; the box fires "timeline:done" once drawn, with the time
 * the drawing took (detail.ms). Long pipelines come as a sample of stages with a bounded number of points
 * each (tl.resolution says which); a point after points thinned away (p.thinned) continues the line.
 */
(function () {
  "use strict";
  if (window.mmeTimeline) return;
  const R = window.mmeRender, h = R.h;
  const REST_MS = 400;                  // the timeline is asked for once the form has rested this long

  function chart(tl, width) {
    const W = Math.max(300, Math.round(width || 640));
    const narrow = W < 480;
    const left = narrow ? 40 : 52, right = narrow ? 10 : 16, top = 26, plotH = narrow ? 170 : 220, axis = 40;
    const H = top + plotH + axis;
    const plot = W - left - right;
    const y = (b) => top + plotH - (tl.scale_bytes ? (b / tl.scale_bytes) * plotH : 0);
    const peak = tl.stages.find((s) => s.stage === tl.peak_stage);   // the stages drawn: all, or a sample (tl.resolution)
    const svg = h("svg:svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, class: "mme-svg mme-timeline",
                               role: "img", "aria-labelledby": "mme-tl-title mme-tl-desc",
                               "data-peak-stage": tl.peak_stage, "data-peak-label": tl.peak_label },
      h("svg:title", { id: "mme-tl-title" }, `Allocated memory of one GPU of each pipeline stage over one training step (${tl.schedule}), in GiB`),
      h("svg:desc", { id: "mme-tl-desc" }, tl.stages.map((s) => `Stage ${s.stage}: from ${s.base_label} (model states ` +
        `and persistent buffers) up to ${s.peak_label} at ${s.peak_point}. `).join("") +
        (tl.capacity_label ? `GPU capacity: ${tl.capacity_label}.` : "")));
    for (const t of tl.ticks) {
      const ty = y(t.bytes);
      svg.append(h("svg:line", { x1: left, x2: W - right, y1: ty, y2: ty, class: "mme-grid" }),
        h("svg:text", { x: left - 5, y: ty + 4, "text-anchor": "end", class: "mme-text mme-tick" }, t.label));
    }
    svg.append(h("svg:text", { x: 2, y: 12, class: "mme-text mme-tick" }, "GiB"),
      h("svg:text", { x: left, y: H - axis + 16, class: "mme-text mme-tick" }, "start"),
      h("svg:text", { x: W - right, y: H - axis + 16, "text-anchor": "end", class: "mme-text mme-tick" }, "optimizer step"),
      h("svg:text", { x: left + plot / 2, y: H - 6, "text-anchor": "middle", class: "mme-text mme-tick" },
        narrow ? "passes in schedule order" : "forward and backward passes in schedule order (not to time scale)"));
    const order = tl.stages.filter((s) => s.stage !== tl.peak_stage).concat([peak]);   // the peak stage on top
    for (const s of order) {
      const n = s.points.length;
      const x = (i) => left + (n > 1 ? (i / (n - 1)) * plot : 0);
      const isPeak = s.stage === tl.peak_stage;
      const g = h("svg:g", { class: `mme-tl-stage${isPeak ? " mme-tl-peak" : ""}`, "data-stage": s.stage },
        h("svg:title", {}, `Stage ${s.stage}: peak ${s.peak_label} at ${s.peak_point}`));
      let run = [];
      const flush = () => { if (run.length > 1) g.append(h("svg:polyline", { points: run.join(" "), class: "mme-tl-line" })); };
      s.points.forEach((p, i) => {
        const xy = `${x(i).toFixed(1)},${y(p.bytes).toFixed(1)}`;
        if (p.skipped && !p.thinned && run.length) {   // repeated cycles left out: a dashed bridge
          flush();
          g.append(h("svg:line", { x1: x(i - 1).toFixed(1), y1: y(s.points[i - 1].bytes).toFixed(1), x2: x(i).toFixed(1),
                                   y2: y(p.bytes).toFixed(1), class: "mme-tl-gap" },
            h("svg:title", {}, `${p.skipped.toLocaleString("en-US")} passes like the ones before left out`)));
          run = [];
        }
        run.push(xy);
      });
      flush();
      svg.append(g);
    }
    const px = left + (peak.points.length > 1 ? (peak.peak_index / (peak.points.length - 1)) * plot : 0);
    const py = y(peak.peak_bytes);
    // Above the dot, unless the capacity's label sits there: then below it.
    const capY = tl.capacity_bytes ? y(tl.capacity_bytes) - 4 : null;
    const above = Math.max(12, py - 8);
    const ly = capY !== null && Math.abs(above - capY) < 14 ? py + 17 : above;
    svg.append(h("svg:circle", { cx: px.toFixed(1), cy: py.toFixed(1), r: 4, class: "mme-tl-peak-dot" }),
      h("svg:text", { x: px > left + plot * 0.6 ? px - 6 : px + 6, y: ly,
                      "text-anchor": px > left + plot * 0.6 ? "end" : "start", class: "mme-text mme-tl-peak-label" },
        `Peak: stage ${tl.peak_stage}, ${tl.peak_label} allocated`));
    if (tl.capacity_bytes) {
      const cy = y(tl.capacity_bytes);
      svg.append(h("svg:line", { x1: left, x2: W - right, y1: cy, y2: cy, class: "mme-cap" }),
        h("svg:text", { x: W - right, y: cy - 4, "text-anchor": "end", class: "mme-text mme-tick mme-capacity-label" },
          tl.capacity_label));
    }
    const rows = tl.stages.map((s) => h("tr", { "data-stage": s.stage, class: s.stage === tl.peak_stage ? "mme-tl-peak-row" : null },
      h("th", { scope: "row" }, String(s.stage)), h("td", {}, s.base_label), h("td", { "data-col": "peak" }, s.peak_label),
      h("td", { class: "mme-layers" }, s.peak_point)));
    // What each line means, in a legend drawn with the chart's own strokes (timeline.css).
    const key = (cls, label) => h("li", {}, h("svg:svg", { width: 28, height: 10, viewBox: "0 0 28 10", class: "mme-svg mme-tl-key",
                                                           "aria-hidden": "true" },
      cls === "cap" ? h("svg:line", { x1: 0, x2: 28, y1: 5, y2: 5, class: "mme-cap" })
        : h("svg:g", { class: `mme-tl-stage${cls === "peak" ? " mme-tl-peak" : ""}` },
          h("svg:line", { x1: 0, x2: 28, y1: 5, y2: 5, class: cls === "gap" ? "mme-tl-gap" : "mme-tl-line" }))), label);
    const legend = h("ul", { class: "mme-legend mme-tl-legend", "aria-label": "Legend" },
      key("peak", `peak stage (${tl.peak_stage})`), tl.stages.length > 1 ? key("other", "other stages") : null,
      key("gap", "repeated cycles left out"), tl.capacity_bytes ? key("cap", "GPU capacity") : null);
    return h("figure", { class: "mme-figure mme-timeline-figure" }, h("p", { class: "mme-tl-lead" }, tl.lead), svg, legend,
      h("figcaption", {}, `Memory allocated by PyTorch over one step (${tl.schedule}); the highlighted line is the ` +
        "peak stage; dashed: repeated cycles left out, or the GPU's capacity (which the allocator's reserve, the CUDA " +
        "context and NCCL buffers also take from). A backward pass adds the stage's working set. " +
        `Drawn: ${tl.resolution}.`),
      h("details", { class: "mme-timeline-table" }, h("summary", {}, "The timeline as a table"),
        h("div", { class: "mme-table-wrap" }, h("table", { class: "mme-tl-table" },
          h("caption", {}, `Each stage's start and peak, in ${tl.unit}`),
          h("thead", {}, h("tr", {}, ["Stage", "Start", "Peak", "Peak at"].map((t) => h("th", { scope: "col" }, t)))),
          h("tbody", {}, rows)))));
  }

  function breakdown(bd, stage, onStage) {
    const st = bd.stages.find((s) => s.stage === stage) || bd.stages[0];
    const box = h("section", { class: "mme-breakdown", "aria-label": "What is in the peak", "data-stage": st.stage,
                               "data-total": st.total });
    const pick = bd.stages.length > 1 ? h("select", { "aria-label": "Pipeline stage", class: "mme-breakdown-stage",
                                                      onchange: (ev) => onStage(Number(ev.target.value)) },
      bd.stages.map((s) => h("option", { value: s.stage, selected: s.stage === st.stage || null },
        `stage ${s.stage}${s.stage === bd.peak_stage ? " (peak)" : ""}`))) : null;
    box.append(h("h3", {}, "What is in the peak of ", pick || `stage ${st.stage}`, `: ${st.total} GiB allocated`));
    let at = 0;
    const bar = h("div", { class: "mme-bd-bar", role: "presentation" });
    for (const row of st.rows) {
      const seg = h("span", { class: `mme-bd-seg mme-bd-${row.group.replace(" ", "-")}`, title: `${row.label}: ${row.gib} GiB (${row.pct})` });
      seg.style.width = `${(row.share * 100).toFixed(3)}%`;
      at += row.share;
      bar.append(seg);
    }
    box.append(bar, h("div", { class: "mme-table-wrap" }, h("table", { class: "mme-bd-table" },
      h("caption", {}, `Stage ${st.stage} at its peak, by module, in ${bd.unit}; largest first`),
      h("thead", {}, h("tr", {}, ["Part", "GiB", "Share", ""].map((t, i) => h("th", { scope: "col", class: i ? null : "mme-layers" }, t)))),
      h("tbody", {}, st.rows.map((row) => {
        const fill = h("span", { class: `mme-bd-fill mme-bd-${row.group.replace(" ", "-")}` });
        fill.style.width = `${(row.share * 100).toFixed(2)}%`;
        return h("tr", { "data-key": row.key, "data-bytes": row.bytes },
          h("td", { class: "mme-layers" }, row.label), h("td", { "data-col": "gib" }, row.gib), h("td", {}, row.pct),
          h("td", { class: "mme-bd-cell", "aria-hidden": "true" }, fill));
      })),
      h("tfoot", {}, h("tr", {}, h("th", { scope: "row", class: "mme-layers" }, "Total (allocated)"), h("td", { "data-col": "total" }, st.total),
        h("td", {}, "100 %"), h("td", {}))))));
    return box;
  }

  function draw(calc) {
    const t = calc.timeline, box = calc.timelineBox;
    if (!t || !box) return;
    const t0 = performance.now();
    const width = calc.width || box.clientWidth;     // the results' width, kept by the calculator
    if (t.errors) {
      box.replaceChildren();
      return;
    }
    if (calc.bdStage === undefined || !t.breakdown.stages.some((s) => s.stage === calc.bdStage)) calc.bdStage = t.breakdown.peak_stage;
    box.replaceChildren(h("h3", {}, "Memory over one training step"), chart(t.timeline, width),
      breakdown(t.breakdown, calc.bdStage, (s) => { calc.bdStage = s; draw(calc); }));
    box.dataset.width = width;
    const ms = performance.now() - t0;
    box.dispatchEvent(new CustomEvent("timeline:done", { bubbles: true, detail: { ms } }));
  }

  function boxOf(calc) {               // below the results, outside them: their tables stay the stage table's
    if (!calc.timelineBox) {
      const box = calc.timelineBox = h("section", { class: "mme-timeline-box", "aria-label": "Memory over one training step" });
      const clear = () => { calc.timeline = null; box.replaceChildren(); box.dataset.state = "none"; };
      calc.results.addEventListener("estimate:error", clear);
      calc.results.addEventListener("estimate:failed", clear);
    }
    if (!calc.timelineBox.isConnected) calc.results.after(calc.timelineBox);
    return calc.timelineBox;
  }

  function update(calc, res, source) {
    const box = boxOf(calc);
    if (source !== "python" || !res.view) {
      calc.timeline = null;
      box.replaceChildren();
      box.dataset.state = "none";
      return;
    }
    const asked = JSON.stringify(calc.state);
    if (box.dataset.state !== "pending") box.dataset.state = "pending";    // (set again, it costs a style recalculation)
    clearTimeout(calc.timelineTimer);
    calc.timelineDue = true;             // (calculator.js quiet())
    // Asked for once the form rests, so that a run of edits never waits behind it in the worker.
    calc.timelineTimer = setTimeout(() => {
      calc.timelineDue = false;
      if (JSON.stringify(calc.state) !== asked || calc.busy || calc.dirty) return;   // a newer answer asks again
      calc.engine.call({ op: "timeline", state: calc.state }).then((t) => {
        if (JSON.stringify(calc.state) !== asked) return;   // the form changed meanwhile: the next answer draws
        calc.timeline = t;
        calc.bdStage = undefined;
        draw(calc);
        box.dataset.state = t.errors ? "error" : "done";
      }, () => { box.dataset.state = "error"; });
    }, REST_MS);
  }

  function redraw(calc) {
    const box = calc.timelineBox;
    if (!box || !calc.timeline) return;
    const width = calc.width || box.clientWidth;
    if (String(width) === box.dataset.width) return;
    draw(calc);
  }

  window.mmeTimeline = { chart, breakdown, update, redraw, draw };
})();
