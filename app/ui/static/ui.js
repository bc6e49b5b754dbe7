// The status page's own script: the CSRF token on every htmx request, the copy
// buttons, and the "Updates" badge following the event stream. No inline script (the CSP forbids it).
(function () {
  "use strict";
  function csrfToken() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.getAttribute("content") : "";
  }
  function setLive(text) {
    var badge = document.getElementById("live-state");
    if (badge) { badge.textContent = text; }
  }
  document.addEventListener("htmx:configRequest", function (event) {
    event.detail.headers["X-CSRF-Token"] = csrfToken();
  });
  // Copy buttons: the whole id (the page shows its first characters).
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("button.copy") : null;
    if (!button || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
      button.textContent = "Copied";
      button.classList.add("copied");
      setTimeout(function () { button.textContent = "Copy"; button.classList.remove("copied"); }, 1500);
    });
  });
  document.addEventListener("htmx:sseOpen", function () { setLive("live"); });
  document.addEventListener("htmx:sseError", function () { setLive("reconnecting"); });
  document.addEventListener("htmx:sseClose", function () { setLive("finished"); });
})();
