/* The calculator's form: the Model box (a preset or a Hugging Face id of the catalog), the quick controls, the full
 * form generated from the schema (collapsed by section), the import panel, filling them from the state, hiding the fields that do not apply and showing each error
 * on its field with the fixes Python suggests. Methods of the Calculator (calculator.js), mixed in from
 * window.mmeForm; they read and write its state and call its edit(), apply() and importText().
 */
(function () {
  "use strict";
  if (window.mmeForm) return;             // loaded right after the calculator and again at the page's end
  const h = window.mmeRender.h;
  const show = (v) => (v === null || v === undefined ? "" : Array.isArray(v) ? v.join(", ") : String(v));
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  // A value as the link spells it ("2", "true", "null") is the option's value (2, true, null).
  const alike = (a, b) => same(a, b) || (typeof b === "string" && (b === "null" ? a === null : show(a) === b));

  window.mmeForm = {
    /* The Model box: a text box with a native datalist of every preset and catalog model (boot.models: name and
       label from Python, estimator/web/models.py), so the browser offers completion and screen readers announce
       it as a combobox. A name that is exactly one of the list is taken at once (a pick from the list, or typed
       out); anything else on Enter or when the box is left. Python resolves it ("model" request): a preset is
       switched to as before (asking before edits are dropped), a Hub id estimated with the form's layout, an
       unknown name answered with the page's message and its closest names as buttons. */
    modelBox() {
      this.modelList = h("datalist", { id: "mme-preset-list" },
        (this.boot.models || []).map((m) => h("option", { value: m.name, label: m.label })));
      this.modelNames = new Map((this.boot.models || []).map((m) => [m.name.toLowerCase(), m.name]));
      this.modelErr = h("div", { class: "mme-model-err", id: "mme-preset-err", role: "alert", hidden: true });
      this.modelNote = h("p", { class: "mme-model-note", id: "mme-preset-note", role: "status", hidden: true });
      const box = h("input", { id: "mme-preset", type: "text", list: "mme-preset-list", autocomplete: "off",
                               spellcheck: "false", autocapitalize: "off", enterkeyhint: "go",
                               placeholder: "preset or Hugging Face id, e.g. Qwen/Qwen3-30B-A3B",
                               "aria-describedby": "mme-preset-err mme-preset-note" });
      // Taken at once: a pick from the list, or a Hub id typed out in full (a preset's short name may be the start
      // of another's, so it waits for Enter).
      box.addEventListener("input", (ev) => {
        const v = box.value.trim(), picked = !ev.inputType || ev.inputType === "insertReplacementText";
        if (this.modelNames.has(v.toLowerCase()) && (picked || v.includes("/"))) this.commitModel(v);
      });
      box.addEventListener("focus", () => box.select());  // typing replaces the name, and the list shows all
      box.addEventListener("keydown", (ev) => {
        if (ev.key === "Enter") { ev.preventDefault(); this.commitModel(box.value); }
        else if (ev.key === "Escape" && box.value !== this.modelText()) { box.value = this.modelText(); this.modelMessage(null); }
      });
      box.addEventListener("change", () => this.commitModel(box.value));
      return box;
    },

    modelText() { return this.state.hf || this.state.preset || ""; },

    commitModel(text) {
      const name = String(text || "").trim();
      if (!name) { this.preset.value = this.modelText(); return; }       // emptied: the model stays
      if (name === this.modelText() || name === this.modelPending) return;
      if (name === this.modelFailed && !this.modelErr.hidden) return;    // its error is on the screen already
      const preset = [...this.presets.keys()].find((p) => p.toLowerCase() === name.toLowerCase());
      if (preset) { this.modelMessage(null, []); return this.choosePreset(preset); }
      this.pickModel(name, "push");
    },

    // Python's answer to a name: a preset (switched to), a catalog model (estimated), or an error with the closest
    // names. history_: "push" (the user's choice), "replace" (a short link ?hf=ID), "none" (only the error wanted).
    pickModel(name, history_, errorOnly = false) {
      this.modelPending = name;
      if (history_ === "replace") this.dirty = true;     // an estimate is on its way (each branch computes)
      const state = JSON.parse(JSON.stringify(this.state)), seq = (this.modelSeq = (this.modelSeq || 0) + 1);
      this.engine.call({ op: "model", state, name }).then((res) => {
        if (this.modelPending === name) this.modelPending = null;
        // A later name (Enter on a half-typed one, then its pick from the list) wins: this answer is dropped.
        if (seq !== this.modelSeq && history_ !== "replace") return;
        this.modelFailed = res.errors ? name : null;
        if (res.errors) {
          this.modelMessage(res, null);
          if (history_ === "replace") this.compute(null);   // a short link to an unknown id: its error in the results
          return;
        }
        if (errorOnly) return;
        if (res.preset) { this.modelMessage(null, []); return this.choosePreset(res.preset); }
        this.modelMessage(null, res.notes || []);
        this.setState(res.state, history_ === "replace" ? "replace" : "push", "model");
        if (history_ === "replace") this.flushURL();
      }, (err) => {
        if (this.modelPending === name) this.modelPending = null;
        this.modelMessage({ errors: [{ message: `The request failed: ${err.message}` }], closest: [] }, null);
        if (history_ === "replace") this.compute(null);
      });
    },

    // The box's error (res: {errors, closest}; null clears it) and its notes (a list; null leaves them).
    modelMessage(res, notes) {
      if (notes) {
        this.modelNote.replaceChildren(...notes.map((n) => h("span", {}, n, " ")));
        this.modelNote.hidden = !notes.length;
      }
      this.preset.toggleAttribute("aria-invalid", Boolean(res));
      if (!res) { this.modelErr.hidden = true; this.modelErr.replaceChildren(); return; }
      this.modelNote.hidden = true;           // the notes were about the model shown, not the name refused
      const near = res.closest || [];
      this.modelErr.replaceChildren(h("p", {}, res.errors.map((e) => e.message).join(" ")),
        near.length ? h("p", { class: "mme-fixes" }, "Closest: ", near.map((c) =>
          h("button", { type: "button", class: "mme-fix mme-closest", "data-name": c.name,
                        "aria-label": `Use ${c.kind === "preset" ? "the preset" : "the model"} ${c.name}`,
                        onclick: () => { this.preset.value = c.name; this.commitModel(c.name); } },
            c.name))) : null);
      this.modelErr.hidden = false;
    },

    quickControl(q) {
      const id = `mme-q-${q.path}`;
      const spec = this.specs.get(q.path);
      let control;
      if (["training.world_size", "training.global_batch_size", "training.seq_length"].includes(q.path)) {
        const input = h("input", { id, type: "text", inputmode: "numeric", autocomplete: "off", size: "6" });
        input.addEventListener("input", () => this.edit(q.path, input.value, input));
        const step = (dir) => h("button", { type: "button", class: "mme-step", "data-dir": dir,
          "aria-label": `${dir === "down" ? "Previous" : "Next"} valid ${q.label.toLowerCase()}`,
          onclick: () => { const s = this.steps && this.steps[q.path]; const v = s && s[dir === "down" ? 0 : 1];
                           if (v) this.apply({ [q.path]: v }, q.path); } }, dir === "down" ? "−" : "+");
        const down = step("down"), up = step("up");
        control = h("span", { class: "mme-stepper" }, down, input, up);
        this.quick.set(q.path, { input, kind: "number", down, up });
      } else {
        const select = h("select", { id });
        select.addEventListener("change", () => {
          const opt = this.choices[q.path] && this.choices[q.path][Number(select.value)];
          this.via = "quick";
          if (!opt) return;
          this.companionNote(q, opt);
          this.apply({ [q.path]: opt.value, ...(opt.set || {}) }, q.path);
        });
        control = select;
        this.quick.set(q.path, { input: select, kind: "select" });
      }
      // Its error is the next item of the grid, a full-width row right under the control.
      return [h("div", { class: "mme-q", "data-path": q.path },
        h("label", { for: id, title: spec ? `${spec.label} (${spec.name})` : q.label }, q.label), control),
        h("div", { class: "mme-err mme-q-err", id: `${id}-err`, hidden: true, "data-label": q.label })];
    },

    /* A quick choice that brought companion changes (EP 8 with sequence parallelism and ETP 1, as Megatron-Core's
       rules ask: Python's advice says which and why): said under the quick controls, with an Undo. */
    companionNote(q, opt) {
      const box = this.companionBox;
      if (!box) return;
      if (!opt.also) { box.hidden = true; box.replaceChildren(); return; }
      const prev = {};
      for (const p of [q.path, ...Object.keys(opt.set || {})]) prev[p] = this.state.values[p];
      const words = Object.entries(opt.also).map(([p, v]) => {
        const spec = this.specs.get(p) || { label: p };
        return `${spec.label} ${v === true ? "on" : v === false ? "off" : show(v)}`;
      });
      box.replaceChildren(h("span", {}, `${q.label} ${opt.label} also set ${words.join(" and ")}`,
        opt.why ? ` (without: ${opt.why})` : "", ". "),
        h("button", { type: "button", class: "mme-fix mme-undo", onclick: () => {
          for (const [p, v] of Object.entries(prev)) {
            if (v === undefined) delete this.state.values[p]; else this.state.values[p] = v;
          }
          box.hidden = true;
          box.replaceChildren();
          this.fill(true);
          this.compute(q.path);
          this.writeURL("push");
        } }, "Undo"));
      box.hidden = false;
    },

    section(sec) {
      return h("details", { class: "mme-section", "data-section": sec.name },
        h("summary", {}, sec.name), h("p", { class: "mme-doc" }, sec.doc),
        h("div", { class: "mme-fields" }, sec.fields.map((f) => this.field(f))));
    },

    field(f) {
      const id = `mme-${f.path}`;
      let input;
      if (f.type === "bool" || (f.type === "str" && f.choices)) {
        const choices = f.type === "bool" ? ["true", "false"] : f.choices;
        input = h("select", { id }, h("option", { value: "" }, ""), choices.map((c) => h("option", { value: c }, c)),
          f.nullable ? h("option", { value: "null" }, "null (none)") : null);
      } else {
        input = h("input", { id, type: "text", autocomplete: "off", spellcheck: "false",
                             inputmode: f.type === "int" ? "numeric" : f.type === "float" ? "decimal" : null });
      }
      input.setAttribute("aria-describedby", `${id}-help ${id}-err`);
      input.addEventListener(input.tagName === "SELECT" ? "change" : "input", () => this.edit(f.path, input.value, input));
      input.addEventListener("blur", () => { this.editing = null; this.fill(); });
      this.inputs.set(f.path, input);
      const help = [f.help, f.unit ? `Unit: ${f.unit}.` : "", f.flag ? `Megatron-LM: ${f.flag}.` : ""].join(" ");
      return h("div", { class: "mme-field", "data-path": f.path },
        h("label", { for: id }, f.label, " ", h("code", {}, f.name), f.unit ? h("span", { class: "mme-unit" }, ` (${f.unit})`) : null),
        input, h("div", { class: "mme-help", id: `${id}-help` }, help),
        h("div", { class: "mme-err", id: `${id}-err`, hidden: true }));
    },

    importPanel() {
      const kinds = { hf: "Hugging Face config.json", megatron: "Megatron-LM launch arguments",
                      bridge: "Megatron-Bridge config.yaml", yaml: "Estimator configuration (YAML or JSON)" };
      return h("details", { class: "mme-section mme-import" }, h("summary", {}, "import"),
        h("p", { class: "mme-doc" }, "Paste (or drop a file on the box) and the form takes it over: a config.json " +
          "replaces the model section, Megatron arguments the fields they set, a Bridge config.yaml or a configuration " +
          "everything."),
        h("p", { class: "mme-doc" }, "A model of the offline catalog: type its Hugging Face id in the Model box at the top ",
          h("button", { type: "button", class: "mme-fix", onclick: () => {
            this.preset.scrollIntoView({ block: "center" });
            this.preset.focus();
            this.preset.select();
          } }, "Go to the Model box"), "."),
        Object.entries(kinds).map(([kind, label]) => {
          const id = `mme-import.${kind}`;
          const box = h("textarea", { id, rows: "4", spellcheck: "false", "aria-describedby": `${id}-err` });
          const go = () => this.importText(kind, box.value);
          box.addEventListener("paste", () => setTimeout(go));
          box.addEventListener("dragover", (ev) => ev.preventDefault());
          box.addEventListener("drop", (ev) => {
            const file = ev.dataTransfer && ev.dataTransfer.files[0];
            if (!file) return;
            ev.preventDefault();
            file.text().then((t) => { box.value = t; go(); });
          });
          return h("div", { class: "mme-field" }, h("label", { for: id }, label), box,
            h("button", { type: "button", class: "md-button", onclick: go }, "Apply"),
            h("div", { class: "mme-err", id: `${id}-err`, hidden: true }), h("div", { class: "mme-note", id: `${id}-note` }));
        }));
    },

    /* ---- filling the form from the state */
    // Each property is written only when it changes: an equal write is still a DOM change the browser styles
    // again (some eighty fields, on every answer).
    fill(all = false) {
      const values = this.merged();
      const put = (el, key, v) => { if (el[key] !== v) el[key] = v; };
      if (all || document.activeElement !== this.preset) put(this.preset, "value", this.modelText());
      this.gpu.value = this.state.gpu || "";
      this.gpuGib.hidden = this.state.gpu !== "custom";
      if (this.state.gpu === "custom" && (all || document.activeElement !== this.gpuGib)) this.gpuGib.value = this.state.gpu_gib || "";
      for (const [path, input] of this.inputs) {
        const spec = this.specs.get(path), base = this.presetValue(path);
        if (input.tagName === "SELECT") {
          put(input.options[0], "textContent", base !== undefined ? `preset: ${show(base)}`
            : spec.default !== null ? `default: ${show(spec.default)}` : "not set");
          const v = this.state.values[path];
          put(input, "value", v === undefined ? "" : v === null ? "null" : show(v));
        } else {
          put(input, "placeholder", spec.required && base === undefined ? "required" : base !== undefined
            ? `preset: ${show(base)}` : spec.default !== null ? `default: ${show(spec.default)}`
            : spec.derived ? `derived: ${spec.derived}` : "not set");
          if (all || input !== document.activeElement) put(input, "value", show(values[path]));
        }
      }
      for (const [path, q] of this.quick) {
        const v = values[path] === undefined ? this.specs.get(path).default : values[path];
        if (q.kind === "number") {
          if (all || q.input !== document.activeElement) put(q.input, "value", show(v));
          // A stepper with no valid value on its side (Python's advice: steps) is disabled, not silent.
          const s = this.steps && this.adviceKey === JSON.stringify(this.state) ? this.steps[path] : undefined;
          put(q.down, "disabled", Boolean(s) && !s[0]);
          put(q.up, "disabled", Boolean(s) && !s[1]);
          continue;
        }
        const opts = this.choices[path] || [];
        const key = JSON.stringify([opts, v === undefined ? null : v]);
        if (q.key === key && !all) continue;           // the same list and value: leave the select alone
        q.key = key;
        const i = opts.findIndex((o) => alike(o.value, v === undefined ? null : v));
        const list = opts.map((o, k) => h("option", { value: String(k) }, o.label));
        if (i < 0) list.push(h("option", { value: "", disabled: true }, `${show(v) || "none"}` +
          (opts.length ? " (not valid for this model)" : "")));
        q.input.replaceChildren(...list);
        q.input.value = i < 0 ? "" : String(i);
        // A long choice ("set by the pipeline layout", "2 (first stage 30 layers)") takes two cells of the grid
        // instead of being cut; its whole text is also the select's tooltip.
        const shown_ = i < 0 ? list[list.length - 1].textContent : opts[i].label;
        q.input.title = shown_;
        q.input.closest(".mme-q").toggleAttribute("data-wide", shown_.length > 12);
      }
    },

    hide(paths) {
      const key = paths.join(" ");
      if (this.hidden && key === this.hiddenKey) return;      // the same fields as last time (buildForm resets)
      this.hidden = paths;
      this.hiddenKey = key;
      const hidden = new Set(paths);
      for (const el of this.root.querySelectorAll(".mme-field[data-path], .mme-q[data-path]")) {
        const hide = hidden.has(el.dataset.path);
        if (el.hidden !== hide) el.hidden = hide;
      }
    },

    showErrors(notes) {
      this.notes = notes.length ? notes : null;
      for (const el of this.root.querySelectorAll(".mme-err")) {
        if (!el.hidden) el.hidden = true;
        if (el.firstChild) el.replaceChildren();
      }
      for (const el of this.root.querySelectorAll("[aria-invalid]")) el.removeAttribute("aria-invalid");
      const general = [];
      for (const note of notes) {
        const targets = [`mme-q-${note.field}`, `mme-${note.field}`].map((id) => document.getElementById(id))
          .filter((el) => el && !el.closest("[hidden]"));
        const quick = this.quick.has(note.field) && !document.getElementById(`mme-q-${note.field}`).closest("[hidden]")
          && !(note.field === this.changed && this.via === "form");
        // Only a field with a box for its error (the preset and GPU selects have none: their notes go above the
        // results with the others)
        const where = (quick ? [document.getElementById(`mme-q-${note.field}`)] : targets.slice(-1))
          .filter((input) => document.getElementById(`${input.id}-err`));
        if (!where.length) { general.push(note); continue; }
        for (const input of where) {
          const section = input.closest("details");
          if (section) section.open = true;
          input.setAttribute("aria-invalid", "true");
          const box = document.getElementById(`${input.id}-err`);
          box.append(this.noteBody(note));
          box.hidden = false;
        }
      }
      return general;
    },

    noteBody(note) {
      return h("div", { class: "mme-note-body" },
        h("ul", {}, note.messages.map((m) => h("li", {}, m))),
        note.hint ? h("p", {}, note.hint[0].toUpperCase() + note.hint.slice(1) + ".") : null,
        note.fixes.length ? h("p", { class: "mme-fixes" }, "Try: ", note.fixes.map((f) =>
          h("button", { type: "button", class: "mme-fix", onclick: (ev) => this.applyHere(f.set, undefined, ev.currentTarget, f.label) },
            f.label))) : null);
    }
  };
})();
