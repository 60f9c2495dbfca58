// The console's one script. A job or key page carries data-live on
// <main>: the address of a small JSON document with a version of what the
// page shows. While the page is visible, the script asks for it every
// data-interval milliseconds; when the version changes, it fetches the
// page again and swaps in each part marked data-live-region. Nothing from
// a store is turned into markup here: the parts come from the server's
// templates, which escape every value, and DOMParser runs no script.
(function () {
  "use strict";
  var main = document.querySelector("main[data-live]");
  if (!main || !window.fetch || !window.DOMParser) {
    return;
  }
  var liveURL = main.getAttribute("data-live");
  var interval = parseInt(main.getAttribute("data-interval"), 10) || 2000;
  var version = main.getAttribute("data-version") || null;
  var timer = null;
  var note = document.querySelector(".live-note");

  function say(text) {
    if (note) {
      note.textContent = text;
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = null;
    if (!document.hidden) {
      timer = setTimeout(poll, interval);
    }
  }

  function swap(html) {
    var doc = new DOMParser().parseFromString(html, "text/html");
    var parts = document.querySelectorAll("[data-live-region][id]");
    for (var i = 0; i < parts.length; i++) {
      var fresh = doc.getElementById(parts[i].id);
      if (fresh) {
        parts[i].replaceWith(document.importNode(fresh, true));
      }
    }
  }

  function poll() {
    fetch(liveURL, { headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" })
      .then(function (res) {
        if (!res.ok) {
          throw new Error("status " + res.status);
        }
        return res.json();
      })
      .then(function (live) {
        if (version === null || live.version === version) {
          version = live.version;
          return null;
        }
        version = live.version;
        return fetch(window.location.pathname, { credentials: "same-origin", cache: "no-store" })
          .then(function (res) { return res.text(); })
          .then(function (html) {
            swap(html);
            say("updated " + new Date().toLocaleTimeString());
          });
      })
      .catch(function () {
        say("live updates paused: the console could not be reached");
      })
      .then(schedule);
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
      say("live updates paused while the page is hidden");
    } else {
      say("");
      poll();
    }
  });
  say("updates live");
  poll();
})();
