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

// An unfinished run's page follows the run's events (Server-Sent Events from this
// server): after each, the page's live parts are read again and swapped in, unless the
// operator is typing in a form there; once the run stops, the page reloads in full.
const LIVE_EVENTS = ["checkpoint", "values", "updates", "custom", "tasks", "error", "gap"];

function follow(marker) {
  let dirty = false;
  let timer = null;
  document.addEventListener("input", () => { dirty = true; });
  async function refresh() {
    timer = null;
    const answer = await fetch(window.location.pathname, { credentials: "same-origin" });
    if (!answer.ok) return;
    const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
    for (const part of document.querySelectorAll("[data-live][id]")) {
      if (dirty && part.querySelector("form")) continue;
      const next = fresh.getElementById(part.id);
      if (next) part.replaceWith(document.importNode(next, true));
    }
    for (const form of document.querySelectorAll("form[data-command=branch]")) branchPreview(form);
    for (const form of document.querySelectorAll("form.command")) once(form);
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  }
  const source = new EventSource(marker.dataset.events);
  for (const name of LIVE_EVENTS) {
    source.addEventListener(name, () => { if (timer === null) timer = setTimeout(refresh, 250); });
  }
  source.addEventListener("end", () => {
    source.close();
    if (!dirty) window.location.reload();
    else refresh();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const marker = document.getElementById("live");
  if (marker && window.EventSource) follow(marker);
  for (const form of document.querySelectorAll("form[data-command=branch]")) branchPreview(form);
  for (const form of document.querySelectorAll("form.command")) once(form);
});
