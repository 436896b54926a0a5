// Keeps the header's unread badge current without a reload by polling the
// counts endpoint (the live inbox upgrades this to server-sent events).
(function () {
  "use strict";
  var badge = document.getElementById("unread-badge");
  if (!badge) { return; }
  var url = badge.getAttribute("data-counts-url");
  var delay = 15000;

  function render(unread) {
    if (unread > 0) {
      badge.textContent = unread > 99 ? "99+" : String(unread);
      badge.setAttribute("aria-label", unread + " unread");
      badge.hidden = false;
    } else {
      badge.textContent = "";
      badge.hidden = true;
    }
    document.dispatchEvent(new CustomEvent("mc:counts", { detail: { unread: unread } }));
  }

  function poll() {
    fetch(url, { credentials: "same-origin", headers: { "Accept": "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) { if (data) { render(data.unread); } })
      .catch(function () {})
      .finally(function () { setTimeout(poll, delay); });
  }
  window.mcRefreshCounts = function () { fetch(url, { credentials: "same-origin" }).then(function (r) { return r.ok ? r.json() : null; }).then(function (d) { if (d) { render(d.unread); } }); };
  poll();
})();
