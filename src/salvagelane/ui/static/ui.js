// The review page's script: keyboard shortcuts, their help overlay, and the correction
// editor's JSON check. Served from the package; the page allows no inline script
// (Content-Security-Policy: script-src 'self'). Everything here is a convenience: the
// server decides every action by itself (the guardrails judge the corrected item).
"use strict";

(function () {
  // --- the correction editor's JSON check -------------------------------------------------

  // Where and why `text` is not one JSON object, or null when it is one. A small strict
  // JSON reader (RFC 8259) rather than JSON.parse, whose messages and positions differ
  // from browser to browser: this one always knows the offset of the first problem.
  function jsonProblem(text) {
    const n = text.length;
    let i = 0;
    const NUMBER = /-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?/y;

    function fail(message) {
      throw { at: i, message: message };
    }
    function space() {
      while (i < n) {
        const c = text[i];
        if (c !== " " && c !== "\t" && c !== "\n" && c !== "\r") {
          return;
        }
        i += 1;
      }
    }
    function shown(c) {
      return c === undefined ? "the end of the text" : JSON.stringify(c);
    }
    function string() {
      i += 1; // the opening quote
      while (i < n) {
        const c = text[i];
        if (c === '"') {
          i += 1;
          return;
        }
        if (c === "\\") {
          const e = text[i + 1];
          if (e !== undefined && '"\\/bfnrt'.includes(e)) {
            i += 2;
          } else if (e === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(i + 2, i + 6))) {
            i += 6;
          } else {
            fail("expected an escape such as \\n, \\\" or \\u00e9 after the backslash");
          }
          continue;
        }
        if (c < " ") {
          fail("a control character (a line break?) inside a string: write it as \\n");
        }
        i += 1;
      }
      fail("the string is not closed: expected a closing \"");
    }
    function value(depth) {
      if (depth > 1000) {
        fail("nested too deep");
      }
      space();
      const c = text[i];
      if (c === "{") {
        i += 1;
        space();
        if (text[i] === "}") {
          i += 1;
          return;
        }
        for (;;) {
          space();
          if (text[i] !== '"') {
            fail("expected a \"quoted\" key, found " + shown(text[i]) + (text[i] === "}" ? " (a trailing comma?)" : ""));
          }
          string();
          space();
          if (text[i] !== ":") {
            fail("expected ':' after the key, found " + shown(text[i]));
          }
          i += 1;
          value(depth + 1);
          space();
          if (text[i] === ",") {
            i += 1;
            continue;
          }
          if (text[i] === "}") {
            i += 1;
            return;
          }
          fail("expected ',' or '}' after the value, found " + shown(text[i]));
        }
      }
      if (c === "[") {
        i += 1;
        space();
        if (text[i] === "]") {
          i += 1;
          return;
        }
        for (;;) {
          if (text[i] === "]") {
            fail("expected a value, found ']' (a trailing comma?)");
          }
          value(depth + 1);
          space();
          if (text[i] === ",") {
            i += 1;
            space();
            continue;
          }
          if (text[i] === "]") {
            i += 1;
            return;
          }
          fail("expected ',' or ']' after the value, found " + shown(text[i]));
        }
      }
      if (c === '"') {
        string();
        return;
      }
      NUMBER.lastIndex = i;
      if (c === "-" || (c >= "0" && c <= "9")) {
        if (!NUMBER.test(text)) {
          fail("not a JSON number");
        }
        i = NUMBER.lastIndex;
        return;
      }
      for (const word of ["true", "false", "null"]) {
        if (text.startsWith(word, i)) {
          i += word.length;
          return;
        }
      }
      fail("expected a value (an object, array, string, number, true, false or null), found " + shown(c));
    }

    try {
      space();
      if (text[i] !== "{") {
        fail("expected a JSON object (the corrected item), found " + shown(text[i]));
      }
      value(0);
      space();
      if (i < n) {
        fail("expected the end after the object, found " + shown(text[i]));
      }
      return null;
    } catch (problem) {
      if (problem && typeof problem.at === "number") {
        const before = text.slice(0, problem.at);
        const line = before.split("\n").length;
        const column = problem.at - before.lastIndexOf("\n");
        return { line: line, column: column, message: problem.message };
      }
      throw problem;
    }
  }

  function checkEditor(editor) {
    const said = document.getElementById("corrected-check");
    const button = document.getElementById("approve");
    const problem = jsonProblem(editor.value);
    editor.setAttribute("aria-invalid", problem ? "true" : "false");
    if (button) {
      button.disabled = problem !== null;
    }
    if (said) {
      said.classList.toggle("error", problem !== null);
      said.classList.toggle("ok", problem === null);
      said.dataset.valid = problem ? "no" : "yes";
      said.textContent = problem
        ? "not JSON yet: line " + problem.line + ", column " + problem.column + ": " + problem.message + " (approve is off until it parses)"
        : "JSON parses (the guardrails still check it against the item schema)";
    }
    return problem === null;
  }

  function approveNow() {
    const editor = document.getElementById("corrected");
    const form = document.getElementById("approve-form");
    if (editor && form && checkEditor(editor)) {
      form.requestSubmit(document.getElementById("approve"));
      return true;
    }
    return false;
  }

  // --- keys -------------------------------------------------------------------------------

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
      return false;
    }
    let at = all.findIndex((row) => row.classList.contains("selected"));
    if (at >= 0) {
      all[at].classList.remove("selected");
    }
    at = at < 0 ? 0 : Math.min(all.length - 1, Math.max(0, at + step));
    all[at].classList.add("selected");
    // The row's link takes the focus: it shows, and Enter follows it.
    const link = all[at].querySelector("a");
    if (link) {
      link.focus();
    }
    all[at].scrollIntoView({ block: "nearest" });
    return true;
  }

  function focus(id) {
    const field = document.getElementById(id);
    if (field) {
      field.focus();
      field.scrollIntoView({ block: "center" });
      return true;
    }
    return false;
  }

  function help() {
    return document.getElementById("keys-help");
  }

  function toggleHelp() {
    const dialog = help();
    if (!dialog) {
      return false;
    }
    if (dialog.open) {
      dialog.close();
    } else {
      dialog.showModal();
    }
    return true;
  }

  function approveKey() {
    const button = document.getElementById("approve");
    if (!button) {
      return false;
    }
    // Two keys to approve (a, then Enter): one stray key never approves.
    return button.disabled ? focus("corrected") : focus("approve");
  }

  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (target && target.id === "corrected" && event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      if (approveNow()) {
        event.preventDefault();
      }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey) {
      return;
    }
    if (typing(target)) {
      if (event.key === "Escape") {
        target.blur();
      }
      return;
    }
    const dialog = help();
    if (dialog && dialog.open) {
      if (event.key === "?") {
        dialog.close();
        event.preventDefault();
      }
      return; // Esc closes the dialog by itself
    }
    const onQueue = document.getElementById("queue") !== null;
    let handled = false;
    switch (event.key) {
      case "?":
        handled = toggleHelp();
        break;
      case "j":
        handled = onQueue ? select(1) : follow("next-item");
        break;
      case "k":
        handled = onQueue ? select(-1) : follow("prev-item");
        break;
      case "Enter": {
        if (target && (target.tagName === "A" || target.tagName === "BUTTON" || target.tagName === "SUMMARY")) {
          break; // the focused link or button does what Enter does to it
        }
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
        handled = approveKey();
        break;
      case "e":
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
    const editor = document.getElementById("corrected");
    if (editor && editor.hasAttribute("data-json-check")) {
      // A large item (up to the 8 MiB an approval takes) is checked once typing pauses.
      let pending = null;
      editor.addEventListener("input", () => {
        if (pending !== null) {
          window.clearTimeout(pending);
          pending = null;
        }
        if (editor.value.length < 200000) {
          checkEditor(editor);
        } else {
          pending = window.setTimeout(() => checkEditor(editor), 250);
        }
      });
      checkEditor(editor);
    }
    const button = document.getElementById("keys-button");
    if (button) {
      button.addEventListener("click", toggleHelp);
    }
    // Said once the editor is checked and the help button listens.
    document.documentElement.dataset.ready = "yes";
  });
})();
