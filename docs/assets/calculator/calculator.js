/* The in-page calculator: quick controls and a form generated from the configuration schema, results from
 * the estimator package itself, running in Python (Pyodide) in a Web Worker (engine.js, worker.js); the
 * form is built by form.js, the results drawn by render.js, the "Make it fit" list by suggest.js, the sweeps
 * by sweep.js, the layout search's options by search_options.js, the pinned configurations by compare.js.
 *
 * The page's root element ([data-mme-calculator], written by hooks/runtime.py) holds the boot data as JSON
 * in data-mme-boot: the schema with labels, the quick controls, the presets each with its estimate computed
 * at build time, the GPUs and the verdict vocabulary (estimator.web.boot_data). This file reads the form,
 * sends the state to Python and renders what Python returns (render.js); it does no arithmetic and holds no
 * rule: valid values and fixes come from Python (estimator.plan.advice). The results element carries the
 * estimate shown in data-estimate (Estimate.to_dict() as JSON, Python results only), data-state
 * (precomputed | waiting | pending | done | error | failed) and fires "estimate:done", "estimate:error" or
 * "estimate:failed" after each answer. The whole state lives in the URL (?preset=NAME alone opens a
 * preset, ?hf=ID alone a model of the catalog); discrete changes push a history entry, so Back undoes them. Such a
 * link to a catalog model shows, until Python answers, the numbers the build computed for it (loadShortLink: one
 * small file per id under hf/, hooks/runtime.py), as a preset link shows its preset's.
 * Opened from disk (file://, the offline zip) every link is a full page load that starts Python again: the tab keeps
 * the last state and its numbers (sessionStorage), and the calculator opened again in that tab without a query string
 * (its link in the navigation) shows them at once, marked as restored, until Python has recomputed them.
 * The first box, Model, takes a preset name or a Hugging Face id of the offline catalog, with completion (a native
 * datalist of boot.models); Python resolves it (the "model" request, estimator/web/models.py). Idempotent init on
 * Material's document$.
 */
