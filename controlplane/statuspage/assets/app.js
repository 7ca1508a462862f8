// Keeps the status page live: fetches the server's fresh rendering of the fabric
// every few seconds and swaps it in. The markup comes from the control plane's own
// templates, escaped there; nothing else is loaded.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var fabric = document.getElementById("fabric");
  var every = parseInt(live.getAttribute("data-refresh-ms"), 10) || 2000;

  function show(text, bad) {
    live.textContent = text;
    live.className = bad ? "bad" : "ok";
  }

  function refresh() {
    var done = new AbortController();
    var timer = setTimeout(function () { done.abort(); }, Math.max(every, 5000));
    fetch("status/fragment", { cache: "no-store", signal: done.signal })
      .then(function (resp) {
        if (!resp.ok) { throw new Error("HTTP " + resp.status); }
        return resp.text();
      })
      .then(function (html) {
        fabric.innerHTML = html;
        show("live · updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function (err) {
        show("cannot reach the control plane (" + err.message + "); retrying", true);
      })
      .finally(function () {
        clearTimeout(timer);
        setTimeout(refresh, every);
      });
  }

  show("live", false);
  setTimeout(refresh, every);
})();
