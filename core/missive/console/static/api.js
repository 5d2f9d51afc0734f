// Talking to the server: the API key, JSON calls, the Messages API's SSE
// stream, and a small DOM helper. Every value from the server is set as
// text (never as HTML), so nothing a request carried can run in the page.

const KEY = "missive-console-key";

export function apiKey() {
  return sessionStorage.getItem(KEY) || localStorage.getItem(KEY) || "";
}

export function setApiKey(key, remember) {
  sessionStorage.setItem(KEY, key);
  if (remember) localStorage.setItem(KEY, key);
  else localStorage.removeItem(KEY);
}

/** An answer in the API's error envelope, or a connection failure (status 0). */
export class ApiError extends Error {
  constructor(status, type, message, requestId) {
    super(message);
    this.status = status;
    this.type = type;
    this.requestId = requestId;
  }
  describe() {
    const id = this.requestId ? ` (request-id ${this.requestId})` : "";
    return this.status ? `${this.status} ${this.type}: ${this.message}${id}` : this.message;
  }
}

const listeners = { auth: [] };
/** Call `fn(error)` whenever the server refuses the key (401: missing or wrong; 403: not an admin key). */
export function onAuthNeeded(fn) { listeners.auth.push(fn); }

/** fetch() with the key; a 401 tells the auth listeners. Throws ApiError on no answer. */
export async function call(path, options = {}) {
  const headers = new Headers(options.headers || {});
  const key = apiKey();
  if (key) headers.set("x-api-key", key);
  let response;
  try {
    response = await fetch(path, { ...options, headers });
  } catch (exc) {
    if (exc.name === "AbortError") throw exc;
    throw new ApiError(0, "connection", `cannot reach the server: ${exc.message}`, null);
  }
  return response;
}

/** The API's error of a failed response (its envelope, else the status line). */
export async function errorOf(response) {
  const requestId = response.headers.get("request-id");
  let body = null;
  try { body = await response.json(); } catch { /* not JSON */ }
  const error = body && body.error ? body.error : { type: "http_error", message: response.statusText };
  const found = new ApiError(response.status, error.type, error.message, requestId);
  // 401: no key or a wrong one; 403: a key without the admin scope.
  if (response.status === 401 || response.status === 403) listeners.auth.forEach((fn) => fn(found));
  return found;
}

/** GET (or `options`) `path` and parse its JSON; throws ApiError. */
export async function getJSON(path, options = {}) {
  const response = await call(path, options);
  if (!response.ok) throw await errorOf(response);
  return response.json();
}

/**
 * Read a Messages API stream: calls `onEvent(event)` for each SSE frame's
 * data, in order, as it arrives (frames are `event: NAME\ndata: JSON\n\n`).
 */
export async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    buffer = buffer.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).trimStart()).join("\n");
      if (data) onEvent(JSON.parse(data));
    }
    if (done) return;
  }
}

/** A new element: `h("td", {class: "num"}, "12")`; strings become text nodes. */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replace `node`'s children. */
export function fill(node, ...children) {
  node.replaceChildren();
  for (const child of children.flat(Infinity)) {
    if (child !== null && child !== undefined && child !== false) node.append(child);
  }
}

export function fmtBytes(n) {
  if (typeof n !== "number") return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i ? `${n.toFixed(1)} ${units[i]}` : `${n} B`;
}

export function fmtSeconds(s) {
  if (typeof s !== "number") return "-";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(2)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

export function fmtTime(unix) {
  return new Date(unix * 1000).toLocaleTimeString([], { hour12: false });
}

export function fmtNum(n, digits = 0) {
  return typeof n === "number" ? n.toLocaleString(undefined, { maximumFractionDigits: digits }) : "-";
}
