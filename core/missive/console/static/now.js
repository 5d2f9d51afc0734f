// "Now": each model's state, slots, queue, host cache and replicas, from
// GET api/status (what GET /v1/status answers).
import { fill, fmtBytes, fmtNum, fmtSeconds, getJSON, h } from "./api.js";

export const interval = 2000;

/** The model's state in the console's words: loaded, lazy, unloaded, starting, unavailable. */
export function stateOf(info) {
  if (info.status === "starting") return ["starting", "warn"];
  if (info.status === "unavailable") return ["unavailable", "bad"];
  if (info.loaded === false) return [info.lazy ? "lazy (not loaded)" : "unloaded", "warn"];
  return ["loaded", "ok"];
}

function of(value, limit) {
  return limit === null || limit === undefined ? fmtNum(value) : `${fmtNum(value)} / ${fmtNum(limit)}`;
}

function kv(pairs) {
  return h("dl", { class: "kv" }, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function bar(fraction) {
  const inner = h("div");
  inner.style.width = `${Math.max(0, Math.min(1, fraction || 0)) * 100}%`;
  return h("div", { class: "bar" }, inner);
}

function slotsTable(states) {
  return h("table", { class: "grid slots" },
    h("thead", {}, h("tr", {}, h("th", {}, "Slot"), h("th", {}, "State"), h("th", {}, "Session"),
      h("th", {}, "Tokens cached"))),
    h("tbody", {}, states.map((s) => h("tr", { "data-slot": s.slot },
      h("td", {}, s.slot), h("td", {}, s.state), h("td", {}, s.session || "-"),
      h("td", { class: "num" }, fmtNum(s.tokens_cached))))));
}

function replicasTable(replicas) {
  return h("table", { class: "grid" },
    h("thead", {}, h("tr", {}, h("th", {}, "Replica"), h("th", {}, "Health"), h("th", {}, "Outstanding"),
      h("th", {}, "Last error"))),
    h("tbody", {}, replicas.map((r) => h("tr", {},
      h("td", {}, r.url), h("td", { class: r.healthy ? "status-2" : "status-5" }, r.healthy ? "healthy" : "down"),
      h("td", { class: "num" }, fmtNum(r.outstanding)), h("td", {}, r.last_error || "-")))));
}

const SHOWN = new Set(["loaded", "slots", "slots_in_use", "slot_states", "host_cache_bytes", "host_cache_entries",
  "host_cache_max_bytes"]);

function card(id, info) {
  const [state, tone] = stateOf(info);
  const ds = info.driver_status || {};
  const parts = [
    h("h2", {}, id, h("span", { class: `badge ${tone}`, "data-state": state }, state),
      h("span", { class: "muted" }, info.driver)),
    kv([
      ["context", fmtNum(info.context_window)],
      ["generating", of(info.running, info.max_concurrency)],
      ["queue", `${of(info.waiting, info.queue_depth)} waiting (timeout ${fmtSeconds(info.queue_timeout)})`],
      ds.slots !== undefined && ["slots in use", of(ds.slots_in_use, ds.slots)],
      info.idle_unload !== undefined && ["idle", `${fmtSeconds(info.idle_s)}${info.idle_unload ? ` / unload after ${fmtSeconds(info.idle_unload)}` : ""}`],
      info.memory_bytes ? ["memory", fmtBytes(info.memory_bytes)] : null,
      ds.host_cache_max_bytes !== undefined && ["host cache",
        h("span", {}, `${fmtBytes(ds.host_cache_bytes)} of ${fmtBytes(ds.host_cache_max_bytes)}, ${fmtNum(ds.host_cache_entries)} entries`,
          bar(ds.host_cache_bytes / ds.host_cache_max_bytes))],
      ...Object.entries(ds).filter(([k]) => !SHOWN.has(k)).map(([k, v]) => [k, typeof v === "object" ? JSON.stringify(v) : String(v)]),
    ]),
  ];
  if (ds.slot_states && ds.slot_states.length) parts.push(slotsTable(ds.slot_states));
  if (info.replicas) parts.push(replicasTable(info.replicas));
  return h("div", { class: "card", "data-model": id }, parts);
}

export async function refresh() {
  const status = await getJSON("api/status");
  const worker = status.worker && status.worker.count > 1 ? `, worker ${status.worker.index + 1} of ${status.worker.count}` : "";
  document.getElementById("server-info").textContent = `v${status.version}, up ${fmtSeconds(status.uptime_s)}${worker}`;
  const models = Object.entries(status.models);
  fill(document.getElementById("models"),
    models.length ? models.map(([id, info]) => card(id, info)) : h("p", { class: "muted" }, "No models are served."));
}
