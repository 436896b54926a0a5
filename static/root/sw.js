// The message centre's service worker: served at the site's root (/sw.js) so
// that its scope covers every page. It shows each Web Push as a desktop
// notification and opens the item when the notification is clicked.
//
// A push's payload is JSON {"id", "title", "summary", "url"}, decrypted by the
// browser (RFC 8291). The notification's tag is the item's id: the same item
// pushed twice (a retry) replaces its notification instead of adding one.
"use strict";

self.addEventListener("install", function () {
  self.skipWaiting();
});

self.addEventListener("activate", function (event) {
  event.waitUntil(self.clients.claim());
});

self.addEventListener("push", function (event) {
  var data = {};
  if (event.data) {
    try {
      data = event.data.json();
    } catch (error) {
      data = { title: event.data.text() };
    }
  }
  var options = {
    body: data.summary || "",
    data: { url: data.url || "/inbox/" },
    icon: "/favicon.ico"
  };
  if (data.id) { options.tag = String(data.id); }
  event.waitUntil(self.registration.showNotification(data.title || "Message centre", options));
});

// Only this site's pages are opened: a payload's url is resolved against our
// origin, and any other origin falls back to the inbox.
function pageUrl(raw) {
  var url;
  try {
    url = new URL(raw || "/inbox/", self.location.origin);
  } catch (error) {
    url = new URL("/inbox/", self.location.origin);
  }
  return url.origin === self.location.origin ? url.href : new URL("/inbox/", self.location.origin).href;
}

self.addEventListener("notificationclick", function (event) {
  event.notification.close();
  var target = pageUrl(event.notification.data && event.notification.data.url);
  event.waitUntil(
    self.clients.matchAll({ type: "window", includeUncontrolled: true }).then(function (windows) {
      for (var i = 0; i < windows.length; i++) {
        if (windows[i].url === target && "focus" in windows[i]) { return windows[i].focus(); }
      }
      return self.clients.openWindow(target);
    })
  );
});
