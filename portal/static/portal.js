// Small conveniences; every form works without them.
(function () {
  "use strict";
  // Copy buttons next to secrets shown once.
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) { return; }
    var text = document.getElementById(button.dataset.copy).textContent.trim();
    var label = button.textContent;  // the page's words: "Copy", "Copiar"
    navigator.clipboard.writeText(text).then(function () {
      button.textContent = button.dataset.copied;
      setTimeout(function () { button.textContent = label; }, 2000);
    });
  });
  // Confirmation before destructive actions.
  document.addEventListener("submit", function (event) {
    var button = event.submitter;
    if (button && button.dataset.confirm && !window.confirm(button.dataset.confirm)) { event.preventDefault(); }
  });
  // Numbers are written as the page writes them (its locale's formats: "es-CL" writes 1.234).
  var formats = document.documentElement.dataset.formats || "en";
  // A running campaign's counters (its page, or its row on the overview) refresh every 3 seconds;
  // the page reloads once one has ended.
  var live = Array.prototype.filter.call(document.querySelectorAll("[data-live]"), function (el) {
    return el.dataset.live;
  });
  if (live.length) {
    var timer = setInterval(function () {
      live.forEach(function (element) {
        fetch(element.dataset.live, {credentials: "same-origin"}).then(function (response) {
          return response.ok ? response.json() : null;
        }).then(function (data) {
          if (!data) { return; }
          Object.keys(data).forEach(function (name) {
            var cell = element.querySelector('[data-count="' + name + '"]');
            if (cell) { cell.textContent = data[name].toLocaleString(formats); }
          });
          var bar = element.querySelector("progress");
          if (bar) { bar.value = data.done; }
          if (["queued", "pending", "processing"].indexOf(data.status) < 0) {
            clearInterval(timer);
            window.location.reload();
          }
        });
      });
    }, 3000);
  }
})();
