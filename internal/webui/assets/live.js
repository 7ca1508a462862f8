// Keeps a Switchboard page live. The element #live says where to fetch the page's
// live part (data-fragment, a URL relative to the page), how often at least
// (data-refresh-ms) and, optionally, a server-sent event stream (data-events) whose
// every message means "something changed". The fetched markup replaces #content;
// it comes from the server's own templates, escaped there. The page's query string
// (its filters) is passed on to both URLs.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var content = document.getElementById("content");
  if (!live || !content) { return; }
  var every = parseInt(live.getAttribute("data-refresh-ms"), 10) || 2000;
  var fragment = live.getAttribute("data-fragment");
  var events = live.getAttribute("data-events");
  var query = window.location.search || "";
  var busy = false, again = false, last = 0, timer = null;
  var minGap = 150; // ms between two fetches, however often the stream says so

  function show(text, bad) {
    live.textContent = text;
    live.className = bad ? "bad" : "ok";
  }

  function schedule(delay) {
    if (timer !== null) { clearTimeout(timer); }
    timer = setTimeout(refresh, delay);
  }

  function refresh() {
    timer = null;
    if (busy) { again = true; return; }
    busy = true;
    last = Date.now();
    var done = new AbortController();
    var abort = setTimeout(function () { done.abort(); }, Math.max(every, 5000));
    fetch(fragment + query, { cache: "no-store", signal: done.signal })
      .then(function (resp) {
        if (!resp.ok) { throw new Error("HTTP " + resp.status); }
        return resp.text();
      })
      .then(function (html) {
        content.innerHTML = html;
        show("live · updated " + new Date().toLocaleTimeString(), false);
      })
      .catch(function (err) {
        show("cannot reach the server (" + err.message + "); retrying", true);
      })
      .finally(function () {
        clearTimeout(abort);
        busy = false;
        if (again) { again = false; schedule(minGap); } else { schedule(every); }
      });
  }

  // changed asks for a fetch soon, but not sooner than minGap after the last one.
  function changed() {
    var wait = Math.max(0, minGap - (Date.now() - last));
    if (busy) { again = true; return; }
    schedule(wait);
  }

  show("live", false);
  if (events && window.EventSource) {
    var sep = events.indexOf("?") >= 0 ? "&" : "?";
    var src = new EventSource(events + (query ? sep + query.substring(1) : ""));
    src.onmessage = changed;
    src.onerror = function () { show("event stream interrupted; polling", true); };
  }
  schedule(every);
})();
