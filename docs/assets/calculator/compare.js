/* Compare: pin the configuration in the form; up to four pins side by side (verdict, peak, every stage's
 * memory, what the peak stage holds, and the fields that differ), as Python computes them
 * (estimator/web/compare.py through the "compare" request). Pins live in the link (one pin= parameter each, the
 * pinned state as a query string) and in the browser's local storage, with a short history of the
 * configurations computed here. Methods of the Calculator (calculator.js), mixed in from window.mmeCompare; the
 * panel (.mme-compare) carries data-state (pending | done | error) and fires "compare:done".
 */
(function () {
  "use strict";
  if (window.mmeCompare) return;          // loaded right after the calculator and again at the page's end
  const h = window.mmeRender.h;
  const MAX_PINS = 4, MAX_HISTORY = 8, KEY_PINS = "mme.pins", KEY_HISTORY = "mme.history";
  const REMEMBER_MS = 1500;               // Recent stores a configuration once the form has rested this long

  const load = (key) => {
    try { const v = JSON.parse(localStorage.getItem(key) || "[]"); return Array.isArray(v) ? v : []; } catch (e) { return []; }
  };
  const save = (key, v) => { try { localStorage.setItem(key, JSON.stringify(v)); } catch (e) { /* storage off */ } };
  const clean = (s) => {                  // a state as the URL and storage keep it
    const out = { preset: s.preset || null, values: { ...(s.values || {}) }, gpu: s.gpu || null };
    if (s.hf) out.hf = s.hf;                // a model of the catalog, by its Hugging Face id
    if (s.gpu === "custom" && s.gpu_gib !== undefined) out.gpu_gib = s.gpu_gib;
    return out;
  };
  const toQuery = (s) => {
    const q = new URLSearchParams();
    if (s.hf) q.set("hf", s.hf);
    q.set("preset", s.preset || "none");
    q.set("gpu", s.gpu || "none");
    if (s.gpu_gib !== undefined) q.set("gpu_gib", s.gpu_gib);
    for (const [k, v] of Object.entries(s.values)) q.set(k, v === null ? "null" : Array.isArray(v) ? v.join(", ") : String(v));
    return q.toString();
  };
  const fromQuery = (text) => {
    const q = new URLSearchParams(text), s = { preset: null, values: {}, gpu: null };
    for (const [k, v] of q) {
      if (k.includes(".")) s.values[k] = v;
      else if (k === "preset" || k === "gpu") s[k] = v === "none" ? null : v;
      else if (k === "hf" && v) s.hf = v;
      else if (k === "gpu_gib") s.gpu_gib = v;
    }
    return s;
  };
  const same = (a, b) => toQuery(a) === toQuery(b);

  window.mmeCompare = {
    pinButton() {
      return this.pinBtn = h("button", { type: "button", class: "md-button mme-pin", onclick: () => this.pin() },
        "Pin to compare");
    },

    comparePanel() {
      const inURL = new URLSearchParams(location.search).getAll("pin").map(fromQuery);
      this.pins = (inURL.length ? inURL : load(KEY_PINS).map(clean)).slice(0, MAX_PINS);
      this.history = load(KEY_HISTORY).filter((e) => e && e.state).slice(0, MAX_HISTORY);
      this.compareBox = h("section", { class: "mme-compare", "aria-label": "Pinned configurations" });
      this.drawCompare();
      return this.compareBox;
    },

    pinsToURL(q) { for (const p of this.pins || []) q.append("pin", toQuery(p)); },

    pin() {
      const s = clean(this.state);
      if (this.pins.some((p) => same(p, s)) || this.pins.length >= MAX_PINS) return;
      this.pins.push(s);
      this.pinShown = true;                 // once compared, the table is scrolled to (calculator.js showHere)
      this.working(this.pinBtn, "Comparing…");
      this.pinsChanged();
    },

    unpin(i) {
      this.pins.splice(i, 1);
      this.pinsChanged();
    },

    pinsChanged() {
      save(KEY_PINS, this.pins);
      this.writeURL("replace");
      this.flushURL();                      // a discrete change: in the address bar at once
      this.compared = null;
      this.refreshCompare();
    },

    remember() {                            // after an answer computed here, once the form rests: the short history
      this.rememberTimer = null;
      const v = this.view, s = clean(this.state);
      if (!v || this.source !== "python" || this.dirty || this.busy) return;
      this.history = [{ state: s, headline: v.headline }, ...this.history.filter((e) => !same(e.state, s))]
        .slice(0, MAX_HISTORY);
      save(KEY_HISTORY, this.history);
      const old = this.recentBox, box = this.compareBox;
      if (old && old.isConnected) old.replaceWith(this.recentList() || "");
      else if (box) box.append(this.recentList());
    },

    refreshCompare() {
      // Recent keeps what the user settled on, not each keystroke: stored once the form rests (REMEMBER_MS after
      // the last answer, with no keystroke since), or at once when a field loses focus or the page is left.
      if (this.source === "python") {
        clearTimeout(this.rememberTimer);
        this.rememberTimer = setTimeout(() => this.remember(), REMEMBER_MS);
        if (!this.rememberHooked) {
          this.rememberHooked = true;
          const now = () => { if (this.rememberTimer) { clearTimeout(this.rememberTimer); this.remember(); } };
          this.root.addEventListener("focusout", now);
          window.addEventListener("pagehide", now);
          // A keystroke means the form is not resting: the answer to the previous keystroke is not stored, however
          // late the next one comes after it (the timer starts again from the answer to the last one).
          this.root.addEventListener("input", () => { clearTimeout(this.rememberTimer); this.rememberTimer = null; },
                                     true);
        }
      }
      const key = JSON.stringify(this.pins);
      if (!this.pins.length) { this.compared = null; return this.drawCompare(); }
      if (!this.engine.ready || (this.compared && this.compared.key === key)) return this.drawCompare();
      const c = this.compared = { key, res: null };
      this.drawCompare();
      this.engine.call({ op: "compare", pins: this.pins }).then((res) => {
        c.res = res;
        if (this.compared === c) this.drawCompare();
      }, (err) => {
        c.res = { errors: [{ message: `The request failed: ${err.message}` }] };
        if (this.compared === c) this.drawCompare();
      });
    },

    recentList() {                          // the Recent list, kept so that remember() can redraw it alone
      const open = Boolean(this.recentBox && this.recentBox.open);
      return this.recentBox = this.history.length ? h("details", { class: "mme-history", open },
        h("summary", {}, `Recent configurations (${this.history.length})`),
        h("ol", {}, this.history.map((e) => h("li", {},
          h("button", { type: "button", class: "mme-fix", onclick: () => this.setState(clone(e.state), "push", "history") }, "Open"),
          " ", e.headline)))) : null;
    },

    /* The same comparison as one card per pin, shown instead of the table on a phone (calculator.css): verdict,
       peak and headroom first, then each stage, what the peak holds and what differs. */
    compareCards(res) {
      const pair = (term, value, fits) => [h("dt", {}, term), h("dd", { "data-fits": fits || null }, value)];
      return h("ol", { class: "mme-compare-cards", "aria-label": "Pinned configurations, one card each" },
        res.pins.map((p, i) => h("li", { class: "mme-compare-card", "data-pin": i },
          h("h4", {}, p.title), h("p", { class: "mme-card-sub" }, p.gpu || "no GPU"),
          h("dl", {},
            pair("Verdict", p.errors ? p.errors.map((e) => `${e.field}: ${e.message}`).join("; ") : p.word, p.verdict),
            p.errors ? null : pair("Peak on the device", `${p.peak} (stage ${p.peak_stage})`),
            p.headroom ? pair("Headroom", p.headroom) : null,
            (p.stages || []).map((st, k) => pair(`Stage ${k} (GiB)`, st.gib, st.verdict))),
          p.parts ? [h("p", { class: "mme-card-sub" }, "At the peak (GiB)"),
            h("dl", {}, p.parts.map((part) => pair(part.name, part.gib)))] : null,
          res.differs.length ? h("p", { class: "mme-card-sub" }, "What differs") : null,
          res.differs.length ? h("dl", { class: "mme-card-differs" },
            res.differs.map((d) => pair(d.label, d.values[i]))) : null,
          h("button", { type: "button", class: "mme-fix mme-open-pin", onclick: () => this.setState(clone(p.state), "push", "pin") }, "Open"),
          h("button", { type: "button", class: "mme-fix mme-unpin", "aria-label": `Unpin ${p.title}`, onclick: () => this.unpin(i) }, "Unpin"))));
    },

    drawCompare() {
      const box = this.compareBox;
      if (!box) return;
      const full = this.pins.length >= MAX_PINS, pinned = this.pins.some((p) => same(p, clean(this.state)));
      if (this.pinBtn) {
        this.pinBtn.disabled = full || pinned;
        this.pinBtn.textContent = pinned ? "Pinned" : full ? `${MAX_PINS} pinned` : "Pin to compare";
      }
      const recent = this.recentList();
      if (!this.pins.length) { box.dataset.state = "done"; return box.replaceChildren(recent || ""); }
      const c = this.compared, res = c && c.res;
      const title = h("h3", { id: "mme-compare-title" }, `Pinned configurations (${this.pins.length} of ${MAX_PINS})`);
      if (!res) {
        box.dataset.state = "pending";
        return box.replaceChildren(title, h("p", { class: "mme-doc", role: "status" },
          this.engine && this.engine.ready ? "Comparing…" : "The comparison shows once Python has started…"), recent || "");
      }
      box.dataset.state = res.errors ? "error" : "done";
      if (res.errors) {
        box.replaceChildren(title, h("p", { class: "mme-err" }, res.errors.map((e) => e.message).join(" ")), recent || "");
      } else {
        const cols = res.pins;
        const row = (head, cells, attrs) => h("tr", attrs || {}, h("th", { scope: "row" }, head), cells);
        const stages = [...Array(res.stages).keys()];
        box.replaceChildren(title, h("div", { class: "mme-table-wrap" }, h("table", { class: "mme-table mme-compare-table" },
          h("thead", {}, h("tr", {}, h("th", {}, ""), cols.map((p, i) => h("th", { scope: "col", "data-pin": i },
            p.title, h("br"), h("small", {}, p.gpu || "no GPU"), h("br"),
            h("button", { type: "button", class: "mme-fix mme-open-pin", onclick: () => this.setState(clone(p.state), "push", "pin") }, "Open"),
            h("button", { type: "button", class: "mme-fix mme-unpin", "aria-label": `Unpin ${p.title}`, onclick: () => this.unpin(i) }, "Unpin"))))),
          h("tbody", {},
            row("Verdict", cols.map((p) => h("td", { "data-fits": p.verdict || null, class: "mme-verdict-cell" },
              p.errors ? p.errors.map((e) => `${e.field}: ${e.message}`).join("; ") : p.word))),
            row("Peak on the device", cols.map((p) => h("td", {}, p.errors ? "" : `${p.peak} (stage ${p.peak_stage})`))),
            row("Headroom", cols.map((p) => h("td", {}, p.headroom || ""))),
            (cols.find((p) => p.parts) || { parts: [] }).parts.map((part, j) => row(`At the peak: ${part.name} (GiB)`,
              cols.map((p) => h("td", {}, p.parts ? p.parts[j].gib : "")), { class: "mme-part-row" })),
            stages.map((k) => row(`Stage ${k} (GiB)`, cols.map((p) => {
              const st = (p.stages || [])[k];
              return h("td", { "data-fits": st && st.verdict }, st ? st.gib : "");
            }), { class: "mme-stage-row" })),
            res.differs.length ? h("tr", {}, h("th", { colspan: String(cols.length + 1), class: "mme-differs-head" }, "What differs")) : null,
            res.differs.map((d) => row(h("span", {}, d.label, h("br"), h("code", {}, d.field)),
              d.values.map((v) => h("td", {}, v)), { class: "mme-differs", "data-field": d.field }))))),
          this.compareCards(res), recent || "");
      }
      if (this.pinShown) {
        this.pinShown = false;
        this.doneWorking();
        this.showHere(title, res.errors ? res.errors.map((e) => e.message).join(" ")
          : `Pinned: ${res.pins.length} configuration${res.pins.length > 1 ? "s" : ""} side by side.`);
      }
      box.dispatchEvent(new CustomEvent("compare:done", { bubbles: true }));
    }
  };
  const clone = (o) => JSON.parse(JSON.stringify(o));
})();
