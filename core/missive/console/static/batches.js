// "Batches": the message batches through the Batches API itself
// (GET /v1/messages/batches), their progress, cancel, and the results
// (GET .../results) saved as a JSON Lines file.
import { call, errorOf, fill, fmtNum, getJSON, h } from "./api.js";

export const interval = 5000;

const $ = (id) => document.getElementById(id);
let batches = [];
let hasMore = false;

export function init() {
  $("bt-refresh").addEventListener("click", () => refresh());
  $("bt-more").addEventListener("click", () => load(batches.length ? batches[batches.length - 1].id : null));
}

function total(counts) {
  return counts.processing + counts.succeeded + counts.errored + counts.canceled + counts.expired;
}

function date(value) {
  return value ? new Date(value).toLocaleString([], { hour12: false }) : "-";
}

async function download(batch, button) {
  button.disabled = true;
  try {
    const response = await call(`../v1/messages/batches/${encodeURIComponent(batch.id)}/results`);
    if (!response.ok) throw await errorOf(response);
    const url = URL.createObjectURL(await response.blob());
    const link = h("a", { href: url, download: `${batch.id}-results.jsonl` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (exc) {
    $("bt-count").textContent = exc.describe ? exc.describe() : String(exc);
  } finally {
    button.disabled = false;
  }
}

async function cancel(batch) {
  const response = await call(`../v1/messages/batches/${encodeURIComponent(batch.id)}/cancel`, { method: "POST" });
  if (!response.ok) $("bt-count").textContent = (await errorOf(response)).describe();
  else await load(null);
}

function row(b) {
  const counts = b.request_counts;
  const all = total(counts);
  const done = all - counts.processing;
  const inner = h("div");
  inner.style.width = `${all ? (done / all) * 100 : 0}%`;
  const actions = [];
  if (b.processing_status === "ended" && b.results_url) {
    const button = h("button", { type: "button", class: "small download" }, "Results");
    button.addEventListener("click", () => download(b, button));
    actions.push(button);
  }
  if (b.processing_status === "in_progress") {
    actions.push(h("button", { type: "button", class: "small", onclick: () => cancel(b) }, "Cancel"));
  }
  return h("tr", { "data-batch-id": b.id, "data-status": b.processing_status },
    h("td", { title: b.id }, b.id), h("td", {}, b.processing_status), h("td", {}, date(b.created_at)),
    h("td", {}, h("div", { class: "bar", title: `${done} of ${all}` }, inner), `${done} / ${all}`),
    h("td", { class: "num" }, fmtNum(counts.succeeded)), h("td", { class: "num" }, fmtNum(counts.errored)),
    h("td", { class: "num" }, fmtNum(counts.canceled)), h("td", { class: "num" }, fmtNum(counts.expired)),
    h("td", {}, date(b.ended_at)), h("td", {}, actions));
}

async function load(afterId) {
  const page = await getJSON(`../v1/messages/batches?limit=50${afterId ? `&after_id=${encodeURIComponent(afterId)}` : ""}`);
  batches = afterId ? [...batches, ...page.data] : page.data;
  hasMore = page.has_more;
  fill($("bt-table").tBodies[0], batches.length ? batches.map(row)
    : h("tr", {}, h("td", { colspan: 10, class: "muted" }, "No batches (create one with POST /v1/messages/batches, or from the playground).")));
  $("bt-more").hidden = !hasMore;
  $("bt-count").textContent = `${batches.length} batch${batches.length === 1 ? "" : "es"}${hasMore ? " (more)" : ""}`;
}

/** Reload the first page; polling (`poll`) only while a batch is not ended. */
export async function refresh(poll = false) {
  if (poll && !batches.some((b) => b.processing_status !== "ended")) return;
  await load(null);
}
