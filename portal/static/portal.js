// Small conveniences; every form works without them.
(function () {
  "use strict";
  // Copy buttons next to secrets shown once.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) { return; }
    var text = document.getElementById(button.dataset.copy).textContent.trim();
    navigator.clipboard.writeText(text).then(function () {
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 2000);
    });
  });
  // Confirmation before destructive actions.
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (button && button.dataset.confirm && !window.confirm(button.dataset.confirm)) { event.preventDefault(); }
  });
  // A running campaign's counters refresh every 3 seconds until it ends.
  var live = document.querySelector("[data-live]");
  if (live && live.dataset.live) {
    var timer = setInterval(function () {
      fetch(live.dataset.live, {credentials: "same-origin"}).then(function (response) {
        return response.ok ? response.json() : null;
      }).then(function (data) {
        if (!data) { return; }
        var done = 0;
        ["sent", "delivered", "read", "failed", "cancelled"].forEach(function (name) { done += data[name]; });
        Object.keys(data).forEach(function (name) {
          var cell = live.querySelector('[data-count="' + name + '"]');
          if (cell) { cell.textContent = data[name].toLocaleString("en"); }
        });
        var bar = live.querySelector("progress");
        if (bar) { bar.value = done; }
        if (["queued", "pending", "processing"].indexOf(data.status) < 0) { clearInterval(timer); window.location.reload(); }
      });
    }, 3000);
  }
})();
