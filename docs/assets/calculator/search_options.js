/* The layout search's options: the GPU counts to search (the configuration's by default), a tensor parallel
 * size to keep fixed, the memory kept free, and the fewest GPUs on which some layout fits. Python checks them
 * and names a bad one (estimator/web/plan.py: search_options); the valid TP sizes are the quick control's
 * (estimator.plan.advice). Methods of the Calculator (calculator.js), mixed in from window.mmeSearchOptions.
 */
(function () {
  "use strict";
  if (window.mmeSearchOptions) return;    // loaded right after the calculator and again at the page's end
  const h = window.mmeRender.h;
  const TP = "parallelism.tensor_model_parallel_size";

  window.mmeSearchOptions = {
    searchOptionsPanel() {
      const opt = this.opt = {
        gpus: h("input", { id: "mme-opt-num_gpus", type: "text", inputmode: "numeric", autocomplete: "off", size: "12",
                           placeholder: "the GPU count above" }),
        tp: h("select", { id: "mme-opt-tp" }, h("option", { value: "" }, "any")),
        headroom: h("input", { id: "mme-opt-headroom", type: "text", inputmode: "decimal", size: "4", value: "5" }),
        answer: h("div", { class: "mme-min-gpus mme-opt-answer" })
      };
      const box = h("details", { class: "mme-search-options" }, h("summary", {}, "Search options"),
        h("div", { class: "mme-opts" },
          h("label", { for: "mme-opt-num_gpus" }, "GPU counts"), opt.gpus,
          h("label", { for: "mme-opt-tp" }, "Tensor parallel"), opt.tp,
          h("label", { for: "mme-opt-headroom" }, "Kept free (%)"), opt.headroom,
          h("button", { type: "button", class: "md-button mme-opt-min", onclick: () => this.fewestGpus(opt.answer) },
            "Fewest GPUs")),
        h("p", { class: "mme-doc" }, "Find layouts that fit searches these GPU counts (comma-separated; empty: the " +
          "count above), with this tensor parallel size only, keeping this share of the GPU memory free. Fewest " +
          "GPUs searches 1, 2, 4, … GPUs for the smallest count on which some layout fits."), opt.answer);
      box.addEventListener("toggle", () => { if (box.open) this.fillSearchOptions(); });
      return box;
    },

    fillSearchOptions() {
      const sel = this.opt.tp, now = sel.value;
      sel.replaceChildren(h("option", { value: "" }, "any"),
        ...(this.choices[TP] || []).map((o) => h("option", { value: String(o.value) }, o.label)));
      sel.value = [...sel.options].some((o) => o.value === now) ? now : "";
    },

    searchOptions() {
      if (!this.opt) return null;
      return { num_gpus: this.opt.gpus.value.trim() || null, tp: this.opt.tp.value || null,
               headroom: this.opt.headroom.value.trim() || null };
    }
  };
})();
