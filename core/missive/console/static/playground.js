// "Playground": a request built from a form, streamed through POST
// /v1/messages like any client's, its blocks shown as they arrive (text,
// thinking, tool calls with their input), its usage and stop reason, and the
// same request as curl and Python SDK code.
import { call, errorOf, fill, fmtNum, getJSON, h, readEvents } from "./api.js";
import { bodyText, curl, python } from "./code.js";

const $ = (id) => document.getElementById(id);
let modelsLoaded = false;
let controller = null;
let codeKind = "curl";
let lastAnswer = null; // the content blocks of the last complete answer

export function keyChanged() { modelsLoaded = false; }

export function init() {
  addMessage("user", "Hello! Who are you?");
  $("pg-add").addEventListener("click", () => addMessage(lastRole() === "user" ? "assistant" : "user", ""));
  $("pg-form").addEventListener("submit", (event) => { event.preventDefault(); send(); });
  $("pg-form").addEventListener("input", showCode);
  $("pg-form").addEventListener("change", showCode);
  $("pg-stop").addEventListener("click", () => controller && controller.abort());
  $("pg-batch").addEventListener("click", submitBatch);
  for (const button of document.querySelectorAll(".code-tabs button")) {
    button.addEventListener("click", () => { codeKind = button.dataset.code; showCode(); });
  }
  showCode();
}

function lastRole() {
  const rows = [...document.querySelectorAll("#pg-messages .pg-msg select")];
  return rows.length ? rows[rows.length - 1].value : "assistant";
}

function addMessage(role, text) {
  const select = h("select", {}, ["user", "assistant"].map((r) => h("option", { value: r, selected: r === role }, r)));
  const area = h("textarea", { rows: 3, placeholder: "text, or a JSON list of content blocks" });
  area.value = text;
  const row = h("div", { class: "pg-msg" }, select, area,
    h("button", { type: "button", class: "small", title: "Remove", onclick: () => { row.remove(); showCode(); } }, "×"));
  $("pg-messages").append(row);
  showCode();
  return area;
}

export async function refresh() {
  if (modelsLoaded) return;
  const page = await getJSON("../v1/models?limit=1000");
  const select = $("pg-model");
  const keep = select.value;
  fill(select, page.data.map((m) => h("option", { value: m.id }, m.display_name && m.display_name !== m.id ? `${m.id} (${m.display_name})` : m.id)));
  if (page.data.some((m) => m.id === keep)) select.value = keep;
  modelsLoaded = true;
  showCode();
}

function content(text) {
  const trimmed = text.trim();
  if (trimmed.startsWith("[")) {
    try { return JSON.parse(trimmed); } catch { /* plain text after all */ }
  }
  return text;
}

/** The request body, and the tools text when it is not valid JSON (sent as typed). */
function build() {
  const body = { model: $("pg-model").value, max_tokens: Number($("pg-max-tokens").value) };
  if ($("pg-system").value.trim()) body.system = $("pg-system").value;
  body.messages = [...document.querySelectorAll("#pg-messages .pg-msg")].map((row) => ({
    role: row.querySelector("select").value, content: content(row.querySelector("textarea").value),
  }));
  let toolsText = null, toolsError = null;
  const tools = $("pg-tools").value.trim();
  if (tools) {
    try { body.tools = JSON.parse(tools); } catch (exc) { toolsText = tools; toolsError = exc.message; }
  }
  if ($("pg-tool-choice").value) body.tool_choice = { type: $("pg-tool-choice").value };
  const thinking = $("pg-thinking").value;
  if (thinking === "enabled") body.thinking = { type: "enabled", budget_tokens: Number($("pg-budget").value) };
  else if (thinking === "adaptive") body.thinking = { type: "adaptive" };
  if ($("pg-temperature").value !== "") body.temperature = Number($("pg-temperature").value);
  body.stream = true;
  return { body, toolsText, toolsError };
}

function showCode() {
  const { body, toolsText } = build();
  for (const b of document.querySelectorAll(".code-tabs button")) b.classList.toggle("active", b.dataset.code === codeKind);
  $("pg-code").textContent = codeKind === "curl" ? curl(bodyText(body, toolsText)) : python(body, toolsText);
}

function errorBox(text) {
  return h("div", { class: "error-box", role: "alert" }, text);
}

/** Renders one streamed answer into the page, event by event. */
class Answer {
  constructor(root) {
    this.root = root;
    this.blocks = [];
    this.usage = {};
    this.stop = null;
    fill(root);
  }

  event(ev) {
    if (ev.type === "message_start") {
      Object.assign(this.usage, ev.message.usage || {});
      $("pg-status").textContent = `Streaming ${ev.message.id} from ${ev.message.model}…`;
    } else if (ev.type === "content_block_start") {
      this.start(ev.index, ev.content_block);
    } else if (ev.type === "content_block_delta") {
      this.delta(this.blocks[ev.index], ev.delta);
    } else if (ev.type === "content_block_stop") {
      const block = this.blocks[ev.index];
      if (block && block.json !== null) {
        try { block.data.input = JSON.parse(block.json || "{}"); block.body.textContent = JSON.stringify(block.data.input, null, 2); } catch { /* shown raw */ }
      }
    } else if (ev.type === "message_delta") {
      Object.assign(this.usage, ev.usage || {});
      this.stop = ev.delta || {};
    } else if (ev.type === "error") {
      this.root.append(errorBox(`${ev.error.type}: ${ev.error.message}`));
      this.root.dataset.state = "error";
    }
  }

