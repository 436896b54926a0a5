// Keeps the header's unread badge current without a reload.
//
// Live: one EventSource per page on /api/v1/inbox/stream/; every "inbox"
// event (and the "hello" of each reconnect) refetches the counts, and pages
// listen to the "mc:counts" / "mc:inbox-changed" events this dispatches.
// Fallback: when the stream cannot be opened (an old browser, a server
// without live updates, Redis down) the counts are polled every 15 s; the
// counts endpoint answers 304 while the ETag we send still matches. While
// the stream is open a slow poll still picks up changes that publish no
// event (bulletins, everyone-messages, new announcements).
(function () {
  "use strict";
  var badge = document.getElementById("unread-badge");
  if (!badge) { return; }
  var url = badge.getAttribute("data-counts-url");
  var streamUrl = badge.getAttribute("data-stream-url");
  var FAST = 15000;
  var SLOW = 60000;
  var etag = null;
  var live = false;
  var timer = null;
  var inFlight = null;

  function render(counts) {
    var unread = counts.unread;
    if (unread > 0) {
      badge.textContent = unread > 99 ? "99+" : String(unread);
      badge.setAttribute("aria-label", unread + " unread");
      badge.hidden = false;
    } else {
      badge.textContent = "";
      badge.removeAttribute("aria-label");
      badge.hidden = true;
    }
    document.dispatchEvent(new CustomEvent("mc:counts", { detail: counts }));
  }

  // An event that comes while a fetch is on its way may postdate that
  // fetch's answer: fetch once more when it is done.
  var again = false;

  function refresh() {
    if (inFlight) { again = true; return inFlight; }
    var headers = { "Accept": "application/json" };
    if (etag) { headers["If-None-Match"] = etag; }
    inFlight = fetch(url, { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (r) {
        if (r.status === 304 || !r.ok) { return null; }
        etag = r.headers.get("ETag");
        return r.json();
      })
      .then(function (data) { if (data) { render(data); } })
      .catch(function () {})
      .finally(function () {
        inFlight = null;
        if (again) { again = false; refresh(); }
      });
    return inFlight;
  }

  function schedule() {
    if (timer) { clearTimeout(timer); }
    timer = setTimeout(function () { refresh().finally(schedule); }, live ? SLOW : FAST);
  }

  function connect() {
    if (!streamUrl || typeof window.EventSource !== "function") { return; }
    var source = new EventSource(streamUrl);
    source.addEventListener("hello", function () {
      live = true;
      badge.setAttribute("data-live", "on");
      refresh();
      schedule();
    });
    source.addEventListener("inbox", function (event) {
      refresh();
      var detail = {};
      try { detail = JSON.parse(event.data); } catch (e) { detail = {}; }
      document.dispatchEvent(new CustomEvent("mc:inbox-changed", { detail: detail }));
    });
    source.onerror = function () {
      // EventSource reconnects by itself after an ended stream; it gives up
      // (CLOSED) on an error status. Either way poll fast until "hello".
      live = false;
      badge.setAttribute("data-live", "off");
      schedule();
      if (source.readyState === EventSource.CLOSED) {
        setTimeout(connect, SLOW);
      }
    };
  }

  window.mcRefreshCounts = refresh;
  refresh();
  schedule();
  connect();
})();
