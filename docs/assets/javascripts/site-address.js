/* The site's own address, wherever it is served.
 *
 * Material's instant navigation follows only the links its sitemap lists (sitemap.xml, written with mkdocs.yml's
 * site_url). It puts the page's protocol and host name on each address of the sitemap, but not its port or its
 * path: served anywhere else than site_url (another port, a sub-path), every link was a full page load, and on
 * the calculator Python started again. This script, loaded first in every page's head, rewrites the sitemap's
 * addresses to where the sitemap was really fetched from, as Material reads it. On file:// Material has no
 * instant navigation, and this script does nothing.
 */
(function () {
  "use strict";
  if (location.protocol === "file:" || window.mmeSiteAddress) return;
  window.mmeSiteAddress = true;
  const open = XMLHttpRequest.prototype.open;
  XMLHttpRequest.prototype.open = function (method, url) {
    let u = null;
    try { u = new URL(String(url), location.href); } catch (e) { /* not an address: left alone */ }
    if (u && u.origin === location.origin && u.pathname.endsWith("/sitemap.xml")) {
      const xhr = this, base = u.href.slice(0, u.href.length - u.search.length - u.hash.length - "sitemap.xml".length);
      let wanted = "";
      // The text is read once it has arrived (responseType "" or "text"); Material asks for a Blob.
      Object.defineProperty(xhr, "responseType", { configurable: true, get: () => wanted, set: (v) => { wanted = v; } });
      xhr.addEventListener("load", () => {
        let text = xhr.responseText;
        const locs = [...text.matchAll(/<loc>([^<]*)<\/loc>/g)].map((m) => m[1]);
        const root = locs.reduce((a, b) => (b.length < a.length ? b : a), locs[0] || "");
        if (root && root.endsWith("/") && root !== base) text = text.split(root).join(base);
        const response = wanted === "blob" ? new Blob([text], { type: "text/xml" }) : text;
        Object.defineProperty(xhr, "response", { configurable: true, get: () => response });
      });
    }
    return open.apply(this, arguments);
  };
})();
