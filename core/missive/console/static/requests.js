// "Requests": the recent requests the server keeps (GET api/requests),
// filtered, and one request's detail (GET api/requests/{id}).
import { fill, fmtNum, fmtSeconds, fmtTime, getJSON, h } from "./api.js";

export const interval = 2000;

const $ = (id) => document.getElementById(id);
let selected = null;
let shownKey = null;

export function init() {
  for (const id of ["rq-model", "rq-endpoint", "rq-key", "rq-agent", "rq-status"]) $(id).addEventListener("change", () => refresh());
  $("rq-search").addEventListener("input", () => refresh());
}

function setOptions(select, values, allValue, allLabel) {
  const keep = select.value;
  const wanted = [allValue, ...values];
  const have = [...select.options].map((o) => o.value);
  if (wanted.length === have.length && wanted.every((v, i) => v === have[i])) return;
  fill(select, h("option", { value: allValue }, allLabel),
    values.map((v) => h("option", { value: v }, v === "" ? "(none)" : v)));
  select.value = wanted.includes(keep) ? keep : allValue;
}

function query() {
  const params = new URLSearchParams({ limit: "200" });
  if ($("rq-model").value !== "*") params.set("model", $("rq-model").value);
  if ($("rq-endpoint").value) params.set("endpoint", $("rq-endpoint").value);
  if ($("rq-key").value !== "*") params.set("key", $("rq-key").value);
  if ($("rq-agent").value) params.set("subagent", $("rq-agent").value);
  if ($("rq-status").value) params.set("status", $("rq-status").value);
  return params;
}

function matchesSearch(entry, text) {
  if (!text) return true;
  const hay = [entry.request_id, entry.stop_reason, entry.error_type, entry.path, entry.model, entry.key,
    entry.agent_id, entry.parent_agent_id, ...(entry.ignored || [])];
  return hay.some((v) => v && String(v).toLowerCase().includes(text));
}

function row(e) {
  const num = (v) => h("td", { class: "num" }, fmtNum(v));
  return h("tr", { "data-request-id": e.request_id, class: e.request_id === selected ? "selected" : null,
    onclick: () => showDetail(e.request_id) },
  h("td", {}, fmtTime(e.time)),
  h("td", { title: e.request_id }, e.request_id.slice(0, 10) + "…"),
  h("td", { class: "ep", title: `${e.method} ${e.path}` }, `${e.method} ${e.endpoint}`),
  h("td", {}, e.model || "-"),
  h("td", { class: `status-${String(e.status)[0]}` }, e.status),
  num(e.input_tokens), num(e.cache_read_input_tokens), num(e.output_tokens),
  h("td", { class: "num" }, fmtSeconds(e.ttft_s)), h("td", { class: "num" }, fmtSeconds(e.duration_s)),
  h("td", {}, e.stop_reason || ""), h("td", { class: e.error_type ? "status-5" : null }, e.error_type || ""),
  h("td", { title: (e.ignored || []).join(", ") }, e.ignored && e.ignored.length ? e.ignored.length : ""),
  agentCell(e));
}

// Claude Code's subagent headers (x-claude-code-agent-id, -parent-agent-id): ids only.
function agentCell(e) {
  if (!e.agent_id && !e.parent_agent_id) return h("td", { class: "muted" }, "");
  const title = `agent ${e.agent_id || "-"}` + (e.parent_agent_id ? `, spawned by ${e.parent_agent_id}` : "");
  return h("td", { title }, "subagent " + (e.agent_id || "").slice(0, 8));
}

export async function refresh() {
  const page = await getJSON(`api/requests?${query()}`);
  setOptions($("rq-model"), page.models, "*", "all");
  setOptions($("rq-endpoint"), page.endpoints, "", "all");
  setOptions($("rq-key"), page.keys, "*", "all");
  const text = $("rq-search").value.trim().toLowerCase();
  const shown = page.data.filter((e) => matchesSearch(e, text));
  const key = shown.map((e) => e.seq).join(",") + "/" + selected;
  if (key !== shownKey) { // kept entries never change: same list, same rows
    fill($("rq-table").tBodies[0], shown.map(row));
    shownKey = key;
  }
  $("rq-count").textContent = `${shown.length} shown of the ${page.kept} requests kept`;
}

const LABELS = [
  ["request_id", "request-id"], ["time", "time"], ["method", "method"], ["path", "path"], ["endpoint", "endpoint"],
  ["model", "model"], ["rule", "routing rule"], ["key", "API key"], ["agent_id", "subagent (x-claude-code-agent-id)"],
  ["parent_agent_id", "parent agent"], ["status", "status"], ["stream", "stream"], ["input_tokens", "input tokens"],
  ["cache_read_input_tokens", "cache read tokens"], ["cache_creation_input_tokens", "cache creation tokens"],
  ["output_tokens", "output tokens"], ["images", "images"], ["documents", "documents"], ["queue_s", "queue"],
  ["ttft_s", "time to first token"], ["duration_s", "duration"], ["stop_reason", "stop reason"],
  ["error_type", "error type"],
];

function value(key, v) {
  if (key === "time") return new Date(v * 1000).toISOString();
  if (key.endsWith("_s")) return fmtSeconds(v);
  return String(v);
}

export async function showDetail(requestId) {
  selected = requestId;
  for (const tr of $("rq-table").tBodies[0].rows) tr.classList.toggle("selected", tr.dataset.requestId === requestId);
  const aside = $("rq-detail");
  aside.hidden = false;
  let d;
  try {
    d = await getJSON(`api/requests/${encodeURIComponent(requestId)}`);
  } catch (exc) {
    fill(aside, h("div", { class: "error-box" }, exc.describe ? exc.describe() : String(exc)));
    return;
  }
  const pairs = LABELS.filter(([k]) => d[k] !== undefined && d[k] !== null);
  fill(aside,
    h("h3", {}, d.request_id),
    h("dl", { class: "kv" }, pairs.map(([k, label]) => [h("dt", {}, label), h("dd", {}, value(k, d[k]))])),
    h("div", { class: "block" }, h("div", { class: "label" }, "ignored (missive-ignored)"),
      d.ignored && d.ignored.length ? h("ul", { class: "ignored" }, d.ignored.map((i) => h("li", {}, i))) : h("div", { class: "muted" }, "nothing")),
    h("div", { class: "block" }, h("div", { class: "label" }, "captured request"),
      d.capture ? h("pre", { class: "capture" }, JSON.stringify(d.capture, null, 2)) : h("div", { class: "muted capture-note" }, d.capture_note)),
    h("button", { type: "button", class: "small", onclick: () => { aside.hidden = true; selected = null; } }, "Close"));
}
