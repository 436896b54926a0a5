// Live preview of a message body on the admin compose page: the body is sent to
// the staff-only preview endpoint, which answers the sanitised HTML (what
// recipients will see), and that HTML is shown rendered. A static file, no
// inline script: the Content-Security-Policy allows scripts from 'self' only.
(function () {
  "use strict";

  // Each body textarea and its preview pane: the original and the translation.
  function watch(form, bodyId, targetId) {
    var body = document.getElementById(bodyId);
    var target = document.getElementById(targetId);
    if (!body || !target) {
      return;
    }
    var url = form.getAttribute("data-preview-url");
    var token = form.querySelector("input[name=csrfmiddlewaretoken]");
    var timer = null;
    var sent = 0;

    function refresh() {
      var mine = ++sent;
      var data = new FormData();
      data.append("body_html", body.value);
      fetch(url, {
        method: "POST",
        body: data,
        credentials: "same-origin",
        headers: { "X-CSRFToken": token ? token.value : "" },
      })
        .then(function (response) {
          if (!response.ok) {
            throw new Error("preview failed: " + response.status);
          }
          return response.json();
        })
        .then(function (answer) {
          // Only the newest request may write: answers can arrive out of order.
          if (mine === sent) {
            // Safe to render: the server sanitised it with the same rules as a send.
            target.innerHTML = answer.html;
          }
        })
        .catch(function () {
          if (mine === sent) {
            target.textContent = "Preview unavailable.";
          }
        });
    }

    body.addEventListener("input", function () {
      window.clearTimeout(timer);
      timer = window.setTimeout(refresh, 300);
    });
  }

  function start() {
    var form = document.getElementById("compose-form");
    if (!form) {
      return;
    }
    watch(form, "id_body_html", "body-preview");
    watch(form, "id_translation_body_html", "translation-preview");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
