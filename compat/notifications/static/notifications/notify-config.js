/* register_notify_callbacks' settings, read from the data attributes of the
   script tag that loads this file: no inline script, so a Content-Security-Policy
   without 'unsafe-inline' lets it run. notify.js must come first on the page. */
(function () {
  var script = document.currentScript;
  if (!script || typeof register_notifier !== "function") {
    if (window.console) {
      window.console.warn("notifications: load notifications/notify.js before register_notify_callbacks.");
    }
    return;
  }
  var settings = script.dataset;
  notify_badge_class = settings.badgeClass || notify_badge_class;
  notify_menu_class = settings.menuClass || notify_menu_class;
  notify_api_url = settings.apiUrl || notify_api_url;
  notify_fetch_count = settings.fetch || notify_fetch_count;
  notify_unread_url = settings.unreadUrl || notify_unread_url;
  notify_mark_all_unread_url = settings.markAllUrl || notify_mark_all_unread_url;
  notify_refresh_period = parseInt(settings.refreshMs, 10) || notify_refresh_period;
  notify_mark_as_read = settings.markAsRead === "true";
  (settings.callbacks || "").split(",").forEach(function (name) {
    if (name) {
      register_notifier(name);
    }
  });
})();
