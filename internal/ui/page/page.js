// The riverbus page's live refresh: every few seconds it fetches the live
// part of the page, rendered and escaped by the server, and puts it in
// place. No build step; the page's Content-Security-Policy allows only
// this file to run.
"use strict";
(function () {
  const live = document.getElementById("live");
  const state = document.getElementById("refresh-state");
  const every = Number(live.dataset.refreshMs) || 2000;
  async function refresh() {
    if (!document.hidden) {
      try {
        const resp = await fetch(live.dataset.fragment, { cache: "no-store", headers: { Accept: "text/html" } });
        const html = await resp.text();
        if (resp.ok || resp.status === 503) {
          live.innerHTML = html;
        }
        state.textContent = resp.ok
          ? "live: updated " + new Date().toLocaleTimeString()
          : "live: refresh failed (HTTP " + resp.status + "), retrying";
      } catch (e) {
        state.textContent = "live: refresh failed (" + e.message + "), retrying";
      }
    }
    setTimeout(refresh, every);
  }
  setTimeout(refresh, every);
})();
