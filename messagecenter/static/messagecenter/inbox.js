// Keeps the inbox page in step with the header badge (app.js): tab counts on
// every "mc:counts", and on the first page the list itself on every
// "mc:inbox-changed", by refetching this page and swapping #inbox-live.
(function () {
  "use strict";
  var region = document.getElementById("inbox-live");

  document.addEventListener("mc:counts", function (event) {
    var all = document.querySelector('.tabs a[href$="/inbox/"] .mc-count');
    if (all && event.detail && typeof event.detail.unread === "number") {
      all.textContent = String(event.detail.unread);
      all.setAttribute("aria-label", event.detail.unread + " unread");
    }
  });

  if (!region || region.getAttribute("data-live-refresh") !== "on") { return; }
  var pending = null;

  function focusKey(el) {
    if (!el || !region.contains(el)) { return null; }
    return el.getAttribute("href") || el.getAttribute("aria-label") || el.getAttribute("name");
  }

  function reload() {
    if (pending) { return; }
    pending = fetch(window.location.href, { credentials: "same-origin", cache: "no-store", headers: { "Accept": "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) { return; }
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("inbox-live");
        if (!fresh) { return; }
        var key = focusKey(document.activeElement);
        region.innerHTML = fresh.innerHTML;
        if (key) {
          // Keep keyboard users where they were when the list changes under them.
          var again = Array.prototype.find.call(region.querySelectorAll("a, button, input"), function (el) {
            return focusKey(el) === key;
          });
          if (again) { again.focus(); }
        }
      })
      .catch(function () {})
      .finally(function () { pending = null; });
  }

  document.addEventListener("mc:inbox-changed", reload);
})();
