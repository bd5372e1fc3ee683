/* "Make it fit": under a verdict that is not "fits", the cheapest changes after which every stage fits, as
 * Python computes them (estimator/plan/suggest.py through the "suggest" request of estimator/web/plan.py), each
 * re-estimated, with the memory it saves and its step-time cost; one click applies one (sets its fields and
 * re-estimates). Methods of the Calculator (calculator.js), mixed in from window.mmeSuggest; no arithmetic
 * here. The list element (.mme-fit) carries data-state (pending | done | error) and fires "suggest:done"
 * with the request's time in detail.ms.
 */
(function () {
  "use strict";
  if (window.mmeSuggest) return;          // loaded right after the calculator and again at the page's end
  const h = window.mmeRender.h;

  window.mmeSuggest = {
    /* Called by advise() with the single-change levers: the fuller list below replaces them. */
    showLevers() { this.makeItFit(); },

    makeItFit() {
      const box = this.leversBox;
      if (!box) return;
      const v = this.view && this.view.verdict;
      if (!v || v.verdict === "fits" || this.source !== "python" || !this.engine.ready) {
        box.replaceChildren();
        return;
      }
      const key = JSON.stringify(this.state);
      if (this.fit && this.fit.key === key) return this.drawFit();
      const fit = this.fit = { key, res: null, t0: performance.now() };
      this.drawFit();
      this.engine.call({ op: "suggest", state: this.state }).then((res) => {
        fit.res = res;
        fit.ms = performance.now() - fit.t0;
        if (this.fit === fit) this.drawFit();
      }, (err) => {
        fit.res = { errors: [{ message: `The request failed: ${err.message}` }] };
        if (this.fit === fit) this.drawFit();
      });
    },

    drawFit() {
      const box = this.leversBox, fit = this.fit, res = fit.res;
      box.classList.add("mme-fit");
      box.setAttribute("aria-label", "Make it fit");
      const title = h("h3", {}, "Make it fit");
      if (!res) {
        box.dataset.state = "pending";
        return box.replaceChildren(title, h("p", { class: "mme-doc", role: "status" },
          "Looking for the cheapest changes that make it fit…"));
      }
      box.dataset.state = res.errors ? "error" : "done";
      // Why the levers the verdict can name are not in the list (Python's words: estimator.plan.suggest).
      const why = (res.not_proposed || []).length ? h("div", { class: "mme-not-proposed" },
        h("p", { class: "mme-doc" }, "Not proposed:"), h("ul", {}, res.not_proposed.map((t) => h("li", {}, t)))) : "";
      if (res.errors) {
        box.replaceChildren(title, h("p", { class: "mme-err" }, res.errors.map((e) => e.message).join(" ")));
      } else if (!res.suggestions.length) {
        box.replaceChildren(title, h("p", {}, "No single change, nor two together, makes every stage fit " +
          `${res.capacity}. `, "Find layouts that fit searches every layout of this model on these GPUs."), why);
      } else {
        box.replaceChildren(title,
          h("p", { class: "mme-doc" }, `The cheapest changes first after which every stage fits ${res.gpu} ` +
            `(${res.capacity}; ${res.target}), each re-estimated. Step time per token from the layout search's cost model ` +
            `(x1.000 = as it is); changes that need more GPUs come last. ${(res.notes || []).join(" ")}`),
          h("ol", { class: "mme-fit-list" }, res.suggestions.map((s, i) => h("li", {
            "data-levers": s.levers.join(" "), "data-gpus": s.num_gpus },
            h("div", { class: "mme-fit-head" },
              h("button", { type: "button", class: "mme-fix mme-apply", "aria-label": `Apply: ${s.label}`,
                            onclick: (ev) => this.applyHere(s.set, "suggest", ev.currentTarget, s.label) }, "Apply"),
              h("span", { class: "mme-fit-label" }, s.label)),
            h("div", { class: "mme-fit-figures" }, `peak ${s.peak} (saves ${s.saved}), ${s.cost}`),
            h("code", { class: "mme-fit-flags", title: "The estimate flags that apply it" }, s.cli_flags.join(" "))))), why);
      }
      box.dispatchEvent(new CustomEvent("suggest:done", { bubbles: true, detail: { ms: fit.ms } }));
    }
  };
})();