(function () {
  "use strict";
  if (window.mmeCalculatorLoaded) return;  // loaded right after the calculator and again at the page's end
  window.mmeCalculatorLoaded = true;
  const ASSETS = new URL(".", (document.currentScript && document.currentScript.src) || location.href).href;
  const R = window.mmeRender, h = R.h;
  const ERROR_DELAY_MS = 600;           // an error waits this long after the last keystroke in its field
  const PENDING_DELAY_MS = 250;         // "Updating…" only for an answer slower than this
  const URL_PAUSE_MS = 400;             // typing in a field updates the address bar once it pauses this long
  const here = () => location.pathname + location.search + location.hash;
  const show = (v) => (v === null || v === undefined ? "" : Array.isArray(v) ? v.join(", ") : String(v));
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  const clone = (o) => JSON.parse(JSON.stringify(o));
  // file:// only (served, Material's instant navigation keeps the page and Python): the last answer of this tab.
  const SAVED = "mme-calculator-last";
  const saved = {
    get() {
      try { return location.protocol === "file:" ? JSON.parse(sessionStorage.getItem(SAVED) || "null") : null; }
      catch (e) { return null; }
    },
    put(v) {
      if (location.protocol !== "file:") return;
      try { sessionStorage.setItem(SAVED, JSON.stringify(v)); } catch (e) { /* storage off or full */ }
    },
  };

  class Calculator {
    constructor(root, boot) {
      this.root = root;
      this.boot = boot;
      this.path = location.pathname;       // the page's own address (instant navigation may leave it)
      this.specs = new Map();
      for (const sec of boot.schema) for (const f of sec.fields) this.specs.set(f.path, f);
      this.presets = new Map(boot.presets.map((p) => [p.name, p]));
      this.inputs = new Map();
      this.quick = new Map();
      this.choices = {};
      const last = location.search ? null : saved.get();         // back from another page of the offline copy
      if (last && last.query) history.replaceState(history.state, "", location.pathname + last.query + location.hash);
      this.state = this.readURL();
      this.build();
      this.engine = window.mmeEngine.start(boot.runtime, ASSETS, { deferred: true });
      this.engine.listeners.add(this.onEngine = () => this.status());
      const pre = this.precomputed();
      if (pre) this.usePrecomputed(pre);
      else if (last && last.view && last.query === location.search) this.useRestored(last);
      this.fill();
      this.status();
      if (this.shortLink) {                  // form.js: ?hf=ID, resolved as the Model box resolves a name
        this.setResultState(this.engine.ready ? "pending" : "waiting");
        this.pickModel(this.state.hf, "replace");
        if (!this.engine.ready) this.loadShortLink(this.state.hf);
      } else this.compute(null);
      // Python is launched once the first numbers have been drawn (the task after the first frame), so that
      // it does not delay them. Without frames (a hidden tab), soon.
      const later = () => {
        if (this.later) return;
        this.later = true;
        this.engine.launch();
        this.buildFormSoon();
      };
      this.formFrame = requestAnimationFrame(() => setTimeout(later, 0));
      this.laterTimer = setTimeout(later, 1000);
      this.listen();
    }

    // The full form (some eighty fields, about 700 elements) is built once Python's first answer is drawn (or
    // Python failed), or at once when the page is scrolled towards it. Built before, it and Chromium's scan of
    // the page's form fields at DOMContentLoaded (a forced layout per field) took 0.2 to 0.4 s of main-thread
    // CPU from Python's start on a two-core laptop.
    buildFormSoon() {
      const answers = ["estimate:done", "estimate:error", "estimate:failed"];
      const now = () => {
        this.engine.listeners.delete(this.onStarted);
        window.removeEventListener("scroll", now);
        for (const type of answers) this.results.removeEventListener(type, idle);
        clearTimeout(this.formTimer);
        this.buildForm();
      };
      const idle = () => {
        this.formTimer = setTimeout(() => (window.requestIdleCallback || setTimeout)(now, { timeout: 500 }), 0);
      };
      // Python may have answered already (instant navigation back to this page, Python running)
      if (["done", "error", "failed"].includes(this.results.dataset.state)) return idle();
      for (const type of answers) this.results.addEventListener(type, idle, { once: true });
      this.onStarted = (e) => { if (e.failed) now(); };
      this.engine.listeners.add(this.onStarted);
      window.addEventListener("scroll", this.onScroll = now, { once: true, passive: true });
      this.onStarted(this.engine);
    }

    buildForm() {
      if (!this.root.isConnected || this.form.firstChild) return;
      this.form.append(...this.boot.schema.map((sec) => this.section(sec)),
        this.importPanel());
      this.fill();                            // not over a quick control the user is typing in
      this.hiddenKey = null;                  // the new fields too
      this.hide(this.hidden || []);
      if (this.notes) this.showErrors(this.notes);
    }

    listen() {
      // A link to a field (an error's, a note's): scroll to it here. Left to the browser, the hash change makes
      // Material's instant navigation fetch the page again and rebuild the calculator under the reader.
      this.root.addEventListener("click", (e) => {
        const a = e.target.closest && e.target.closest('a[href*="#mme-"]');   // Material makes it absolute
        if (!a || a.pathname !== location.pathname || !a.hash.startsWith("#mme-")) return;
        if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
        this.buildForm();
        const el = document.getElementById(decodeURIComponent(a.hash.slice(1)));
        if (!el) return;
        e.preventDefault();
        e.stopPropagation();
        for (let d = el.closest("details"); d; d = d.parentElement && d.parentElement.closest("details")) d.open = true;
        el.scrollIntoView({ block: "start" });
        if (typeof el.focus === "function") el.focus({ preventScroll: true });
      });
      window.addEventListener("popstate", this.onPop = () => {
        clearTimeout(this.urlTimer);         // Back or Forward: the entry left keeps what it had
        this.pendingURL = null;
        // Only the hash moved (a link to a field, an error's link): the configuration is the one shown, and
        // recomputing it would redraw the results and shift the field the browser just scrolled to.
        if (new URL(this.url(), location.href).search === location.search) return;
        this.setState(this.readURL(), "none");
      });
      // The charts' width, from the layout as it is done for each frame: reading it while rendering
      // (clientWidth) would force a layout of the whole page on every change.
      this.resize = new ResizeObserver((entries) => {
        const width = Math.floor(entries[entries.length - 1].contentRect.width);
        if (!width || width === this.width) return;
        this.width = width;
        this.redrawChart();
      });
      this.resize.observe(this.results);
    }

    /* ---- state and URL */
    base() {                                // the preset's configuration, with the catalog model's section
      const p = this.presets.get(this.state.preset), config = { ...((p && p.config) || {}) };
      if (this.state.hf) {                  // known once Python has answered for this id (compute's hf_model)
        config.model = this.hfModel && this.hfModel.hf === this.state.hf ? this.hfModel.model : {};
      }
      return config;
    }

    presetValue(path) {
      const [sec, name] = path.split(".");
      const s = this.base()[sec];
      return s && name in s ? s[name] : undefined;
    }

    merged() {                              // what the form shows: the preset's fields, then the user's
      const out = {};
      for (const [sec, fields] of Object.entries(this.base())) {
        for (const [name, v] of Object.entries(fields || {})) out[`${sec}.${name}`] = v;
      }
      return Object.assign(out, this.state.values);
    }

    precomputed() {                         // the build-time result of this state, if it has one
      const s = this.state, p = this.presets.get(s.preset);
      const bare = !Object.keys(s.values).length && s.gpu === this.boot.default.state.gpu && !s.hf;
      return p && bare && p.precomputed && p.precomputed.view ? p.precomputed : null;
    }

    readURL() {
      const q = new URLSearchParams(location.search);
      const state = { ...clone(this.boot.default.state), values: {} };
      for (const [k, v] of q) if (k.includes(".")) state.values[k] = v;     // unknown fields get Python's error
      if (q.has("hf") && q.get("hf").trim()) state.hf = q.get("hf").trim();
      if (q.has("preset")) state.preset = q.get("preset") === "none" ? null : q.get("preset");
      else if (Object.keys(state.values).length) state.preset = null;
      // ?hf=ID without a preset or values: a short link, resolved by Python as the Model box resolves a name
      // (the default preset's layout, or the catalog's default layout where that one does not work for the model)
      this.shortLink = Boolean(state.hf) && !q.has("preset") && !Object.keys(state.values).length;
      if (q.has("gpu")) state.gpu = q.get("gpu") === "none" ? null : q.get("gpu");
      if (q.has("gpu_gib")) state.gpu_gib = q.get("gpu_gib");
      return state;
    }

    url() {
      const q = new URLSearchParams(), s = this.state, d = this.boot.default.state;
      if (s.hf) q.set("hf", s.hf);               // a catalog model: ?hf=ID, with the preset only where it differs
      if (s.preset !== d.preset || s.gpu !== d.gpu || Object.keys(s.values).length || s.hf) {
        if (!s.hf || s.preset !== d.preset || Object.keys(s.values).length) q.set("preset", s.preset || "none");
        if (s.gpu !== d.gpu) q.set("gpu", s.gpu || "none");
        if (s.gpu === "custom" && s.gpu_gib !== undefined) q.set("gpu_gib", s.gpu_gib);
        for (const [k, v] of Object.entries(s.values)) q.set(k, v === null ? "null" : show(v));
      }
      this.pinsToURL(q);                     // compare.js: the pinned configurations
      const query = q.toString().replace(/%2F/g, "/");     // ?hf=Qwen/Qwen3-8B, as the id is written
      return location.pathname + (query ? `?${query}` : "") + location.hash;
    }

    // The address bar follows the form: "push" (a discrete change: Back undoes it), "replace" (typing: once it
    // pauses) or "none". Called after the request has gone to Python: Chromium takes 2 to 14 ms to update a
    // history entry, which was on the path of every edit.
    writeURL(history_) {
      if (history_ === "none") return;
      const url = this.url();
      if (history_ === "replace") {
        clearTimeout(this.urlTimer);
        this.pendingURL = url;
        this.urlTimer = setTimeout(() => this.flushURL(), URL_PAUSE_MS);
        return;
      }
      this.flushURL();                        // the typing before, into its own entry
      if (url !== here()) history.pushState(null, "", url);
    }

    flushURL() {                              // a pending "replace", now (not once the page has changed)
      clearTimeout(this.urlTimer);
      const url = this.pendingURL;
      this.pendingURL = null;
      if (url && url !== here() && location.pathname === this.path) history.replaceState(history.state, "", url);
    }

    setState(state, history_ = "push", changed = null) {
      this.state = { preset: state.preset || null, values: state.values || {}, gpu: state.gpu || null };
      if (state.hf) this.state.hf = state.hf;
      if (state.gpu_gib !== undefined) this.state.gpu_gib = state.gpu_gib;
      const pre = !this.engine.ready && this.precomputed();
      if (pre) this.usePrecomputed(pre);
      this.fill(true);
      this.compute(changed);
      this.writeURL(history_);
    }

    setValue(path, value, history_, changed = path) {   // one field (or a companion set) changed by the user
      // Cleared, or back to what the preset says (or, for a value Python chose, to the default the preset
      // leaves in place): no longer a change of the user's.
      const base = this.presetValue(path), spec = this.specs.get(path);
      // (a preset's own value typed again, "32768" for 32768, is no change either)
      const unset = value === "" || (base !== undefined && (same(base, value)
          || (typeof value === "string" && base !== null && typeof base !== "object" && show(base) === value.trim())))
        || (base === undefined && typeof value !== "string" && spec && same(spec.default, value));
      if (unset) delete this.state.values[path]; else this.state.values[path] = value;
      if (history_) {
        this.compute(changed);
        this.writeURL(history_);
      }
    }

    apply(set, changed) {                    // several fields at once (a fix, a quick control's companions)
      for (const [path, value] of Object.entries(set)) this.setValue(path, value, null);
      this.fill(true);
      this.compute(changed || Object.keys(set)[0]);
      this.writeURL("push");
    }

    /* ---- building the page */
    build() {
      const b = this.boot;
      this.statusText = h("span", { class: "mme-status-text" });
      this.progress = h("progress", { max: "1", value: "0", "aria-label": "Python start-up" });
      this.preset = this.modelBox();                          // form.js: a preset name or a Hugging Face id
      this.gpu = h("select", { id: "mme-gpu", onchange: () => {
        this.state.gpu = this.gpu.value || null;
        this.gpuGib.hidden = this.state.gpu !== "custom";
        if (this.state.gpu === "custom" && this.state.gpu_gib === undefined) this.state.gpu_gib = "80";
        this.fill();
        this.compute("gpu");
        this.writeURL("push");
      } }, h("option", { value: "" }, "No GPU (no verdict)"),
        b.gpus.map((g) => h("option", { value: g.name }, `${g.name} (${g.memory})`)),
        h("option", { value: "custom" }, "Other: memory in GiB"));
      this.gpuGib = h("input", { id: "mme-gpu_gib", type: "text", inputmode: "decimal", size: "5", hidden: true,
                                 "aria-label": "GPU memory in GiB", oninput: () => {
                                   this.state.gpu_gib = this.gpuGib.value;
                                   this.compute("gpu_gib");
                                   this.writeURL("replace");
                                 } });
      this.confirm = h("div", { class: "mme-confirm", role: "alert", hidden: true });
      this.searchButton = h("button", { type: "button", class: "md-button md-button--primary mme-find",
                                        onclick: () => this.search() }, "Find layouts that fit");
      this.summary = h("p", { class: "mme-sticky", role: "status", "aria-live": "polite", "aria-atomic": "true" });
      this.results = h("section", { class: "mme-results", id: "mme-results", tabindex: "-1", "aria-label": "Estimate" });
      // What a search, a pin or an applied suggestion brought, said to screen readers as focus moves to it.
      this.announcer = h("p", { class: "mme-sr", role: "status", "aria-live": "polite", "aria-atomic": "true" });
      this.layoutsBox = h("div", { class: "mme-layouts-box" });
      this.root.append(
        h("div", { class: "mme-status" }, this.progress, " ", this.statusText), this.announcer,
        h("div", { class: "mme-toolbar" },
          h("label", { for: "mme-preset" }, "Model"), this.preset, this.modelList,
          h("label", { for: "mme-gpu" }, "GPU"), this.gpu, this.gpuGib,
          h("button", { type: "button", class: "md-button mme-copy-link", onclick: (ev) => {
            this.flushURL();
            R.copy(location.href, ev.currentTarget);
          } }, "Copy link"),
          this.pinButton(), this.searchButton),
        this.modelErr, this.modelNote, this.searchOptionsPanel(), this.confirm,
        h("div", { class: "mme-quick", role: "group", "aria-label": "Main settings" }, b.quick.map((q) => this.quickControl(q))),
        this.companionBox = h("p", { class: "mme-companion", role: "status", hidden: true }),
        this.summary, this.results, this.layoutsBox, this.comparePanel(),
        h("h2", { class: "mme-all-title" }, "All settings"),
        h("p", { class: "mme-doc" }, "Every field of the configuration file, by section. Clearing a field goes back " +
          "to the preset's value. The configuration reference explains each one."),
        this.form = h("form", { class: "mme-form", novalidate: true, onsubmit: (ev) => ev.preventDefault() }));
    }

    edit(path, raw, input) {                  // typing or choosing in a field
      if (this.companionBox && !this.companionBox.hidden) { this.companionBox.hidden = true; this.companionBox.replaceChildren(); }
      const typed = input.tagName !== "SELECT";
      this.via = input.closest(".mme-quick") ? "quick" : "form";      // where its error is to be shown
      if (typed) this.typing = { path, at: performance.now() };
      // A choice, or the first keystroke in a field, is a history entry of its own; more typing replaces it.
      const mode = !typed || this.editing !== path ? "push" : "replace";
      this.editing = typed ? path : null;
      this.setValue(path, raw, mode);
    }

    choosePreset(name) {
      const n = Object.keys(this.state.values).length;
      if (!n || name === null) {
        this.confirm.hidden = true;
        return this.setState({ preset: name, values: name ? {} : this.merged(), gpu: this.state.gpu,
                               gpu_gib: this.state.gpu_gib }, "push", "preset");
      }
      this.preset.value = this.modelText();                  // nothing is dropped until the user says so
      // (an unknown name, e.g. an option a script added, is named as it is; Python refuses it with the closest ones)
      const title = (this.presets.get(name) || { title: name }).title;
      const edits = Object.keys(this.state.values).map((p) => (this.specs.get(p) || { label: p }).label);
      this.confirm.replaceChildren(
        h("p", {}, `Switch to ${title}? Your ${n} change${n > 1 ? "s" : ""} (${edits.join(", ")}) will be dropped; ` +
          "Back brings them back."),
        h("button", { type: "button", class: "md-button md-button--primary", onclick: () => {
          this.confirm.hidden = true;
          this.setState({ preset: name, values: {}, gpu: this.state.gpu, gpu_gib: this.state.gpu_gib }, "push", "preset");
        } }, `Switch to ${title}`),
        h("button", { type: "button", class: "md-button", onclick: () => { this.confirm.hidden = true; } }, "Keep my changes"));
      this.confirm.hidden = false;
    }

    // Nothing on its way: no answer pending or held back (an error waits while its field is typed in), no request
    // to Python in flight or about to be sent (the advice, the timeline), no address-bar update waiting. What the
    // browser tests wait on after an action (tests/browser/_calc.py settle), instead of a fixed pause.
    quiet() {
      return !this.busy && !this.dirty && !this.errorHeld && !this.pendingURL && !this.adviceDue &&
        !this.timelineDue && !this.modelPending && !this.engine.calls.size;
    }

    /* ---- talking to Python */
    compute(changed) {
      this.dirty = true;
      if (changed !== undefined) this.changed = changed;
      this.setResultState(this.engine.ready ? "pending"
        : this.source === "precomputed" || this.source === "restored" ? "precomputed" : "waiting");
      if (this.busy) return;
      this.busy = true;
      const loop = () => {
        this.dirty = false;
        const t0 = performance.now();
        const req = { op: "compute", state: this.state, exports: Boolean(this.exportsOpen), changed: this.changed };
        this.engine.call(req).then((res) => {
          if (this.dirty) return loop();
          this.busy = false;
          this.render(res, "python", performance.now() - t0);
          // Asked once the new numbers are on the screen: on a small machine, Python working out the advice
          // while the browser draws that frame slows both.
          this.adviceDue = true;
          requestAnimationFrame(() => setTimeout(() => { this.adviceDue = false; if (!this.busy) this.advise(); }, 0));
        }, (err) => {
          this.busy = false;
          if (this.engine.failed) this.status(); else this.fail(err);
        });
      };
      loop();
    }

    advise() {
      const key = JSON.stringify(this.state);
      if (key === this.adviceKey) return;
      this.engine.call({ op: "advice", state: this.state }).then((res) => {
        if (JSON.stringify(this.state) !== key) return;
        this.adviceKey = key;
        this.choices = res.choices || {};
        this.steps = res.steps || {};
        this.hide(res.hidden || []);
        this.fill();
        this.showLevers(res.levers || []);
        this.keepForReturn();
      }, () => {});
    }

    fail(err) {
      const r = this.results;
      r.replaceChildren(h("div", { class: "mme-errors", role: "alert" }, h("p", {},
        `The estimate could not be updated: ${err.message}. The numbers are not shown because they would not ` +
        "match the form; python -m estimator estimate gives them on the command line.")));
      r.removeAttribute("data-estimate");
      this.summary.textContent = "No estimate: the request to Python failed.";
      this.setResultState("failed");
      r.dispatchEvent(new CustomEvent("estimate:failed", { bubbles: true, detail: { message: err.message } }));
    }

    setResultState(state) {
      const r = this.results;
      r.dataset.state = state;
      if (state !== "pending") {
        clearTimeout(this.pendingTimer);
        delete r.dataset.slow;
      }
      r.setAttribute("aria-busy", String(state === "pending" || state === "waiting"));
      if (state === "waiting") {
        this.source = null;
        r.removeAttribute("data-estimate");
        r.replaceChildren(h("p", { class: "mme-badge" }, "Waiting for Python to start in your browser…"));
        this.summary.textContent = "Waiting for Python to start…";
      } else if (state === "pending" && this.badge) {
        // Said only if the answer is slow: shown at once, the line would move the whole page twice for
        // every keystroke (the numbers dim after the same delay, calculator.css).
        clearTimeout(this.pendingTimer);
        this.pendingTimer = setTimeout(() => {
          if (r.dataset.state !== "pending" || !this.badge) return;
          r.dataset.slow = "";
          this.badge.hidden = false;
          this.badge.textContent = "Updating…";
        }, PENDING_DELAY_MS);
      } else if (state === "precomputed" && this.source === "precomputed" && this.badge && Object.keys(this.state.values).length) {
        this.badge.hidden = false;
        this.badge.textContent = "Your change is applied as soon as Python has started; until then these are the " +
          "preset's numbers, computed when this site was built.";
      }
      this.status();
    }

    status() {
      const e = this.engine;
      if (!e) return;
      // Set only where they change: called on every answer, and a value set again still costs a style recalculation.
      if (this.progress.value !== e.done) this.progress.value = e.done;
      this.progress.hidden = e.ready || Boolean(e.failed);
      const what = e.ready ? "Python stopped" : "Python could not start";
      const text = e.failed ? `${what}: ${e.failed}` : e.ready ? e.text : `${e.text}…`;
      if (this.statusText.textContent !== text) this.statusText.textContent = text;
      if (!e.failed || this.results.dataset.state === "failed") return;
      const note = `${what} in this browser (${e.failed}), so the form cannot update the numbers; ` +
        "python -m estimator estimate gives them on the command line.";
      if (this.source === "precomputed" && this.badge && this.precomputed()) {
        Object.assign(this.badge, { hidden: false, textContent: `Precomputed when this site was built. ${note}` });
      } else {
        this.results.replaceChildren(h("p", { class: "mme-badge", role: "alert" }, note));
        this.summary.textContent = "No estimate: Python is not running.";
      }
      this.results.dataset.state = "failed";
      this.results.removeAttribute("data-estimate");
      this.results.dispatchEvent(new CustomEvent("estimate:failed", { bubbles: true, detail: { message: e.failed } }));
    }

    /* ---- rendering */
    usePrecomputed(pre) {
      this.choices = pre.choices || {};
      this.hide(pre.hidden || []);
      this.render({ view: pre.view, search_key: pre.search_key }, "precomputed");
    }

    // A short link to a catalog model (?hf=ID): the build's first numbers for it (hooks/runtime.py, one file per id,
    // the Model box's answer and its estimate over the page's opening state), shown until Python's own answer to
    // the same request replaces them. Served, the JSON file is fetched; from file:// (the offline bundle), where
    // Chromium refuses fetch(), the same data comes as a classic script (self.MME_HF).
    loadShortLink(id) {
      const b = this.boot;
      if (!b.models.some((m) => m.kind === "hf" && m.name === id) || (b.hf_not_precomputed || []).includes(id)) return;
      const file = `${ASSETS}hf/${id.replace("/", "--")}`;
      const got = b.runtime.offline
        ? new Promise((resolve) => {
          const tag = document.createElement("script");
          tag.src = `${file}.js`;
          tag.onload = () => resolve((self.MME_HF || {})[id] || null);
          tag.onerror = () => resolve(null);
          document.head.append(tag);
        })
        : fetch(`${file}.json`).then((r) => (r.ok ? r.json() : null));
      got.then((pre) => {
        // Only while nothing else is shown: Python has not answered and the link is still the state.
        if (!pre || !pre.view || this.source || this.results.dataset.state !== "waiting" || this.state.hf !== id ||
            Object.keys(this.state.values).length || !this.root.isConnected) return;
        this.hfModel = { hf: id, model: pre.hf_model };
        this.modelMessage(null, pre.notes || []);
        this.usePrecomputed(pre);             // before the state: its values are the link's layout, not the user's edits
        this.state = clone(pre.state);
        this.fill(true);
      }, () => {});                           // no file: Python's answer comes as before
    }

    useRestored(last) {                      // file://: this tab's last numbers for this state, until Python answers
      this.choices = last.choices || {};
      this.hide(last.hidden || []);
      this.render({ view: last.view, search_key: last.search_key }, "restored");
    }

    keepForReturn() {                        // file://: the state shown and its numbers, for a return to the page
      if (location.protocol !== "file:" || this.source !== "python" || this.results.dataset.state !== "done") return;
      const key = JSON.stringify(this.state);
      saved.put({ query: new URL(this.url(), location.href).search, view: this.view, search_key: this.searchKey,
                  hidden: this.hidden || [], choices: this.adviceKey === key ? this.choices : null });
    }

    /* Where the preset comes from: a link to its model page (source, recipe, every layout), and, when the form
       holds its published recipe and that does not fit, Python's note saying so and why. */
    presetAbout(about) {
      const href = about && (this.boot.model_pages || {})[about.name];
      if (!about || (!href && !about.recipe_note)) return h("div", { class: "mme-about", hidden: true });
      return h("div", { class: "mme-about" },
        about.recipe_note ? h("p", { class: "mme-recipe-note", role: "note" }, about.recipe_note) : null,
        href ? h("p", { class: "mme-about-link" }, h("a", { href }, `About this preset: ${about.title}`),
          " (its source, the recipe it follows and the layouts that fit, on its model page)") : null);
    }

    render(res, source, ms) {
      const r = this.results;
      this.source = source;
      clearTimeout(this.errorTimer);
      this.errorHeld = false;
      if (res.hidden) this.hide(res.hidden);
      if (res.hf_model && this.state.hf && !same(this.hfModel, { hf: this.state.hf, model: res.hf_model })) {
        this.hfModel = { hf: this.state.hf, model: res.hf_model };     // the form's model fields: this model's
        this.fill(true);
      }
      if (res.errors) {
        const since = this.typing ? performance.now() - this.typing.at : Infinity;
        if (source === "python" && since < ERROR_DELAY_MS) {     // still typing: show it only if it stays
          this.errorTimer = setTimeout(() => this.render(res, source, ms), ERROR_DELAY_MS - since);
          this.errorHeld = true;              // (quiet() is false until it is shown or a newer answer replaces it)
          return;
        }
        if (source === "python" && this.state.hf && res.errors.some((e) => e.field === "hf")) {
          this.pickModel(this.state.hf, "none", true);       // the id's closest ones, as buttons under the box
        }
        return this.renderErrors(res, source);
      }
      const v = res.view;
      this.view = v;
      this.searchKey = res.search_key;
      if (source === "python" && document.activeElement !== this.preset) this.modelMessage(null);
      this.showErrors([]);
      this.summary.replaceChildren(h("strong", {}, v.headline));
      this.summary.dataset.verdict = v.verdict ? v.verdict.verdict : "";
      // The parts of the last answer are updated in place (render.js patch), or left alone when drawn from the same
      // data, rather than made anew: an answer usually changes a few numbers, and new elements cost the browser their
      // style, layout and paint on every change (DeepSeek-V3, batch-size changes, traced on two cores: main-thread time
      // per change 36 -> 25 ms, style 5.2 -> 1.1 ms, layout 4.4 -> 1.9 ms). Parts with listeners are kept only when
      // the new one is alike (isEqualNode: the same texts, so their listeners do the same).
      const last = this.parts || {};
      const prev = (name) => (last[name] && last[name].parentNode === r ? last[name] : null);
      const patched = (name, fresh) => (prev(name) ? R.patch(prev(name), fresh) : fresh);
      const alike = (name, fresh) => (prev(name) && prev(name).isEqualNode(fresh) ? prev(name) : fresh);
      const keys = {}, lastKeys = this.partKeys || {};
      const drawn = (name, data, make) => {            // left alone when drawn from the same data
        keys[name] = JSON.stringify(data);
        return prev(name) && lastKeys[name] === keys[name] ? prev(name) : patched(name, make());
      };
      const parts = this.parts = {
        badge: patched("badge", h("p", { class: "mme-badge", hidden: source === "python" }, source === "restored"
          ? "Restored from your last visit to this page in this tab; Python is starting in your browser and will recompute them."
          : "Precomputed when this site was built; Python is starting in your browser and will take over.")),
        summary: patched("summary", h("p", { class: "mme-summary" }, v.summary, " ", v.parameters, ".")),
        verdict: patched("verdict", R.verdict(v, this.boot.verdicts)),
        about: patched("about", this.presetAbout(v.preset)),
        parallel: patched("parallel", h("p", { class: "mme-parallel" }, v.parallel)),
        // What the typed values changed in fields left alone (TP 1 turns off the preset's sequence parallelism, ...):
        // the notes the CLI prints for the same flags (estimator.config.load.implied_changes).
        implied: patched("implied", h("p", { class: "mme-implied", role: "note", hidden: !(res.implied && res.implied.length) },
          (res.implied || []).map((n) => h("span", {}, `note: ${n}`)))),
        levers: alike("levers", h("div", { class: "mme-levers" })),        // suggest.js draws into it
        table: drawn("table", [v.unit, v.columns, v.rows, v.capacity_bytes !== null], () => R.table(v)),
        chart: prev("chart") || h("div", { class: "mme-chart-box" }),       // redrawChart draws into it
        sweeps: alike("sweeps", this.sweepPanel()),
        assumptions: patched("assumptions", h("details", { class: "mme-assumptions" },
          h("summary", {}, `Assumptions (${v.assumptions.length})`), h("ul", {}, v.assumptions.map((a) => h("li", {}, a))))),
        exports: alike("exports", R.exports(res.exports, Boolean(this.exportsOpen), (open) => {
          if (this.exportsOpen === open) return;
          this.exportsOpen = open;
          if (open) this.compute();
        })),
      };
      Object.assign(this, { partKeys: keys, badge: parts.badge, leversBox: parts.levers, tableWrap: parts.table, chartBox: parts.chart,
                            sweepBox: parts.sweeps });
      R.place(r, Object.values(parts));
      this.redrawChart(true);
      if (window.mmeTimeline) window.mmeTimeline.update(this, res, source);   // timeline.js: memory over a step
      this.makeItFit();                       // suggest.js
      this.refreshCompare();                  // compare.js
      if (res.estimate) r.dataset.estimate = JSON.stringify(res.estimate); else r.removeAttribute("data-estimate");
      r.dataset.source = source;
      this.setResultState(source === "python" ? "done" : "precomputed");
      this.showSearch();
      if (source === "python") this.keepForReturn();
      if (source === "python") this.revealApplied(v.headline);
      if (source === "python") {
        r.dispatchEvent(new CustomEvent("estimate:done", { bubbles: true, detail: { estimate: res.estimate, ms } }));
      }
    }

    renderErrors(res, source) {
      const r = this.results;
      const notes = res.notes || res.errors.map((e) => ({ field: e.field, messages: [e.message], fixes: [], hint: null }));
      const general = this.showErrors(notes);
      r.removeAttribute("data-estimate");
      r.replaceChildren(h("div", { class: "mme-errors", role: "alert" }, h("p", {}, "No estimate: the configuration is invalid."),
        h("ul", {}, notes.map((n) => h("li", {}, h("a", { href: n.field === "hf" ? "#mme-preset"
          : `#${this.quick.has(n.field) ? "mme-q-" : "mme-"}${n.field}` },
          n.field === "hf" ? "Model" : (this.specs.get(n.field) || { label: n.field }).label),
          this.specs.has(n.field) ? [" (", h("code", {}, n.field), ")"] : null, ": ", n.messages.join("; "),
          general.includes(n) ? this.noteBody({ ...n, messages: [] }) : null)))));
      this.summary.textContent = "No estimate: the configuration is invalid.";
      this.summary.dataset.verdict = "";
      r.dataset.source = source;
      this.setResultState("error");
      if (source === "python") this.revealApplied("No estimate: the configuration is invalid.");
      r.dispatchEvent(new CustomEvent("estimate:error", { bubbles: true, detail: { errors: res.errors, notes } }));
    }

    redrawChart(changed = false) {             // changed: a new answer (else only a new width)
      if (!this.view || !this.chartBox) return;
      const width = this.width;                  // null until the first layout: the observer draws then
      if (!width || (!changed && width === this.chartWidth && this.chartBox.firstChild)) return;
      this.chartWidth = width;
      const v = this.view, old = this.chartBox.firstElementChild;
      const key = JSON.stringify([width, v.bars, v.segments, v.ticks, v.scale_bytes, v.capacity_bytes, v.capacity_label]);
      if (!(old && this.chartBox.childNodes.length === 1 && this.chartKey === key)) {   // else drawn from the same data
        const chart = R.chart(v, width);
        if (old && this.chartBox.childNodes.length === 1) R.patch(old, chart); else this.chartBox.replaceChildren(chart);
        this.chartKey = key;
      }
      if (window.mmeTimeline) window.mmeTimeline.redraw(this);
    }

    /* ---- results where the eye is: after a search, a pin or an applied suggestion, the page scrolls to what
       it brought and moves focus there (said to screen readers); while it works, a badge beside the button. */
    working(button, text) {
      this.doneWorking();
      const badge = this.workingBadge = h("span", { class: "mme-working", role: "status" }, text);
      if (button && button.isConnected) button.after(badge);
      return badge;
    }

    doneWorking(badge = this.workingBadge) {
      if (!badge) return;
      badge.remove();
      if (this.workingBadge === badge) this.workingBadge = null;
    }

    // Scrolled with scrollIntoView (below the sticky bar: calculator.css gives every [id] a scroll margin), never
    // through the address bar's hash, which makes Material's instant navigation rebuild the page.
    showHere(el, message) {
      if (!el || !el.isConnected) return;
      if (!el.id) el.id = `mme-here-${(this.hereCount = (this.hereCount || 0) + 1)}`;
      if (!el.hasAttribute("tabindex")) el.setAttribute("tabindex", "-1");
      el.scrollIntoView({ block: "start" });
      el.focus({ preventScroll: true });
      this.announcer.textContent = message || "";
      this.root.dispatchEvent(new CustomEvent("mme:shown", { bubbles: true, detail: { id: el.id, message } }));
    }

    // A suggestion ("Make it fit", an error's "Try"): applied, then its estimate shown where the eye is.
    applyHere(set, changed, button, label) {
      this.pendingReveal = { label: label || "" };
      this.working(button, "Applying…");
      this.apply(set, changed);
    }

    revealApplied(headline) {
      const p = this.pendingReveal;
      if (!p || this.dirty) return;
      this.pendingReveal = null;
      this.doneWorking();
      this.showHere(this.results, `${p.label ? `Applied: ${p.label}. ` : "Applied. "}${headline}`);
    }

    /* ---- layout search */
    search() {
      const state = clone(this.state);
      const gpus = (this.opt && this.opt.gpus.value.trim()) || Number(this.merged()["training.world_size"]) || null;
      const t0 = performance.now();
      this.searchButton.disabled = true;
      this.layouts = { res: { pending: true, gpus, seconds: 0 } };
      const badge = this.working(this.searchButton, "Searching… 0 s");
      const tick = setInterval(() => {
        this.layouts.res.seconds = Math.round((performance.now() - t0) / 1000);
        badge.textContent = `Searching… ${this.layouts.res.seconds} s`;
        this.showSearch();
      }, 1000);
      this.showSearch();
      const done = (res) => {
        clearInterval(tick);
        this.searchButton.disabled = false;
        this.doneWorking(badge);
        this.layouts = { res, state, inUse: null };
        this.showSearch();
        const n = (res.layouts || []).length;
        this.showHere(this.layoutsBox.querySelector("h3") || this.layoutsBox, res.errors
          ? res.errors.map((e) => e.message).join(" ")
          : `${n ? `${n} layout${n > 1 ? "s" : ""} found` : "No layout found"}. ${res.summary || ""}`);
        this.layoutsBox.dispatchEvent(new CustomEvent("search:done", { bubbles: true }));
      };
      this.engine.call({ op: "search", state, top: 10, options: this.searchOptions() }).then(done,
        (err) => done({ errors: [{ field: "search", message: `The search failed: ${err.message}` }] }));
    }

    showSearch() {
      const l = this.layouts;
      if (!l) return this.layoutsBox.replaceChildren();
      const stale = Boolean(l.res.search_key && this.searchKey && l.res.search_key !== this.searchKey);
      const shown = this.searchShown;                 // the same results, as fresh and as used as drawn: kept
      if (shown && shown.res === l.res && shown.stale === stale && shown.inUse === l.inUse && !l.res.pending &&
          this.layoutsBox.firstChild) return;
      this.searchShown = { l, res: l.res, stale, inUse: l.inUse };
      const box = R.layouts(l.res, { stale, inUse: l.inUse, rerun: () => this.search(),
        use: (i) => this.engine.call({ op: "layout", state: this.state, config: l.res.layouts[i].config }).then((res) => {
          l.inUse = i;
          this.setState(res.state, "push", "layout");
        }, (err) => this.fail(err)) });
      // The same results, now stale or fresh again (an edit, then undone): the note comes or goes and the buttons
      // are disabled or enabled in place, instead of the whole table made anew on every edit. (Its buttons' listeners
      // act on the same results, `l`.)
      const old = this.layoutsBox.firstChild;
      if (shown && shown.l === l && shown.res === l.res && shown.inUse === l.inUse && !l.res.pending && old &&
          this.layoutsBox.childNodes.length === 1) R.patch(old, box);
      else this.layoutsBox.replaceChildren(box);
    }

    async importText(kind, text, box = `mme-import.${kind}`) {
      const err = document.getElementById(`${box}-err`), note = document.getElementById(`${box}-note`);
      err.hidden = true;
      note.textContent = "";
      if (!text.trim()) return;
      let res;
      try {
        res = await this.engine.call({ op: "import", state: this.state, kind, text });
      } catch (e) {
        res = { errors: [{ message: e.message }] };
      }
      if (res.errors) {
        err.textContent = res.errors.map((e) => e.message).join(" ");
        err.hidden = false;
        return;
      }
      note.textContent = (res.notes || []).join(" ");
      this.setState(res.state, "push", "import");
    }

    detach() {
      cancelAnimationFrame(this.formFrame);
      clearTimeout(this.formTimer);
      clearTimeout(this.laterTimer);
      this.engine.listeners.delete(this.onEngine);
      if (this.onStarted) this.engine.listeners.delete(this.onStarted);
      if (this.onScroll) window.removeEventListener("scroll", this.onScroll);
      window.removeEventListener("popstate", this.onPop);
      clearTimeout(this.urlTimer);           // the page has changed: a pending entry is not this page's any more
      this.resize.disconnect();
    }
  }

  const bootOf = (root) => root.mmeBoot || (root.mmeBoot = JSON.parse(root.dataset.mmeBoot));

  Object.assign(Calculator.prototype, window.mmeForm, window.mmeSuggest, window.mmeSweep, window.mmeSearchOptions,
    window.mmeCompare);

  function init() {
    const root = document.querySelector("[data-mme-calculator]");
    if (!root || root.dataset.mmeReady) return;
    root.dataset.mmeReady = "1";
    const boot = bootOf(root);
    if (window.mmeCalculator) window.mmeCalculator.detach();    // its page was navigated away from
    root.calculator = window.mmeCalculator = new Calculator(root, boot);
  }

  // "Skip to the Model box", the page's first link (hooks/runtime.py puts it beside Material's "Skip to content"):
  // keyboard users land in the Model box, focused, instead of tabbing through the header and the navigation.
  document.addEventListener("click", (e) => {
    const a = e.target.closest && e.target.closest("a.mme-skip");
    const c = window.mmeCalculator;
    if (!a || !c || !c.preset || !c.preset.isConnected) return;
    e.preventDefault();
    e.stopPropagation();                  // (Material's instant navigation would follow the hash and drop the focus)
    c.preset.scrollIntoView({ block: "center" });
    c.preset.focus({ preventScroll: true });
  }, true);

  const first = document.querySelector("[data-mme-calculator]");
  // Material's document$ fires on every (instant) navigation; the DOM event covers pages where it never
  // fires (file://, or without Material). init() is idempotent. Loaded right after the calculator's root,
  // this runs before Material: init now, and subscribe to document$ once Material has started.
  const subscribe = () => {
    if (window.document$ && typeof window.document$.subscribe === "function") window.document$.subscribe(init);
  };
  if (first) init();
  if (window.document$) subscribe();
  else document.addEventListener("DOMContentLoaded", () => { subscribe(); init(); });
  if (document.readyState !== "loading") init();
})();
