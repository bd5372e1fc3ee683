/* The calculator's Web Worker: boots Pyodide, installs the estimator wheel, answers JSON requests.
 *
 * Served over HTTP it runs as a module worker and fetches the runtime from assets/calculator/runtime/.
 * Opened from disk (file://) Chromium forbids fetch() and module workers, so the page loads this file as
 * a classic script, starts mmeWorkerMain in a worker made from a Blob URL, and hands it the runtime
 * files it read from base64 classic scripts; a fetch shim then serves them to Pyodide by URL.
 * Messages in: {type: "init", base, manifest, payload?} then {type: "call", id, request};
 * out: {type: "progress", text, done, loaded, total} (bytes of the runtime downloaded so far, against the
 * sizes the build wrote into the manifest), {type: "ready", ms, phases, marks} (marks: when each part of
 * the start was done, in ms since "init"), {type: "result", id, response, ms} or {type: "result", id, error}
 * when Python raised, {type: "fatal", message}. Requests and responses are JSON text for
 * estimator.web.handle.
 *
 * Over HTTP the start runs in parallel: Pyodide's two scripts are imported, its WebAssembly compiled as it
 * downloads, and the memory snapshot inflated as it downloads, all at once; then Pyodide restores the
 * snapshot. Once Python answers, the page's last estimate is recomputed a few dozen times while idle so
 * that WebAssembly's optimised code is in place for the user's first edits.
 */
"use strict";

