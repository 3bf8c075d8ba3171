// oncegraph operator UI: a little vanilla JS, no build step, nothing fetched from elsewhere.
"use strict";

function pretty(value) {
  return value === undefined ? "(unset)" : JSON.stringify(value, null, 2);
}

// Create branch: show what the patch changes before it is sent, and refuse bad JSON.
function branchPreview(form) {
  const area = form.querySelector("textarea[name=patch]");
  const out = form.querySelector(".patch-preview");
  const button = form.querySelector("button[type=submit]");
  let state = {};
  try { state = JSON.parse(form.dataset.state || "{}"); } catch (e) { state = {}; }
  function render() {
    out.textContent = "";
    let patch;
    try { patch = JSON.parse(area.value || "{}"); } catch (e) {
      out.textContent = "Not valid JSON: " + e.message;
      button.disabled = true;
      return;
    }
    if (patch === null || typeof patch !== "object" || Array.isArray(patch)) {
      out.textContent = "The patch must be a JSON object of state fields.";
      button.disabled = true;
      return;
    }
    button.disabled = false;
    const keys = Object.keys(patch);
    if (!keys.length) { out.textContent = "No changes yet."; return; }
    const table = document.createElement("table");
    table.className = "diff";
    const head = table.insertRow();
    for (const h of ["field", "now (latest)", "after"]) {
      const th = document.createElement("th"); th.textContent = h; head.appendChild(th);
    }
    for (const key of keys) {
      const row = table.insertRow();
      for (const text of [key, pretty(state[key]), pretty(patch[key])]) {
        const cell = row.insertCell();
        const pre = document.createElement("pre"); pre.textContent = text; cell.appendChild(pre);
      }
    }
    out.appendChild(table);
  }
  area.addEventListener("input", render);
  render();
}

// No double submits: a command form is sent once.
function once(form) {
  form.addEventListener("submit", () => {
    for (const b of form.querySelectorAll("button[type=submit]")) {
      setTimeout(() => { b.disabled = true; }, 0);
    }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form[data-command=branch]")) branchPreview(form);
  for (const form of document.querySelectorAll("form.command")) once(form);
});
