// Keyboard shortcuts of the review page. Served from the package; the page allows no
// inline script (Content-Security-Policy: script-src 'self').
"use strict";

(function () {
  function typing(target) {
    const tag = target && target.tagName;
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || (target && target.isContentEditable);
  }

  function follow(id) {
    const link = document.getElementById(id);
    if (link) {
      window.location.assign(link.getAttribute("href"));
      return true;
    }
    return false;
  }

  function rows() {
    return Array.from(document.querySelectorAll("#queue tbody tr"));
  }

  function select(step) {
    const all = rows();
    if (all.length === 0) {
      return;
    }
    let at = all.findIndex((row) => row.classList.contains("selected"));
    if (at >= 0) {
      all[at].classList.remove("selected");
    }
    at = at < 0 ? 0 : Math.min(all.length - 1, Math.max(0, at + step));
    all[at].classList.add("selected");
    all[at].scrollIntoView({ block: "nearest" });
  }

  function focus(id) {
    const field = document.getElementById(id);
    if (field) {
      field.focus();
      return true;
    }
    return false;
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey) {
      return;
    }
    if (typing(event.target)) {
      if (event.key === "Escape") {
        event.target.blur();
      }
      return;
    }
    let handled = false;
    switch (event.key) {
      case "j":
        select(1);
        handled = true;
        break;
      case "k":
        select(-1);
        handled = true;
        break;
      case "Enter": {
        const row = document.querySelector("#queue tbody tr.selected");
        if (row) {
          window.location.assign(row.dataset.href);
          handled = true;
        }
        break;
      }
      case "n":
        handled = follow("next-item");
        break;
      case "p":
        handled = follow("prev-item");
        break;
      case "a":
        handled = focus("corrected");
        break;
      case "r":
        handled = focus("reject-note");
        break;
      case "q":
        handled = follow("queue-link");
        break;
      default:
        break;
    }
    if (handled) {
      event.preventDefault();
    }
  });

  // Said on the page once the shortcuts listen (tests wait for it before pressing keys).
  document.documentElement.dataset.keys = "ready";

  document.addEventListener("DOMContentLoaded", () => {
    const span = document.querySelector("#raw mark.span");
    if (span) {
      span.scrollIntoView({ block: "center" });
    }
  });
})();