  start(index, block) {
    const data = { ...block };
    const body = h("div", { class: "body" });
    let label = block.type;
    if (block.type === "text") body.textContent = block.text || "";
    else if (block.type === "thinking") body.textContent = block.thinking || "";
    else if (block.type === "tool_use" || block.type === "server_tool_use") {
      label = `${block.type === "tool_use" ? "tool call" : "server tool call"}: ${block.name} (${block.id})`;
    } else body.textContent = JSON.stringify(block, null, 2);
    const kind = ["text", "thinking", "tool_use"].includes(block.type) ? block.type : "other";
    const el = h("div", { class: `block ${kind}`, "data-index": index, "data-name": block.name || null },
      h("div", { class: "label" }, label), body);
    this.root.append(el);
    this.blocks[index] = { data, body, el, json: "input" in block ? "" : null };
  }

  delta(block, delta) {
    if (!block) return;
    if (delta.type === "text_delta") { block.body.append(delta.text); block.data.text = (block.data.text || "") + delta.text; }
    else if (delta.type === "thinking_delta") { block.body.append(delta.thinking); block.data.thinking = (block.data.thinking || "") + delta.thinking; }
    else if (delta.type === "input_json_delta") { block.json += delta.partial_json; block.body.textContent = block.json; }
    else if (delta.type === "signature_delta") { block.data.signature = delta.signature; block.el.dataset.signed = "true"; }
  }

  usageLine() {
    const u = this.usage;
    const stop = this.stop ? `stop_reason ${this.stop.stop_reason}${this.stop.stop_sequence ? ` (${this.stop.stop_sequence})` : ""}, ` : "";
    return `${stop}input ${fmtNum(u.input_tokens)}, cache read ${fmtNum(u.cache_read_input_tokens)}, ` +
      `cache creation ${fmtNum(u.cache_creation_input_tokens)}, output ${fmtNum(u.output_tokens)} tokens`;
  }
}

async function send() {
  const { body, toolsText, toolsError } = build();
  showCode(); // the code of what is sent
  const answerRoot = $("pg-answer");
  const answer = new Answer(answerRoot);
  answerRoot.dataset.state = "sending";
  $("pg-usage").textContent = "";
  $("pg-status").textContent = "Sending…";
  $("pg-send").disabled = true;
  $("pg-stop").disabled = false;
  controller = new AbortController();
  const started = performance.now();
  try {
    const response = await call("../v1/messages", {
      method: "POST", body: bodyText(body, toolsText), signal: controller.signal,
      headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
    });
    const requestId = response.headers.get("request-id");
    if (!response.ok) {
      const error = await errorOf(response);
      answerRoot.append(errorBox(error.describe()));
      if (toolsError) answerRoot.append(h("div", { class: "muted" }, `(tools is not valid JSON: ${toolsError})`));
      answerRoot.dataset.state = "error";
      $("pg-status").textContent = `The server refused the request (request-id ${requestId}).`;
      return;
    }
    answerRoot.dataset.state = "streaming";
    let first = null;
    await readEvents(response, (ev) => {
      if (first === null && ev.type === "content_block_delta") first = performance.now() - started;
      answer.event(ev);
      $("pg-usage").textContent = answer.usageLine();
    });
    if (answerRoot.dataset.state !== "error") answerRoot.dataset.state = "done";
    lastAnswer = answer.blocks.filter(Boolean).map((b) => b.data);
    $("pg-status").textContent = `request-id ${requestId}` + (first !== null ? `, first token after ${Math.round(first)} ms` : "") +
      `, ${Math.round(performance.now() - started)} ms in all.`;
    if (lastAnswer.length) $("pg-status").append(" ", h("button", { type: "button", class: "small", onclick: appendAnswer }, "Continue the conversation"));
  } catch (exc) {
    const stopped = exc.name === "AbortError";
    answerRoot.append(errorBox(stopped ? "Stopped." : (exc.describe ? exc.describe() : String(exc))));
    answerRoot.dataset.state = stopped ? "stopped" : "error";
    $("pg-status").textContent = "";
  } finally {
    $("pg-send").disabled = false;
    $("pg-stop").disabled = true;
    controller = null;
  }
}

/** Add the last answer as an assistant message (its blocks), and a user message to write (tool results to fill in). */
function appendAnswer() {
  if (!lastAnswer) return;
  const plain = lastAnswer.every((b) => b.type === "text");
  addMessage("assistant", plain ? lastAnswer.map((b) => b.text).join("") : JSON.stringify(lastAnswer, null, 2));
  const calls = lastAnswer.filter((b) => b.type === "tool_use");
  const results = calls.map((c) => ({ type: "tool_result", tool_use_id: c.id, content: "" }));
  addMessage("user", results.length ? JSON.stringify(results, null, 2) : "").focus();
  lastAnswer = null;
}

async function submitBatch() {
  const { body, toolsText } = build();
  delete body.stream;
  const text = `{"requests": [{"custom_id": "playground-${Date.now()}", "params": ${bodyText(body, toolsText)}}]}`;
  const answerRoot = $("pg-answer");
  fill(answerRoot);
  try {
    const response = await call("../v1/messages/batches", {
      method: "POST", body: text, headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
    });
    if (!response.ok) throw await errorOf(response);
  } catch (exc) {
    answerRoot.append(errorBox(exc.describe ? exc.describe() : String(exc)));
    answerRoot.dataset.state = "error";
    return;
  }
  location.hash = "#batches";
}
