/* Offline bundle only, loaded before the iframe-worker shim that Material's offline plugin needs for
   search on file://: the shim replaces window.Worker, and the calculator keeps the real one. */
window.MME_NATIVE_WORKER = window.Worker;
