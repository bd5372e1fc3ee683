/* The calculator's link to Python: starts the Web Worker (worker.js) that runs the estimator in Pyodide,
 * sends it JSON requests for estimator.web.handle and hands back the answers.
 *
 * window.mmeEngine.start(manifest, assets, { deferred }) returns the one engine of this tab (it survives
 * Material's instant navigation): { ready, failed, text, done, loaded, total, listeners, call(request),
 * launch() }; a deferred engine sends its worker to work at launch() (over HTTP the worker itself is made at once,
 * so that it is up by then; requests made before wait for it). call() returns
 * a promise that always settles: it resolves with Python's JSON answer, and rejects when the answer is not
 * JSON, when Python raised, when the worker failed or could not start, so no request is left waiting.
 * Served over HTTP the worker is a module worker; from file:// (the offline bundle) it is made from a Blob
 * with the runtime files read from classic scripts, or, where no worker can be made, Python runs on the page.
 */
(function () {
  "use strict";
  if (window.mmeEngine) return;           // loaded early in the page's head and again with the other scripts
  let engine = null;

  function loadScript(src) {
    return new Promise((ok, fail) => {
      const el = document.createElement("script");
      el.src = src;
      el.addEventListener("load", ok);
      el.addEventListener("error", () => fail(new Error(`cannot load ${src}`)));
      document.head.append(el);
    });
  }

  // Material's search worker starts once Python has answered and then been asked nothing for this long (its
  // 1.5 s of index building would otherwise slow the first edits), or at once when the user searches.
  const SEARCH_AFTER_MS = 2000;

  function start(manifest, assets, { deferred = false } = {}) {
    if (engine) return engine;
    const runtime = new URL("runtime/", assets).href;
    const e = engine = { ready: false, failed: null, text: "Starting Python", done: 0, loaded: 0, total: 0,
                         listeners: new Set(), calls: new Map(), next: 1, queue: [], port: null,
                         created: performance.now() };
    const notify = () => e.listeners.forEach((fn) => fn(e));
    // Material's search worker waits on this page until Python has answered and then been idle, or failed
    // (search-worker.js).
    const channel = typeof BroadcastChannel === "function" ? new BroadcastChannel("mme-calculator") : null;
    let searchFree = false, searchTimer = 0;
    const settled = () => {
      searchFree = true;
      if (channel) channel.postMessage("python-settled");
    };
    if (channel) channel.onmessage = (ev) => { if (ev.data === "python-settled?" && searchFree) settled(); };
    const quiet = () => {                       // (again) SEARCH_AFTER_MS from now, unless asked something
      clearTimeout(searchTimer);
      searchTimer = setTimeout(settled, SEARCH_AFTER_MS);
    };
    const failAll = (why) => {
      for (const { reject } of e.calls.values()) reject(new Error(why));
      e.calls.clear();
    };
    const fail = (why) => {
      e.failed = e.failed || why;
      failAll(e.failed);
      settled();
      notify();
    };
    const receive = (msg) => {
      if (msg.type === "progress") Object.assign(e, { text: msg.text, done: msg.done, loaded: msg.loaded || 0,
                                                      total: msg.total || 0 });
      else if (msg.type === "ready") Object.assign(e, { ready: true, done: 1, boot: { ...msg, created: e.created,
        readyAt: performance.now() }, text: `Python ready in ${(msg.ms / 1000).toFixed(1)} s` });
      else if (msg.type === "fatal") return fail(msg.message);
      else if (msg.type === "result") {
        if (!searchFree) quiet();
        const call = e.calls.get(msg.id);
        e.calls.delete(msg.id);
        e.pythonMs = msg.ms;                                  // time spent in Python, for the benchmark
        if (!call) return;
        if (msg.error !== undefined) return call.reject(new Error(`Python raised: ${msg.error}`));
        let answer;
        try {
          answer = JSON.parse(msg.response);
        } catch (err) {
          return call.reject(new Error(`Python's answer is not valid JSON (${err.message})`));
        }
        return call.resolve(answer);
      }
      notify();
    };
    const attach = (port) => {
      e.port = port;
      port.onmessage = (ev) => receive(ev.data);
      port.onmessageerror = () => failAll("a message from the Python worker could not be read");
      port.onerror = (ev) => {
        if (ev && ev.preventDefault) ev.preventDefault();
        fail((ev && ev.message) || "the Python worker stopped");
      };
      e.queue.splice(0).forEach((m) => port.postMessage(m));
    };
    e.receive = receive;                                       // for tests: a message as if from the worker
    e.call = (request) => new Promise((resolve, reject) => {
      if (e.failed) return reject(new Error(e.failed));
      if (searchTimer && !searchFree) quiet();
      const id = e.next++;
      e.calls.set(id, { resolve, reject });
      const msg = { type: "call", id, request: JSON.stringify(request) };
      try {
        if (e.port) e.port.postMessage(msg); else e.queue.push(msg);
      } catch (err) {
        e.calls.delete(id);
        reject(err);
      }
    });
    const init = { type: "init", base: runtime, manifest };
    let launched = false;
    e.launch = () => {
      if (launched) return e;
      launched = true;
      return launch();
    };
    const launch = () => {
      if (location.protocol !== "file:") {
        e.mode = "module worker";
        try {
          if (!e.port) attach(new Worker(assets + "worker.js", { type: "module" }));
          e.port.postMessage(init);
        } catch (err) {
          fail(String(err.message || err));
        }
        return e;
      }
      // file://: no fetch, no module worker. Classic scripts carry the files; the worker comes from a Blob.
      const scripts = [assets + "worker.js", ...(manifest.offline || []).map((n) => runtime + n)];
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
      }).catch((err) => fail(String(err.message || err)));
      return e;
    };
    // A deferred engine served over HTTP makes its worker at once (a thread and a small script, cheap), so that
    // the worker is up when launch() sends it to work; the runtime's download and start wait for launch().
    if (deferred && location.protocol !== "file:") {
      try {
        attach(new Worker(assets + "worker.js", { type: "module" }));
      } catch (err) { /* launch() tries again and reports */ }
    }
    return deferred ? e : e.launch();
  }

  window.mmeEngine = { start, get current() { return engine; } };
  // On the calculator page this script also loads in the head, with the runtime's manifest. The engine is
  // made there, with its worker, and launched (the runtime's download and start begun) by the calculator once
  // the first numbers are drawn: on a two-core laptop that work would otherwise hold up those numbers (by about
  // 0.17 s). Making the worker early saves its start-up (0.1 to 0.4 s) after them: Python ready 2.45 -> 2.28 s,
  // median of 12 interleaved loads (benchmarks/calculator.py's cold load).
  const me = document.currentScript;
  if (me && me.dataset.mmeRuntime) start(JSON.parse(me.dataset.mmeRuntime), new URL(".", me.src).href, { deferred: true });
})();
