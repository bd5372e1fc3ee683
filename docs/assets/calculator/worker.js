/* The calculator's Web Worker: boots Pyodide, installs the estimator wheel, answers JSON requests.
 *
 * Served over HTTP it runs as a module worker and fetches the runtime from assets/calculator/runtime/.
 * Opened from disk (file://) Chromium forbids fetch() and module workers, so the page loads this file as
 * a classic script, starts mmeWorkerMain in a worker made from a Blob URL, and hands it the runtime
 * files it read from base64 classic scripts; a fetch shim then serves them to Pyodide by URL.
 * Messages in: {type: "init", base, manifest, payload?} then {type: "call", id, request};
 * out: {type: "progress", text, done, loaded, total} (bytes of the runtime downloaded so far, against the
 * sizes the build wrote into the manifest), {type: "ready", ms}, {type: "result", id, response} or
 * {type: "result", id, error} when Python raised, {type: "fatal", message}. Requests and responses are
 * JSON text for estimator.web.handle.
 */
"use strict";

function mmeWorkerMain(scope) {
  let handle = null;
  const waiting = [];
  const post = (msg) => scope.postMessage(msg);
  const bytes = { loaded: 0, total: 0, last: 0, done: 0 };
  const progress = (text, done) => {
    bytes.done = Math.max(bytes.done, done);                 // never backwards
    post({ type: "progress", text, done: bytes.done, loaded: bytes.loaded, total: bytes.total });
  };

  // Every download goes through fetch (Pyodide's own included): count the bytes as they arrive. The files
  // named in `early` are requested at once, in parallel with loading Pyodide's JavaScript; Pyodide's own
  // request for one of them gets that response.
  function countDownloads(early) {
    const native = globalThis.fetch.bind(globalThis);
    const started = new Map(early.map((url) => [url, native(url)]));
    globalThis.fetch = async (input, init) => {
      const url = String(input instanceof Request ? input.url : input);
      const pending = started.get(url);
      started.delete(url);
      const resp = await (pending || native(input, init));
      if (!resp.body || !resp.ok) return resp;
      const counter = new TransformStream({ transform(chunk, ctl) {
        bytes.loaded += chunk.byteLength;
        const now = performance.now();
        if (bytes.loaded >= bytes.total) {
          progress("Starting Python", 0.8);
        } else if (now - bytes.last > 40) {
          bytes.last = now;
          const mb = (n) => (n / 1e6).toFixed(1);
          progress(`Downloading the Python runtime: ${mb(bytes.loaded)} of ${mb(bytes.total)} MB`,
                   0.05 + 0.75 * bytes.loaded / bytes.total);
        }
        ctl.enqueue(chunk);
      } });
      return new Response(resp.body.pipeThrough(counter), { status: resp.status, statusText: resp.statusText,
                                                             headers: resp.headers });
    };
  }

  const fromBase64 = (s) => (Uint8Array.fromBase64 ? Uint8Array.fromBase64(s)
    : Uint8Array.from(atob(s), (c) => c.charCodeAt(0)));

  async function gunzip(bytes) {
    if (bytes[0] !== 0x1f || bytes[1] !== 0x8b) return bytes;      // already inflated by the server
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return new Uint8Array(await new Response(stream).arrayBuffer());
  }

  async function getBytes(url) {
    const resp = await fetch(url);
    if (!resp.ok) throw new Error(`${url}: HTTP ${resp.status}`);
    return new Uint8Array(await resp.arrayBuffer());
  }

  const importText = (text) => import(URL.createObjectURL(new Blob([text], { type: "text/javascript" })));

  function shimFetch(base, files) {
    const types = { wasm: "application/wasm", mjs: "text/javascript", zip: "application/zip" };
    const native = globalThis.fetch.bind(globalThis);     // the worker's, or the page's on the fallback
    globalThis.fetch = (input, init) => {
      const url = String(input instanceof Request ? input.url : input);
      const name = url.startsWith(base) ? url.slice(base.length).split(/[?#]/)[0] : null;
      if (name && files[name]) {
        const type = types[name.split(".").pop()] || "application/octet-stream";
        return Promise.resolve(new Response(files[name], { headers: { "Content-Type": type } }));
      }
      return native(input, init);
    };
  }

  // Pyodide only logs a failed WebAssembly download or instantiation and then waits forever: turn that
  // (and any start-up that takes over a minute) into an error the page can show.
  function withWatchdog(promise) {
    const warn = console.warn;
    let timer;
    return new Promise((resolve, reject) => {
      timer = setTimeout(() => reject(new Error("Python did not start within 60 s")), 60_000);
      console.warn = (...args) => {
        if (args[0] !== "wasm instantiation failed!") return warn(...args);
        console.warn = (err) => reject(new Error(`the WebAssembly runtime could not be loaded (${err})`));
      };
      promise.then(resolve, reject);
    }).finally(() => { clearTimeout(timer); console.warn = warn; });
  }

  async function inlineFiles(payload) {
    const files = {};
    for (const [name, b64] of Object.entries(payload)) files[name] = await gunzip(fromBase64(b64));
    return files;
  }

  async function boot({ base, manifest: m, payload }) {
    const t0 = performance.now();
    progress("Loading the Python runtime", 0.05);
    let loadPyodide, files = null;
    const opts = { indexURL: base, packageBaseUrl: base, lockFileContents: m.lock, stdout: () => {},
                   stderr: (s) => console.warn(s) };
    if (payload) {                                         // file://: everything came in the message
      files = await inlineFiles(payload);
      shimFetch(base, files);
      if (typeof scope.importScripts === "function") {      // Pyodide refuses classic workers; this one
        scope.importScripts = () => { throw new Error("importScripts is unused here"); };  // only imports
      }
      const dec = new TextDecoder();
      ({ loadPyodide } = await importText(dec.decode(files["pyodide.mjs"])));
      opts.createPyodideModule = (await importText(dec.decode(files["pyodide.asm.mjs"]))).default;
    } else {
      const sizes = m.sizes || {};
      bytes.total = [m.wheel, m.snapshot, "pyodide.asm.wasm", "python_stdlib.zip"]
        .reduce((n, name) => n + (sizes[name] || 0), 0);
      countDownloads([m.wheel, m.snapshot, "pyodide.asm.wasm", "python_stdlib.zip"].filter(Boolean)
        .map((name) => base + name));
      ({ loadPyodide } = await import(base + "pyodide.mjs"));
    }
    const wheel = files ? Promise.resolve(files[m.wheel]) : getBytes(base + m.wheel);
    if (m.snapshot) {
      opts._loadSnapshot = files ? Promise.resolve(files[m.snapshot]) : getBytes(base + m.snapshot).then(gunzip);
    }
    const t1 = performance.now();
    const py = await withWatchdog(loadPyodide(opts));
    const t2 = performance.now();
    progress("Installing estimator", 0.9);
    const install = async () => {
      py.FS.writeFile("/tmp/estimator.whl", await wheel);
      py.runPython(m.install_py);
      if (files) for (const name of Object.keys(files)) delete files[name];  // Python has them now
    };
    // The snapshot holds the estimator already imported, with every preset read: its files (the wheel) are
    // unpacked after the first answers. Without a snapshot Python imports it from them, so first.
    if (!m.snapshot) await install();
    handle = py.runPython("import estimator.web\nestimator.web.handle");
    const t3 = performance.now();
    post({ type: "ready", ms: Math.round(t3 - t0), snapshot: Boolean(m.snapshot),
           phases: { loader: Math.round(t1 - t0), python: Math.round(t2 - t1), install: Math.round(t3 - t2) } });
    for (const msg of waiting.splice(0)) answer(msg);
    if (m.snapshot) {
      const calls = handle;
      handle = null;                          // requests arriving meanwhile wait for the files
      await install().catch((err) => console.warn(`estimator files not unpacked: ${err}`));
      handle = calls;
      for (const msg of waiting.splice(0)) answer(msg);
    }
  }

  function answer(msg) {
    const t = performance.now();
    try {
      const response = handle(msg.request);
      post({ type: "result", id: msg.id, response, ms: performance.now() - t });
    } catch (err) {                     // estimator.web.handle never raises; if it does, say so
      post({ type: "result", id: msg.id, error: String((err && err.message) || err), ms: performance.now() - t });
    }
  }

  scope.onmessage = (event) => {
    const msg = event.data;
    if (msg.type === "init") {
      boot(msg).catch((err) => {
        post({ type: "fatal", message: String((err && err.message) || err) });
        handle = () => { throw new Error("Python did not start"); };
        for (const m of waiting.splice(0)) answer(m);
      });
    } else if (msg.type === "call") {
      if (handle) answer(msg); else waiting.push(msg);
    }
  };
}

if (typeof WorkerGlobalScope !== "undefined" && self instanceof WorkerGlobalScope) {
  mmeWorkerMain(self);
} else {
  self.mmeWorkerMain = mmeWorkerMain;
}