function mmeWorkerMain(scope) {
  let handle = null;
  const waiting = [];
  const post = (msg) => scope.postMessage(msg);
  const bytes = { loaded: 0, total: 0, last: 0, done: 0 };
  const marks = {};                             // when each part of the start was done (ms since "init")
  let t0 = 0;
  const mark = (name) => (value) => { marks[name] = Math.round(performance.now() - t0); return value; };
  const progress = (text, done) => {
    bytes.done = Math.max(bytes.done, done);                 // never backwards
    post({ type: "progress", text, done: bytes.done, loaded: bytes.loaded, total: bytes.total });
  };

  // Bytes of the runtime arrived so far, for the page's progress bar.
  function tally(n) {
    bytes.loaded += n;
    const now = performance.now();
    if (bytes.loaded >= bytes.total) {
      progress("Starting Python", 0.8);
    } else if (now - bytes.last > 40) {
      bytes.last = now;
      const mb = (x) => (x / 1e6).toFixed(1);
      progress(`Downloading the Python runtime: ${mb(bytes.loaded)} of ${mb(bytes.total)} MB`,
               0.05 + 0.75 * bytes.loaded / bytes.total);
    }
  }

  // Every download goes through fetch (Pyodide's own included): count the bytes as they arrive. The files
  // named in `early` are requested at once, in parallel with loading Pyodide's JavaScript; Pyodide's own
  // request for one of them gets that response. `stub` names the WebAssembly file, compiled since the start
  // (compileWasm, with the browser's own fetch): every request for it here (Pyodide's) gets an empty answer
  // instead of a second download.
  // Returns the browser's own fetch.
  function countDownloads(early, stub) {
    const native = globalThis.fetch.bind(globalThis);
    const started = new Map(early.map((url) => [url, native(url)]));
    const counted = (resp) => {
      if (!resp.body || !resp.ok) return resp;
      const counter = new TransformStream({ transform(chunk, ctl) {
        tally(chunk.byteLength);
        ctl.enqueue(chunk);
      } });
      return new Response(resp.body.pipeThrough(counter), { status: resp.status, statusText: resp.statusText,
                                                             headers: resp.headers });
    };
    globalThis.fetch = async (input, init) => {
      const url = String(input instanceof Request ? input.url : input);
      if (url === stub) return new Response(new Uint8Array(0), { headers: { "Content-Type": "application/wasm" } });
      const pending = started.get(url);
      started.delete(url);
      return counted(await (pending || native(input, init)));
    };
    return native;
  }

  // Pyodide compiles its WebAssembly only once its JavaScript has loaded and the memory snapshot is in;
  // compiling it from the first byte instead takes that time off the start. Pyodide's instantiation then
  // gets this module (WebAssembly.instantiateStreaming is put back once Python runs).
  // The response goes to the compiler as the network hands it over: a copy of its stream read in JavaScript,
  // to count its bytes as they came, made the compiler wait on this thread's turns (Python ready
  // 1,681 -> 1,565 ms without it, median of 10 interleaved loads on two cores). Its bytes count once compiled.
  function compileWasm(url, fetchWasm, size) {
    const compiled = fetchWasm(url).then((resp) => WebAssembly.compileStreaming(resp))
      .then((module) => { tally(size); return module; }).then(mark("wasm compiled"));
    compiled.catch(() => {});                       // reported when Pyodide instantiates it
    const original = WebAssembly.instantiateStreaming;
    WebAssembly.instantiateStreaming = async (source, imports) => {
      const module = await compiled;
      return { module, instance: await WebAssembly.instantiate(module, imports) };
    };
    return () => { WebAssembly.instantiateStreaming = original; };
  }

  // The memory snapshot as the build writes it (hooks/runtime.py sparse_snapshot): "MMS1", the memory's size,
  // the number of runs, each run's offset and length (u32, little-endian), then the runs' bytes; the rest of
  // the memory is zero. write() takes the inflated bytes in pieces of any size and puts each where it belongs
  // in a zeroed buffer; memory() returns that buffer once every run has been filled.
  function sparseMemory() {
    let head = new Uint8Array(0), runs = null, buf = null, r = 0, at = 0, left = 0;
    const bad = (why) => new Error(`the memory snapshot is damaged (${why})`);
    const nextRun = () => {
      while (left === 0 && r < runs.length) { at = runs[r]; left = runs[r + 1]; r += 2; }
    };
    return {
      write(piece) {
        let i = 0;
        if (!runs) {
          const joined = new Uint8Array(head.length + piece.length);
          joined.set(head);
          joined.set(piece, head.length);
          head = piece = joined;
          const v = new DataView(head.buffer, head.byteOffset, head.byteLength);
          if (head.length < 12) return;
          if (v.getUint32(0, true) !== 0x31534d4d) throw bad("not an MMS1 file");     // "MMS1"
          const n = v.getUint32(8, true);
          if (head.length < 12 + 8 * n) return;
          buf = new Uint8Array(v.getUint32(4, true));
          runs = Array.from({ length: 2 * n }, (_, j) => v.getUint32(12 + 4 * j, true));
          i = 12 + 8 * n;
          nextRun();
        }
        while (i < piece.length) {
          if (left === 0) throw bad("longer than its runs");
          const n = Math.min(left, piece.length - i);
          buf.set(piece.subarray(i, i + n), at);
          at += n; left -= n; i += n;
          nextRun();
        }
      },
      memory() {
        if (!runs || left > 0) throw bad("cut short");
        return buf;
      },
    };
  }

  // The memory snapshot, inflated and put in place while it downloads.
  async function snapshotBytes(url) {
    const resp = await fetch(url);
    if (!resp.ok) throw new Error(`${url}: HTTP ${resp.status}`);
    const reader = resp.body.getReader();
    const first = await reader.read();
    const head = first.value || new Uint8Array(0);
    const body = new ReadableStream({
      start(ctl) { if (first.done) ctl.close(); else ctl.enqueue(head); },
      async pull(ctl) { const { done, value } = await reader.read(); if (done) ctl.close(); else ctl.enqueue(value); },
    });
    const gz = head[0] === 0x1f && head[1] === 0x8b;        // else already inflated by the server
    const out = (gz ? body.pipeThrough(new DecompressionStream("gzip")) : body).getReader();
    const mem = sparseMemory();
    for (;;) {
      const { done, value } = await out.read();
      if (done) return mem.memory();
      mem.write(value);
    }
  }

  function unsparse(bytes) {
    const mem = sparseMemory();
    mem.write(bytes);
    return mem.memory();
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

  // Pyodide (314.0.7) restores a memory snapshot by writing it over the instance's memory, and sizes that memory
  // by setting INITIAL_MEMORY, which its WebAssembly ignores: the module defines its own memory of 480 pages
  // (30 MiB). A snapshot of a larger memory (the estimator's catalog and presets warmed in took it to 36 MiB)
  // then fails with "offset is out of bounds". So the instance's memory grows to the snapshot's length before
  // Pyodide takes it (Emscripten builds its views of the memory after instantiation, so they see the new size).
  function growForSnapshot(snapshot) {
    const { instantiate, instantiateStreaming } = WebAssembly;
    const grow = async (result) => {
      const instance = result instanceof WebAssembly.Instance ? result : result.instance;
      const memory = instance && instance.exports.memory;
      const bytes = await snapshot;
      const need = Math.ceil(bytes.length / 65536) - (memory ? memory.buffer.byteLength / 65536 : 0);
      if (memory && need > 0) memory.grow(need);
      return result;
    };
    WebAssembly.instantiate = (...args) => instantiate.apply(WebAssembly, args).then(grow);
    WebAssembly.instantiateStreaming = (...args) => instantiateStreaming.apply(WebAssembly, args).then(grow);
    return () => { WebAssembly.instantiate = instantiate; WebAssembly.instantiateStreaming = instantiateStreaming; };
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
    t0 = performance.now();
    progress("Loading the Python runtime", 0.05);
    let loadPyodide, files = null, restoreWasm = () => {};
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
      const wasm = base + "pyodide.asm.wasm";
      bytes.total = [m.wheel, m.snapshot, "pyodide.asm.wasm", "python_stdlib.zip"]
        .reduce((n, name) => n + (sizes[name] || 0), 0);
      // Pyodide's two scripts, the WebAssembly and the files, all at once.
      const asm = import(base + "pyodide.asm.mjs").then(mark("pyodide.asm.mjs loaded"));
      const loader = import(base + "pyodide.mjs").then(mark("pyodide.mjs loaded"));
      const native = countDownloads([m.snapshot, "python_stdlib.zip", m.wheel].filter(Boolean)
        .map((name) => base + name), wasm);
      restoreWasm = compileWasm(wasm, native, sizes["pyodide.asm.wasm"] || 0);
      if (m.snapshot) {
        opts._loadSnapshot = snapshotBytes(base + m.snapshot).then(mark("snapshot inflated"));
      }
      ({ loadPyodide } = await loader);
      opts.createPyodideModule = (await asm).default;
    }
    const wheel = files ? Promise.resolve(files[m.wheel]) : getBytes(base + m.wheel);
    if (m.snapshot && files) opts._loadSnapshot = Promise.resolve().then(() => unsparse(files[m.snapshot]));
    const restoreGrow = opts._loadSnapshot ? growForSnapshot(opts._loadSnapshot) : () => {};
    const t1 = performance.now();
    const py = await withWatchdog(loadPyodide(opts)).finally(() => { restoreGrow(); restoreWasm(); });
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
    mark("Python started")();
    post({ type: "ready", ms: Math.round(t3 - t0), snapshot: Boolean(m.snapshot), marks,
           phases: { loader: Math.round(t1 - t0), python: Math.round(t2 - t1), install: Math.round(t3 - t2) } });
    for (const msg of waiting.splice(0)) answer(msg);
    if (m.snapshot) {
      const calls = handle;
      handle = null;                          // requests arriving meanwhile wait for the files
      await install().catch((err) => console.warn(`estimator files not unpacked: ${err}`));
      handle = calls;
      for (const msg of waiting.splice(0)) answer(msg);
    }
    warmUp(WARM_STEPS);
  }

  // WebAssembly starts slow and is recompiled, faster, where it runs most: the first estimates after the
  // start take 30 to 120 ms, later ones about 5 (DeepSeek-V3 on a two-core laptop). The page's last estimate
  // is therefore computed again a few dozen times while nothing else is asked, one step per task, so that the
  // user's first edits are already fast; a request that arrives waits at most for the step under way.
  const WARM_STEPS = 40;
  let lastCompute = null;
  function warmUp(left) {
    if (left <= 0) return;
    setTimeout(() => {
      if (handle && lastCompute && !waiting.length) {
        try { handle(lastCompute); } catch (err) { return; }
      }
      warmUp(left - 1);
    }, 20);
  }

  function answer(msg) {
    if (msg.request.startsWith('{"op":"compute"')) lastCompute = msg.request;
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
