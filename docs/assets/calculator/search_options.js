/* The layout search's options: the GPU counts to search (the configuration's by default), a tensor parallel
 * size and an expert parallel size to keep fixed, the memory kept free, and the fewest GPUs on which some layout
 * fits. Python checks them and names a bad one (estimator/web/plan.py: search_options); the valid TP and EP sizes
 * are the quick controls' (estimator.plan.advice). Methods of the Calculator (calculator.js), mixed in from
 * window.mmeSearchOptions.
 */
(function () {
  "use strict";
  if (window.mmeSearchOptions) return;    // loaded right after the calculator and again at the page's end
  const h = window.mmeRender.h;
  const TP = "parallelism.tensor_model_parallel_size";
  const EP = "parallelism.expert_model_parallel_size";

  window.mmeSearchOptions = {
    searchOptionsPanel() {
      const opt = this.opt = {
        gpus: h("input", { id: "mme-opt-num_gpus", type: "text", inputmode: "numeric", autocomplete: "off", size: "12",
                           placeholder: "the GPU count above" }),
        tp: h("select", { id: "mme-opt-tp" }, h("option", { value: "" }, "any")),
        ep: h("select", { id: "mme-opt-ep" }, h("option", { value: "" }, "any")),
        keepFree: h("input", { id: "mme-opt-keep_free", type: "text", inputmode: "decimal", size: "4", value: "0" }),
        answer: h("div", { class: "mme-min-gpus mme-opt-answer" })
      };
      const box = h("details", { class: "mme-search-options" }, h("summary", {}, "Search options"),
        h("div", { class: "mme-opts" },
          h("label", { for: "mme-opt-num_gpus" }, "GPU counts"), opt.gpus,
          h("label", { for: "mme-opt-tp" }, "Tensor parallel"), opt.tp,
          h("label", { for: "mme-opt-ep" }, "Expert parallel"), opt.ep,
          h("label", { for: "mme-opt-keep_free" }, "Kept free (%)"), opt.keepFree,
          h("button", { type: "button", class: "md-button mme-opt-min", onclick: () => this.fewestGpus(opt.answer) },
            "Fewest GPUs")),
        h("p", { class: "mme-doc" }, "Find layouts that fit searches these GPU counts (comma-separated; empty: the " +
          "count above), with this tensor (and, for a mixture of experts, expert) parallel size only. A layout fits by the verdict's rule: " +
          "its upper bound (the estimate plus its measured error band) and this share of the GPU memory kept free fit. Fewest " +
          "GPUs searches 1, 2, 4, … GPUs for the smallest count on which some layout fits."), opt.answer);
      box.addEventListener("toggle", () => { if (box.open) this.fillSearchOptions(); });
      return box;
    },

    fillSearchOptions() {
      for (const [sel, path] of [[this.opt.tp, TP], [this.opt.ep, EP]]) {
        const now = sel.value;
        sel.replaceChildren(h("option", { value: "" }, "any"),
          ...(this.choices[path] || []).map((o) => h("option", { value: String(o.value) }, o.label)));
        sel.value = [...sel.options].some((o) => o.value === now) ? now : "";
      }
      this.opt.ep.disabled = !(this.choices[EP] || []).length || null;    // a dense model has no experts
    },

    searchOptions() {
      if (!this.opt) return null;
      return { num_gpus: this.opt.gpus.value.trim() || null, tp: this.opt.tp.value || null,
               ep: this.opt.ep.value || null, keep_free: this.opt.keepFree.value.trim() || null };
    }
  };
})();
