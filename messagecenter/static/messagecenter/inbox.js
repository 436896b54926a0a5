// Keeps the inbox tab counts in step with the header badge's polling.
(function () {
  "use strict";
  document.addEventListener("mc:counts", function (event) {
    var all = document.querySelector('.tabs a[href$="/inbox/"] .mc-count');
    if (all && event.detail && typeof event.detail.unread === "number") {
      all.textContent = String(event.detail.unread);
      all.setAttribute("aria-label", event.detail.unread + " unread");
    }
  });
})();
