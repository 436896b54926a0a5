// Shared helpers of the pages' scripts: the page's language, localised times
// and numbers (Intl), same-origin API calls with the CSRF header. The strings
// come from Django's JavaScript catalogue (/jsi18n/), loaded just before.
(function () {
  "use strict";
  var lang = document.documentElement.lang || "en";
  // Django names Simplified Chinese "zh-hans"; Intl knows it as zh-Hans.
  var locale = lang.toLowerCase() === "zh-hans" ? "zh-Hans" : lang;
  var _ = window.gettext || function (s) { return s; };

  var fullFormat = new Intl.DateTimeFormat(locale, { dateStyle: "full", timeStyle: "long" });
  var relFormat = new Intl.RelativeTimeFormat(locale, { numeric: "auto" });
  var numberFormat = new Intl.NumberFormat(locale);
  var STEPS = [["second", 60], ["minute", 60], ["hour", 24], ["day", 7], ["week", 4.35], ["month", 12], ["year", Infinity]];

  function relative(date, now) {
    var seconds = (date.getTime() - (now || Date.now())) / 1000;
    if (Math.abs(seconds) < 45) { return _("just now"); }
    var value = seconds;
    for (var i = 0; i < STEPS.length; i++) {
      if (Math.abs(value) < STEPS[i][1]) { return relFormat.format(Math.round(value), STEPS[i][0]); }
      value = value / STEPS[i][1];
    }
    return fullFormat.format(date);
  }

  // Every <time data-relative> shows "5 min ago"; its title (the hover text)
  // is the full time in the reader's own time zone.
  function renderTimes(root) {
    var nodes = (root || document).querySelectorAll("time[data-relative]");
    for (var i = 0; i < nodes.length; i++) {
      var date = new Date(nodes[i].getAttribute("datetime"));
      if (isNaN(date.getTime())) { continue; }
      nodes[i].textContent = relative(date);
      nodes[i].title = fullFormat.format(date);
    }
  }

  function csrfToken() {
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    if (input) { return input.value; }
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  // fetch() with the session, the CSRF header and JSON; resolves to
  // {status, data}; rejects on a network failure or an error status, with the
  // API's own (translated) message when it sent one.
  function api(method, url, body, options) {
    var headers = { "Accept": "application/json" };
    if (method !== "GET") { headers["X-CSRFToken"] = csrfToken(); }
    if (body !== undefined) { headers["Content-Type"] = "application/json"; }
    return fetch(url, {
      method: method,
      credentials: "same-origin",
      cache: "no-store",
      keepalive: !!(options && options.keepalive),
      headers: headers,
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (r) {
      if (r.status === 204 || r.status === 304) { return { status: r.status, data: null }; }
      return r.json().catch(function () { return null; }).then(function (data) {
        if (!r.ok) {
          var message = data && data.error && data.error.message;
          var error = new Error(message || _("Something went wrong. Please try again."));
          error.status = r.status;
          throw error;
        }
        return { status: r.status, data: data };
      });
    });
  }

  // The language switcher applies on change (its button stays for keyboards and no-JS).
  var select = document.getElementById("lang-select");
  if (select) {
    select.addEventListener("change", function () { select.form.submit(); });
  }

  window.mc = {
    lang: locale,
    gettext: _,
    ngettext: window.ngettext || function (s, p, n) { return n === 1 ? s : p; },
    interpolate: window.interpolate || function (f, a) { return f.replace(/%s/g, function () { return a.shift(); }); },
    number: function (n) { return numberFormat.format(n); },
    fullTime: function (date) { return fullFormat.format(date); },
    relative: relative,
    renderTimes: renderTimes,
    api: api
  };
  renderTimes(document);
  setInterval(function () { renderTimes(document); }, 60000);
})();
