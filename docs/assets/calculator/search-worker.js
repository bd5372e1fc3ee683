/* Material's search worker, started late on the calculator page.
 *
 * Building the search index costs about 1.5 s of CPU, which on a two-core laptop is taken from Python's
 * start in the calculator's own worker. On the calculator page Material is therefore given this worker
 * instead (hooks/runtime.py rewrites the page's __config). It keeps Material's messages until one of:
 *   - the calculator says Python has answered and been idle for a while, or that it failed (BroadcastChannel
 *     "mme-calculator": engine.js says "python-settled" then, and again whenever asked "python-settled?");
 *   - the user searches (any message but the index itself);
 *   - LATEST_MS have passed;
 * then loads the real worker (its path relative to this file is the query's `worker` parameter) into
 * itself and hands it the kept messages, in order. Material sees the same worker, answering later.
 */
"use strict";

(() => {
  const LATEST_MS = 20_000;
  const SETUP = 0;                     // Material's message type for "here is the index"
  const real = new URL(new URL(location.href).searchParams.get("worker") || "", location.href).href;
  const kept = [];
  let started = false;
  let channel = null;

  const keep = (event) => {
    kept.push(event.data);
    if (!event.data || event.data.type !== SETUP) start();          // a query: search now
  };

  function start() {
    if (started) return;
    started = true;
    if (channel) channel.close();
    removeEventListener("message", keep);
    importScripts(real);
    for (const data of kept.splice(0)) dispatchEvent(new MessageEvent("message", { data }));
  }

  addEventListener("message", keep);
  if (typeof BroadcastChannel === "function") {
    channel = new BroadcastChannel("mme-calculator");
    channel.onmessage = (event) => { if (event.data === "python-settled") start(); };
    channel.postMessage("python-settled?");        // in case it was said before this worker listened
  }
  setTimeout(start, LATEST_MS);
})();
