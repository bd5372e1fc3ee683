/* The in-page calculator: a form generated from the configuration schema, results from the estimator
 * package itself, running in Python (Pyodide) in a Web Worker (worker.js).
 *
 * The page's root element ([data-mme-calculator], written by hooks/runtime.py) holds the boot data as
 * JSON in data-mme-boot: the schema, the presets, the GPUs and the default preset's estimate computed
 * at build time. This file reads the form, sends the state to Python, and renders what Python returns; it does no
 * arithmetic on the numbers (drawing the bars is geometry). The results element carries the estimate
 * shown in data-estimate (Estimate.to_dict() as JSON), data-state (precomputed | waiting | pending | done
 * | error | failed) and fires "estimate:done" after each Python-computed result. The whole state lives
 * in the URL (?preset=NAME alone opens a preset). Idempotent init on Material's document$.
 */
(function () {
  "use strict";
  const ASSETS = new URL(".", (document.currentScript && document.currentScript.src) || location.href).href;
  const RUNTIME = new URL("runtime/", ASSETS).href;
  const SEGMENTS = { weights: "Weights", gradients: "Gradients", optimizer: "Optimizer states",
                     activations: "Activations", transient: "Transient buffers",
                     reserve: "Allocator reserve, CUDA context, buffers" };
  const KINDS = { hf: "Hugging Face config.json", megatron: "Megatron-LM launch arguments",
                  yaml: "Estimator configuration (YAML or JSON)" };
  let engine = null;

  function h(tag, attrs, ...children) {
    const el = tag.startsWith("svg:") ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
      : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith("on")) el.addEventListener(k.slice(2), v); else el.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) if (c !== null && c !== undefined) el.append(c);
    return el;
  }

  /* ------------------------------------------------------------------ Python, in a worker */

  function loadScript(src) {
    return new Promise((ok, fail) => {
      document.head.append(h("script", { src, onload: ok, onerror: () => fail(new Error(`cannot load ${src}`)) }));
    });
  }

  function startEngine(manifest) {
    if (engine) return engine;
    const e = engine = { ready: false, failed: null, text: "Starting Python", done: 0, listeners: new Set(),
                         calls: new Map(), next: 1, queue: [], port: null, created: performance.now() };
    const notify = () => e.listeners.forEach((fn) => fn(e));
    const receive = (msg) => {
      if (msg.type === "progress") Object.assign(e, { text: msg.text, done: msg.done });
      else if (msg.type === "ready") Object.assign(e, { ready: true, done: 1, boot: { ...msg, created: e.created, readyAt: performance.now() },
        text: `Python ready in ${msg.ms} ms${msg.snapshot ? " (from the build-time snapshot)" : ""}` });
      else if (msg.type === "fatal") e.failed = msg.message;
      else if (msg.type === "result") {
        const done = e.calls.get(msg.id);
        e.calls.delete(msg.id);
        e.pythonMs = msg.ms;                                  // time spent in Python, for the benchmark
        if (done) done(JSON.parse(msg.response));
        return;
      }
      notify();
    };
    const attach = (port) => {
      e.port = port;
      port.onmessage = (ev) => receive(ev.data);
      port.onerror = (ev) => { e.failed = ev.message || "the Python worker failed to start"; notify(); };
      e.queue.splice(0).forEach((m) => port.postMessage(m));
    };
    e.call = (request) => new Promise((resolve) => {
      const id = e.next++;
      e.calls.set(id, resolve);
      const msg = { type: "call", id, request: JSON.stringify(request) };
      if (e.port) e.port.postMessage(msg); else e.queue.push(msg);
    });
    const init = { type: "init", base: RUNTIME, manifest };
    if (location.protocol !== "file:") {
      e.mode = "module worker";
      attach(new Worker(ASSETS + "worker.js", { type: "module" }));
      e.port.postMessage(init);
      return e;
    }
    // file://: no fetch, no module worker. Classic scripts carry the files; the worker comes from a Blob.
    const scripts = [ASSETS + "worker.js", ...(manifest.offline || []).map((n) => RUNTIME + n)];
    Promise.all(scripts.map(loadScript)).then(() => {
      init.payload = window.MME_PAYLOAD;
      delete window.MME_PAYLOAD;
      const src = `(${window.mmeWorkerMain})(self);`;
      let port;
      try {
        port = new (window.MME_NATIVE_WORKER || window.Worker)(URL.createObjectURL(new Blob([src])));
        e.mode = "blob worker";
      } catch (err) {                                   // no worker at all: run Python on this thread
        e.mode = "main thread";
        const scope = { postMessage: (m) => setTimeout(() => receive(m)) };
        window.mmeWorkerMain(scope);
        port = { postMessage: (m) => scope.onmessage({ data: m }) };
      }
      e.queue.unshift(init);
      attach(port);
    }).catch((err) => { e.failed = String(err.message || err); notify(); });
    return e;
  }

  /* ------------------------------------------------------------------ the calculator */

  const show = (v) => (v === null || v === undefined ? "" : Array.isArray(v) ? v.join(", ") : String(v));
  const clone = (o) => JSON.parse(JSON.stringify(o));

  class Calculator {
    constructor(root, boot) {
      this.root = root;
      this.boot = boot;
      this.specs = new Map();
      this.byName = new Map();
      for (const sec of boot.schema) for (const f of sec.fields) { this.specs.set(f.path, f); this.byName.set(f.name, f.path); }
      this.presets = new Map(boot.presets.map((p) => [p.name, p]));
      this.inputs = new Map();
      this.state = this.readURL();
      this.build();
      this.fill();
      this.engine = startEngine(boot.runtime);
      this.engine.listeners.add(this.onEngine = () => this.status());
      this.status();
      if (this.isDefault() && boot.default.result) this.render(boot.default.result, "precomputed");
      this.compute();
    }

    /* ---- state and URL */
    isDefault() {
      const d = this.boot.default.state;
      return this.state.preset === d.preset && this.state.gpu === d.gpu && !Object.keys(this.state.values).length;
    }

    readURL() {
      const q = new URLSearchParams(location.search);
      const state = clone(this.boot.default.state);
      const values = {};
      for (const [k, v] of q) if (k.includes(".")) values[k] = v;     // unknown fields get Python's error
      if (q.has("preset")) state.preset = q.get("preset") === "none" ? null : q.get("preset");
      else if (Object.keys(values).length) state.preset = null;
      if (q.has("gpu")) state.gpu = q.get("gpu") === "none" ? null : q.get("gpu");
      state.values = values;
      return state;
    }

    writeURL() {
      const q = new URLSearchParams();
      if (!this.isDefault()) {
        q.set("preset", this.state.preset || "none");
        if (this.state.gpu !== this.boot.default.state.gpu) q.set("gpu", this.state.gpu || "none");
        for (const [k, v] of Object.entries(this.state.values)) q.set(k, v === null ? "null" : show(v));
      }
      const url = location.pathname + (q.toString() ? `?${q}` : "") + location.hash;
      history.replaceState(history.state, "", url);
    }

    setState(state) {
      this.state = { preset: state.preset || null, values: state.values || {}, gpu: state.gpu || null };
      this.fill();
      this.changed();
    }

    changed() {
      this.writeURL();
      this.compute();
    }

    /* ---- the form */
    build() {
      const r = this.root;
      this.statusText = h("span", { class: "mme-status-text" });
      this.progress = h("progress", { max: "1", value: "0", "aria-label": "Python start-up" });
      this.preset = h("select", { id: "mme-preset", onchange: () => this.setState({ preset: this.preset.value || null,
        values: this.preset.value ? {} : this.merged(), gpu: this.state.gpu }) },   // custom starts from the form
        h("option", { value: "" }, "Custom (no preset)"),
        [...this.presets.values()].map((p) => h("option", { value: p.name }, `${p.title} (${p.name})`)));
      this.gpu = h("select", { id: "mme-gpu", onchange: () => { this.state.gpu = this.gpu.value || null; this.changed(); } },
        h("option", { value: "" }, "No GPU (no fit verdict)"),
        this.boot.gpus.map((g) => h("option", { value: g.name }, `${g.name} (${g.memory})`)));
      this.results = h("section", { class: "mme-results", "aria-live": "polite", "aria-label": "Estimate" });
      const form = h("form", { class: "mme-form", novalidate: true, onsubmit: (ev) => ev.preventDefault() },
        this.boot.schema.map((sec) => this.section(sec)), this.importPanel());
      r.append(
        h("div", { class: "mme-status", role: "status" }, this.progress, " ", this.statusText),
        h("div", { class: "mme-controls" },
          h("label", { for: "mme-preset" }, "Preset"), this.preset,
          h("label", { for: "mme-gpu" }, "GPU"), this.gpu,
          h("button", { type: "button", class: "md-button", onclick: () => this.search() }, "Find layouts that fit")),
        h("div", { class: "mme-layout" }, form, this.results));
    }

    section(sec) {
      return h("details", { class: "mme-section", open: sec.name !== "precision" },
        h("summary", {}, sec.name), h("p", { class: "mme-doc" }, sec.doc),
        sec.fields.map((f) => this.field(f)));
    }

    field(f) {
      const id = `mme-${f.path}`;
      const placeholder = f.required ? "required" : f.default !== null ? `default: ${show(f.default)}`
        : f.derived ? `derived: ${f.derived}` : "not set";
      let input;
      if (f.type === "bool" || (f.type === "str" && f.choices)) {
        const choices = f.type === "bool" ? ["true", "false"] : f.choices;
        input = h("select", { id }, h("option", { value: "" }, placeholder), choices.map((c) => h("option", { value: c }, c)));
      } else {
        input = h("input", { id, type: "text", autocomplete: "off", spellcheck: "false", placeholder,
                             inputmode: f.type === "int" ? "numeric" : f.type === "float" ? "decimal" : null });
      }
      input.setAttribute("aria-describedby", `${id}-help ${id}-err`);
      const edit = () => { this.state.values[f.path] = input.value; this.changed(); };
      input.addEventListener(input.tagName === "SELECT" ? "change" : "input", edit);
      this.inputs.set(f.path, input);
      const help = [f.help, f.unit ? `Unit: ${f.unit}.` : "", f.flag ? `Megatron-LM: ${f.flag}.` : "",
                    f.choices && f.type === "str_list" ? `Allowed: ${f.choices.join(", ")}.` : ""].join(" ");
      return h("div", { class: "mme-field", "data-path": f.path },
        h("label", { for: id }, f.name, f.unit ? h("span", { class: "mme-unit" }, ` (${f.unit})`) : null),
        input, h("div", { class: "mme-help", id: `${id}-help` }, help),
        h("div", { class: "mme-err", id: `${id}-err`, hidden: true }));
    }

    importPanel() {
      return h("details", { class: "mme-section mme-import" }, h("summary", {}, "import"),
        h("p", { class: "mme-doc" }, "Paste (or drop a file on the box) and the form takes it over: a config.json " +
          "replaces the model section, Megatron arguments the fields they set, a configuration everything."),
        Object.entries(KINDS).map(([kind, label]) => {
          const id = `mme-import.${kind}`;
          const box = h("textarea", { id, rows: "4", spellcheck: "false", "aria-describedby": `${id}-err` });
          const apply = () => this.importText(kind, box.value);
          box.addEventListener("paste", () => setTimeout(apply));
          box.addEventListener("dragover", (ev) => ev.preventDefault());
          box.addEventListener("drop", (ev) => {
            const file = ev.dataTransfer && ev.dataTransfer.files[0];
            if (!file) return;
            ev.preventDefault();
            file.text().then((t) => { box.value = t; apply(); });
          });
          return h("div", { class: "mme-field" }, h("label", { for: id }, label), box,
            h("button", { type: "button", class: "md-button", onclick: apply }, "Apply"),
            h("div", { class: "mme-err", id: `${id}-err`, hidden: true }), h("div", { class: "mme-note", id: `${id}-note` }));
        }));
    }

    merged() {                              // what the form shows: the preset's fields, then the user's
      const preset = this.presets.get(this.state.preset);
      const out = {};
      for (const [sec, fields] of Object.entries((preset && preset.config) || {})) {
        for (const [name, v] of Object.entries(fields || {})) out[`${sec}.${name}`] = v;
      }
      return Object.assign(out, this.state.values);
    }

    fill() {
      const values = this.merged();
      this.preset.value = this.presets.has(this.state.preset) ? this.state.preset : "";
      this.gpu.value = this.state.gpu || "";
      for (const [path, input] of this.inputs) if (input !== document.activeElement) input.value = show(values[path]);
    }

    async importText(kind, text) {
      const err = document.getElementById(`mme-import.${kind}-err`), note = document.getElementById(`mme-import.${kind}-note`);
      err.hidden = true;
      note.textContent = "";
      if (!text.trim()) return;
      const res = await this.engine.call({ op: "import", state: this.state, kind, text });
      if (res.errors) {
        err.textContent = res.errors.map((e) => e.message).join(" ");
        err.hidden = false;
        return;
      }
      note.textContent = (res.notes || []).join(" ");
      this.setState(res.state);
    }

    async search() {
      this.layouts && this.layouts.remove();
      this.layouts = h("div", { class: "mme-layouts" }, h("p", {}, "Searching parallel layouts…"));
      this.results.append(this.layouts);
      const res = await this.engine.call({ op: "search", state: this.state, top: 10 });
      const box = this.layouts;
      box.replaceChildren(h("h3", {}, "Layouts that fit"));
      if (res.errors) return box.append(h("p", { class: "mme-err" }, res.errors.map((e) => e.message).join(" ")));
      box.append(h("p", {}, res.summary), h("ol", {}, res.layouts.map((lay) => h("li", {},
        h("strong", {}, lay.label), ` — peak ${lay.peak}, headroom ${lay.headroom}. `, h("span", { class: "mme-why" }, lay.why), " ",
        h("button", { type: "button", class: "md-button", onclick: async () => {
          this.setState((await this.engine.call({ op: "layout", state: this.state, config: lay.config })).state);
        } }, "Use this layout")))));
    }

    /* ---- computing */
    compute() {
      this.dirty = true;
      if (this.source !== "precomputed" || !this.isDefault()) this.setResultState(this.engine.ready ? "pending" : "waiting");
      if (this.busy) return;
      this.busy = true;
      const loop = () => {
        this.dirty = false;
        const t0 = performance.now();
        this.engine.call({ op: "compute", state: this.state, exports: Boolean(this.exportsOpen) }).then((res) => {
          if (this.dirty) return loop();
          this.busy = false;
          this.render(res, "python", performance.now() - t0);
        });
      };
      loop();
    }

    setResultState(state) {
      this.results.dataset.state = state;
      this.results.setAttribute("aria-busy", String(state === "pending" || state === "waiting"));
      if (state === "waiting") {
        this.source = null;
        this.results.removeAttribute("data-estimate");
        this.results.replaceChildren(h("p", { class: "mme-badge" }, "Waiting for Python to start in your browser…"));
      } else if (state === "pending") {
        this.badge && (this.badge.textContent = "Updating…");
      }
      this.status();
    }

    status() {
      const e = this.engine;
      if (!e) return;
      this.progress.value = e.done;
      this.progress.hidden = e.ready || Boolean(e.failed);
      this.statusText.textContent = e.failed ? `Python could not start: ${e.failed}` : e.ready ? e.text : `${e.text}…`;
      if (!e.failed || this.results.dataset.state === "failed") return;
      const note = "Python could not start in this browser, so the form cannot update the numbers; " +
        "python -m estimator estimate gives them on the command line.";
      if (this.source === "precomputed") Object.assign(this.badge, { hidden: false, textContent: `Precomputed when ` +
        `this site was built, for the default preset. ${note}` });
      else this.results.replaceChildren(h("p", { class: "mme-badge" }, note));
      this.results.dataset.state = "failed";
      this.results.removeAttribute("data-estimate");
    }

    showErrors(errors) {
      for (const el of this.root.querySelectorAll(".mme-form .mme-err")) { el.hidden = true; el.textContent = ""; }
      for (const input of this.inputs.values()) input.removeAttribute("aria-invalid");
      const general = [];
      for (const err of errors) {
        const paths = new Set(this.specs.has(err.field) ? [err.field] : []);
        for (const m of err.message.matchAll(/[a-z][a-z0-9_]+/g)) if (this.byName.has(m[0])) paths.add(this.byName.get(m[0]));
        if (!paths.size) general.push(err);
        for (const p of paths) {
          const el = document.getElementById(`mme-${p}-err`);
          el.append(h("div", {}, p === err.field ? err.message : `${err.field}: ${err.message}`));
          el.hidden = false;
          this.inputs.get(p).setAttribute("aria-invalid", "true");
        }
      }
      return general;
    }

    render(res, source, ms) {
      const r = this.results;
      this.source = source;
      const general = this.showErrors(res.errors || []);
      if (res.errors) {
        r.removeAttribute("data-estimate");
        r.replaceChildren(h("div", { class: "mme-errors", role: "alert" }, h("p", {}, "No estimate: the configuration is invalid."),
          h("ul", {}, res.errors.map((e) => h("li", {}, this.specs.has(e.field)
            ? h("a", { href: `#mme-${e.field}` }, h("code", {}, e.field)) : h("code", {}, e.field), " ", e.message)))));
        r.dataset.source = source;
        this.setResultState("error");
        r.dispatchEvent(new CustomEvent("estimate:error", { bubbles: true, detail: { errors: res.errors, general } }));
        return;
      }
      const v = res.view;
      this.badge = h("p", { class: "mme-badge", hidden: source !== "precomputed" },
        "Precomputed when this site was built; Python is starting in your browser and will take over.");
      r.replaceChildren(...[this.badge,
        h("p", { class: "mme-summary" }, v.summary, " ", v.parameters, "."),
        v.verdict ? h("p", { class: `mme-verdict ${v.verdict.fits ? "mme-fits" : "mme-nofit"}` }, v.verdict.text) : null,
        h("p", { class: "mme-parallel" }, v.parallel),
        this.table(v), this.chart(v),
        h("details", { class: "mme-assumptions" }, h("summary", {}, `Assumptions (${res.estimate.assumptions.length})`),
          h("ul", {}, res.estimate.assumptions.map((a) => h("li", {}, a)))),
        this.exports(res.exports), this.layouts].filter(Boolean));
      r.dataset.estimate = JSON.stringify(res.estimate);
      r.dataset.source = source;
      this.setResultState(source === "precomputed" ? "precomputed" : "done");
      if (source === "python") {
        r.dispatchEvent(new CustomEvent("estimate:done", { bubbles: true, detail: { estimate: res.estimate, ms } }));
      }
    }

    table(v) {
      const fit = v.capacity_bytes !== null;
      return h("div", { class: "mme-table-wrap" }, h("table", { class: "mme-table" },
        h("caption", {}, `Memory of one GPU of each pipeline stage, in ${v.unit}`),
        h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Stage"), h("th", { scope: "col" }, "Layers"),
          v.columns.map((c) => h("th", { scope: "col" }, c.label)), fit ? h("th", { scope: "col" }, "Fits") : null)),
        h("tbody", {}, v.rows.map((row) => h("tr", { class: row.peak ? "mme-peak" : null, "data-stage": row.stage },
          h("th", { scope: "row" }, String(row.stage), row.peak ? h("span", { class: "mme-peak-tag" }, " peak") : null),
          h("td", {}, row.layers, row.extras ? h("small", {}, h("br"), row.extras) : null),
          v.columns.map((c) => h("td", { "data-col": c.key }, row.cells[c.key])),
          fit ? h("td", {}, { fits: "yes", tight: "tight", no: "no" }[row.fits] || "") : null)))));
    }

    chart(v) {
      const W = 640, left = 64, right = 16, bar = 18, gap = 8, top = 8, width = W - left - right;
      const H = top + v.bars.length * (bar + gap) + 24;
      const x = (b) => (v.scale_bytes ? (b / v.scale_bytes) * width : 0);
      const svg = h("svg:svg", { viewBox: `0 0 ${W} ${H}`, class: "mme-chart", role: "img",
                                 "aria-label": "Stacked memory of each pipeline stage" });
      v.bars.forEach((b, i) => {
        const y = top + i * (bar + gap);
        let at = left;
        svg.append(h("svg:text", { x: left - 6, y: y + bar - 5, "text-anchor": "end" }, `Stage ${b.stage}`));
        for (const s of b.segments) {
          const w = x(s.bytes);
          svg.append(h("svg:rect", { x: at, y, width: Math.max(w, 0), height: bar, class: `mme-seg-${s.name}` },
            h("svg:title", {}, `Stage ${b.stage}: ${SEGMENTS[s.name]} ${s.gib} GiB`)));
          at += w;
        }
        svg.append(h("svg:text", { x: Math.min(at + 4, W - right), y: y + bar - 5, class: "mme-bar-label",
                                   "text-anchor": at + 70 > W ? "end" : "start" }, b.label));
      });
      if (v.capacity_bytes) {
        const cx = left + x(v.capacity_bytes);
        svg.append(h("svg:line", { x1: cx, x2: cx, y1: 0, y2: H - 18, class: "mme-capacity" }),
          h("svg:text", { x: cx, y: H - 4, "text-anchor": "end", class: "mme-capacity-label" }, "GPU memory"));
      }
      const legend = h("ul", { class: "mme-legend" }, Object.entries(SEGMENTS).map(([k, label]) =>
        h("li", {}, h("span", { class: `mme-swatch mme-seg-${k}` }), label)));
      return h("div", { class: "mme-figure" }, svg, legend);
    }

    exports(ex) {                           // filled only while open: Python writes them on request
      const items = [["yaml", "Copy YAML"], ["cli", "Copy CLI command"], ["megatron", "Copy Megatron arguments"]];
      const box = h("details", { class: "mme-exports", open: Boolean(this.exportsOpen) },
        h("summary", {}, "Configuration as YAML, CLI command, Megatron arguments"));
      box.addEventListener("toggle", () => {
        if (this.exportsOpen === box.open) return;
        this.exportsOpen = box.open;
        if (box.open) this.compute();
      });
      if (!ex) return box;
      box.append(...items.filter(([k]) => ex[k]).map(([k, label]) => {
          const pre = h("pre", { class: `mme-export-${k}` }, ex[k]);
          return h("div", {}, h("button", { type: "button", class: "md-button", "data-copy": k,
                                            onclick: (ev) => copy(ex[k], ev.currentTarget) }, label), pre);
        }));
      return box;
    }
  }

  function copy(text, button) {
    const done = () => { button.dataset.copied = "1"; button.setAttribute("aria-label", "Copied"); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, () => fallbackCopy(text) && done());
    } else if (fallbackCopy(text)) done();
  }

  function fallbackCopy(text) {
    const area = h("textarea", { readonly: true, class: "mme-offscreen" });
    area.value = text;
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }

  function init() {
    const root = document.querySelector("[data-mme-calculator]");
    if (!root || root.dataset.mmeReady) return;
    root.dataset.mmeReady = "1";
    const boot = JSON.parse(root.dataset.mmeBoot);
    startEngine(boot.runtime);               // first: Python boots while the form is built
    const previous = engine && engine.current;
    if (previous) engine.listeners.delete(previous.onEngine);     // its page was navigated away from
    root.calculator = engine.current = new Calculator(root, boot);
  }

  // Start Python now, before Material sets the page up: it is the slow part.
  const first = document.querySelector("[data-mme-calculator]");
  if (first) startEngine(JSON.parse(first.dataset.mmeBoot).runtime);
  // Material's document$ fires on every (instant) navigation; the DOM event covers pages where it never
  // fires (file://, or without Material). init() is idempotent.
  if (window.document$ && typeof window.document$.subscribe === "function") window.document$.subscribe(init);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
