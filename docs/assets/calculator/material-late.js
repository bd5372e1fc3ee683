/* Material's own script, started late on the calculator page.
 *
 * On a two-core laptop the calculator page's Python start is held back by whatever else the page runs: Material's
 * bundle costs about 0.7 s of main-thread CPU while Python starts (evaluating it, its DOMContentLoaded work, its
 * palette timer's style recalculations). On this page hooks/runtime.py therefore writes this script where
 * Material's bundle was, with the bundle's address in data-src, and this script loads the bundle:
 *   - once Python has drawn its first estimate (or failed), when the page is next idle;
 *   - at once when the user reaches for anything outside the calculator (pointer, key or focus): the header,
 *     the search, the navigation, the palette switch;
 *   - at the latest LATEST_MS after the page has loaded.
 * Material starts on DOMContentLoaded, which has passed by then: it is dispatched again once the bundle has run.
 * Handlers of the page's own that would mind running twice take `{ once: true }` or are idempotent (calculator.js's
 * init). On instant navigation to this page Material is already running and this script is not run.
 */
(function () {
  "use strict";
  const me = document.currentScript;
  const src = me && me.dataset.src;
  if (!src || window.document$) return;               // nothing to load, or Material is already running
  const LATEST_MS = 8000;
  const INTENT = ["pointerdown", "keydown", "focusin"];
  let loaded = false;

  function load() {
    if (loaded) return;
    loaded = true;
    for (const type of INTENT) document.removeEventListener(type, intent, true);
    for (const type of ["estimate:done", "estimate:error", "estimate:failed"]) document.removeEventListener(type, answered, true);
    const el = document.createElement("script");
    el.src = src;
    el.addEventListener("load", () => {
      if (document.readyState !== "loading") document.dispatchEvent(new Event("DOMContentLoaded"));
    });
    document.body.append(el);
  }

  function intent(event) {
    const calc = document.querySelector("[data-mme-calculator]");
    if (!calc || !(event.target instanceof Node) || !calc.contains(event.target)) load();
  }

  function answered() {                   // the results fire these for Python's answers only
    const idle = window.requestIdleCallback || ((fn) => setTimeout(fn, 50));
    idle(load, { timeout: 1000 });
  }

  if (!document.querySelector("[data-mme-calculator]")) return load();
  for (const type of INTENT) document.addEventListener(type, intent, true);
  for (const type of ["estimate:done", "estimate:error", "estimate:failed"]) document.addEventListener(type, answered, true);
  const late = () => setTimeout(load, LATEST_MS);
  if (document.readyState === "complete") late(); else window.addEventListener("load", late, { once: true });
})();
