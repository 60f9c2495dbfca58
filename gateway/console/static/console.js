// The console's one script. A job or key page carries data-live on
// <main>: the address of a small JSON document with a version of what the
// page shows. While the page is visible, the script asks for it every
// data-interval milliseconds; when the version changes, it fetches the
// page again and swaps in each part marked data-live-region. Nothing from
// a store is turned into markup here: the parts come from the server's
// templates, which escape every value, and DOMParser runs no script.
// The element that had the keyboard focus keeps it across a swap (found
// again by its id).
//
// On every page it also shows the dark-mode toggle (the choice kept in
// localStorage, applied as data-theme on <html>) and the copy buttons on
// ids; both stay hidden without the script.
(function () {
  "use strict";
  var root = document.documentElement;
  var toggle = document.getElementById("theme-toggle");
  var stored = null;
  try {
    stored = window.localStorage.getItem("idemgate-theme");
  } catch (e) {
    stored = null;
  }
  function dark() {
    var t = root.getAttribute("data-theme");
    if (t) {
      return t === "dark";
    }
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  }
  function showTheme() {
    if (toggle) {
      toggle.setAttribute("aria-pressed", dark() ? "true" : "false");
      toggle.textContent = dark() ? "Light mode" : "Dark mode";
    }
  }
  if (stored === "dark" || stored === "light") {
    root.setAttribute("data-theme", stored);
  }
  if (toggle) {
    toggle.hidden = false;
    showTheme();
    toggle.addEventListener("click", function () {
      var next = dark() ? "light" : "dark";
      root.setAttribute("data-theme", next);
      try {
        window.localStorage.setItem("idemgate-theme", next);
      } catch (e) {
        // private mode: the choice lasts for this page only
      }
      showTheme();
    });
  }

  function wireCopy(scope) {
    if (!navigator.clipboard) {
      return;
    }
    var buttons = scope.querySelectorAll("button.copy[data-copy]");
    for (var i = 0; i < buttons.length; i++) {
      var b = buttons[i];
      if (b.getAttribute("data-wired")) {
        continue;
      }
      b.setAttribute("data-wired", "1");
      b.hidden = false;
      b.addEventListener("click", function (ev) {
        var button = ev.currentTarget;
        navigator.clipboard.writeText(button.getAttribute("data-copy")).then(function () {
          button.textContent = "Copied";
          setTimeout(function () { button.textContent = "Copy"; }, 1500);
        });
      });
    }
  }
  wireCopy(document);

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
    var focused = document.activeElement && document.activeElement.id ? document.activeElement.id : null;
    var parts = document.querySelectorAll("[data-live-region][id]");
    for (var i = 0; i < parts.length; i++) {
      var fresh = doc.getElementById(parts[i].id);
      if (fresh) {
        var node = document.importNode(fresh, true);
        parts[i].replaceWith(node);
        wireCopy(node);
      }
    }
    if (focused && document.activeElement !== document.getElementById(focused)) {
      var again = document.getElementById(focused);
      if (again) {
        again.focus({ preventScroll: true });
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
