// "Turn on desktop notifications": subscribes this browser to Web Push.
//
// Nothing is asked of the browser before the click. The click asks for the
// permission, registers the service worker (/sw.js, scope "/"), subscribes
// with the server's VAPID key and saves the subscription through the API.
// Every outcome leaves a clear state in the control's status line: on,
// blocked by the browser, not supported, or an error with its reason.
(function () {
  "use strict";
  var box = document.querySelector("[data-push-control]");
  if (!box || !window.mc) { return; }
  var _ = window.mc.gettext;
  var button = box.querySelector("[data-push-enable]");
  var status = box.querySelector("[data-push-status]");
  var keyUrl = box.getAttribute("data-public-key-url");
  var saveUrl = box.getAttribute("data-subscriptions-url");
  var workerUrl = box.getAttribute("data-worker-url");
  box.hidden = false;

  function show(state, text) {
    box.setAttribute("data-state", state);
    status.textContent = text;
  }

  function blocked() {
    button.hidden = true;
    show("denied", _("Desktop notifications are blocked for this site. Allow them in your browser's site settings, then reload this page."));
  }

  function on() {
    button.hidden = true;
    show("on", _("Desktop notifications are on for this browser."));
  }

  // The VAPID key comes as base64url; PushManager wants its bytes.
  function keyBytes(text) {
    var padded = (text + "===".slice((text.length + 3) % 4)).replace(/-/g, "+").replace(/_/g, "/");
    var raw = atob(padded);
    var bytes = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) { bytes[i] = raw.charCodeAt(i); }
    return bytes;
  }

  function save(subscription) {
    return window.mc.api("POST", saveUrl, subscription.toJSON()).then(function () {
      document.dispatchEvent(new CustomEvent("mc:push-subscribed"));
    });
  }

  function permission() {
    // Older Safari takes a callback and returns nothing.
    return new Promise(function (resolve) {
      var answer = Notification.requestPermission(resolve);
      if (answer && answer.then) { answer.then(resolve); }
    });
  }

  function enable() {
    button.disabled = true;
    show("asking", _("Waiting for your browser…"));
    permission().then(function (result) {
      if (result === "denied") { blocked(); return null; }
      if (result !== "granted") {
        button.disabled = false;
        show("dismissed", _("Desktop notifications were not turned on."));
        return null;
      }
      return navigator.serviceWorker.register(workerUrl, { scope: "/" })
        .then(function () { return navigator.serviceWorker.ready; })
        .then(function (registration) {
          return registration.pushManager.getSubscription().then(function (existing) {
            if (existing) { return existing; }
            return window.mc.api("GET", keyUrl).then(function (answer) {
              return registration.pushManager.subscribe({
                userVisibleOnly: true,
                applicationServerKey: keyBytes(answer.data.public_key)
              });
            });
          });
        })
        .then(save)
        .then(on);
    }).catch(function (error) {
      button.disabled = false;
      show("error", window.mc.interpolate(_("Desktop notifications could not be turned on: %s"), [error && error.message ? error.message : String(error)]));
    });
  }

  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
    button.hidden = true;
    show("unsupported", _("This browser cannot show desktop notifications."));
    return;
  }
  if (Notification.permission === "denied") { blocked(); return; }
  button.addEventListener("click", enable);
  // Already on in this browser: say so, and make sure the server has the
  // subscription (saving the same endpoint again changes nothing).
  if (Notification.permission === "granted") {
    navigator.serviceWorker.getRegistration("/").then(function (registration) {
      return registration ? registration.pushManager.getSubscription() : null;
    }).then(function (subscription) {
      if (subscription) { return save(subscription).then(on); }
      return null;
    }).catch(function () {});
  }
})();
