// The console's shell: tabs (the URL's #fragment), the API key dialog, the
// error banner, and polling the visible view.
import { apiKey, getJSON, onAuthNeeded, setApiKey } from "./api.js";
import * as now from "./now.js";
import * as requests from "./requests.js";
import * as graphs from "./graphs.js";
import * as playground from "./playground.js";
import * as batches from "./batches.js";

const VIEWS = { now, requests, graphs, playground, batches };
let current = null;
let timer = null;
let waitingForKey = false; // the server needs a key and none is set: no calls until one is

const banner = document.getElementById("banner");
export function showBanner(text) {
  banner.textContent = text || "";
  banner.hidden = !text;
}

/** Refresh the view shown (`poll`: the periodic refresh, not a user's action). */
async function refresh(poll = false) {
  if (!current || !current.refresh || document.hidden || waitingForKey) return;
  try {
    await current.refresh(poll);
    showBanner("");
    // The first data shown: the load time the docs quote (benchmarks/bench_console.py).
    if (!performance.getEntriesByName("missive-first-data").length) performance.mark("missive-first-data");
  } catch (exc) {
    showBanner(exc.describe ? exc.describe() : String(exc));
  }
}

function schedule() {
  clearInterval(timer);
  timer = current && current.interval ? setInterval(() => refresh(true), current.interval) : null;
}

function show(name) {
  if (!VIEWS[name]) name = "now";
  for (const section of document.querySelectorAll("section.tab")) section.hidden = section.id !== name;
  for (const link of document.querySelectorAll("#tabs a")) link.classList.toggle("active", link.dataset.tab === name);
  current = VIEWS[name];
  document.body.dataset.view = name;
  refresh();
  schedule();
}

const dialog = document.getElementById("key-dialog");
function askForKey(reason) {
  document.getElementById("key-reason").textContent = reason;
  document.getElementById("key-input").value = apiKey();
  if (!dialog.open) dialog.showModal();
}

document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  setApiKey(document.getElementById("key-input").value.trim(), document.getElementById("key-remember").checked);
  dialog.close();
  waitingForKey = false;
  refresh();
  playground.keyChanged();
});
document.getElementById("key-cancel").addEventListener("click", () => dialog.close());
document.getElementById("key-button").addEventListener("click", () => askForKey("The API key this page sends."));
onAuthNeeded((error) => askForKey(`${error.message}: enter an admin key of this server.`));

window.addEventListener("hashchange", () => show(location.hash.slice(1)));
document.addEventListener("visibilitychange", () => refresh());

async function start() {
  try {
    const config = await getJSON("api/config");
    if (config.api_key_required && !apiKey()) {
      waitingForKey = true;
      askForKey("This server needs an API key: enter an admin key.");
    }
  } catch (exc) {
    showBanner(exc.describe ? exc.describe() : String(exc));
  }
  for (const view of Object.values(VIEWS)) if (view.init) view.init();
  show(location.hash.slice(1) || "now");
  document.body.dataset.ready = "true";
}

start();
