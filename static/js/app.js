// Keeps the header's unread badge current without a reload.
//
// Live: one EventSource per page on /api/v1/inbox/stream/; every "inbox"
// event (and the "hello" of each reconnect) refetches the counts, and pages
// listen to the "mc:counts" / "mc:inbox-changed" events this dispatches.
// Fallback: when the stream cannot be opened (an old browser, a server
// without live updates, Redis down) the counts are polled every 15 s; the
// counts endpoint answers 304 while the ETag we send still matches. While
// the stream is open a slow poll still picks up a change whose event was
// lost. Broadcast events (a bulletin, a message to everyone, an announcement,
// a retraction: every open page hears them) carry a "spread": the page waits
// a random part of it before refetching, so pages do not all ask at once.
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

  // The bell counts everything unread the user can open: inbox items and
  // announcements (total_unread; older servers: unread + announcements).
  function totalUnread(counts) {
    if (typeof counts.total_unread === "number") { return counts.total_unread; }
    var announcements = (counts.by_category && counts.by_category.announcement) || 0;
    return counts.unread + announcements;
  }

  function render(counts) {
    var total = totalUnread(counts);
    counts.total = total;
    if (total > 0) {
      badge.textContent = total > 99 ? window.mc.interpolate(window.mc.gettext("%s+"), [window.mc.number(99)]) : window.mc.number(total);
      badge.setAttribute("aria-label", window.mc.interpolate(window.mc.ngettext("%s unread", "%s unread", total), [window.mc.number(total)]));
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
  var changed = false;

  function refresh() {
    if (inFlight) { again = true; return inFlight; }
    var headers = { "Accept": "application/json" };
    if (etag) { headers["If-None-Match"] = etag; }
    inFlight = fetch(url, { credentials: "same-origin", cache: "no-store", headers: headers })
      .then(function (r) {
        if (r.status === 304 || !r.ok) { return null; }
        // A changed answer: the list may have something new too (inbox.js).
        changed = true;
        etag = r.headers.get("ETag");
        return r.json();
      })
      .then(function (data) {
        if (data) { render(data); }
        if (changed) { changed = false; document.dispatchEvent(new CustomEvent("mc:counts-changed")); }
      })
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
      var detail = {};
      try { detail = JSON.parse(event.data); } catch (e) { detail = {}; }
      var spread = typeof detail.spread === "number" && detail.spread > 0 ? detail.spread : 0;
      setTimeout(function () {
        refresh();
        document.dispatchEvent(new CustomEvent("mc:inbox-changed", { detail: detail }));
      }, spread ? Math.floor(Math.random() * spread) : 0);
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
