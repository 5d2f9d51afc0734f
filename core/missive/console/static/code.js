// The playground's request as code a user can run: curl, and the official
// Python SDK (`anthropic`). The key is never written out: both read it
// from the environment.

const PLACEHOLDER = "@@missive-console-tools@@";

/**
 * The request body as JSON text. `toolsText`, when set, goes in as it was
 * typed (so a body with invalid JSON in it gets the server's own error).
 */
export function bodyText(body, toolsText) {
  if (toolsText === null) return JSON.stringify(body, null, 2);
  const text = JSON.stringify({ ...body, tools: PLACEHOLDER }, null, 2);
  return text.replace(`"tools": "${PLACEHOLDER}"`, () => `"tools": ${toolsText.trim().replace(/\n/g, "\n  ")}`);
}

/** The base URL of the server this page came from (the page is under /console/). */
export function baseUrl() {
  return new URL("..", location.href).href.replace(/\/$/, "");
}

export function curl(text) {
  let end = "JSON";
  while (text.split("\n").includes(end)) end += "_END";
  return [
    `curl ${baseUrl()}/v1/messages \\`,
    "  -H \"x-api-key: $ANTHROPIC_API_KEY\" \\",
    "  -H \"anthropic-version: 2023-06-01\" \\",
    "  -H \"content-type: application/json\" \\",
    `  -d @- <<'${end}'`,
    text,
    end,
  ].join("\n");
}

/** A JSON value as a Python literal (indented like `json.dumps(indent=4)`). */
export function py(value, indent = "") {
  const inner = indent + "    ";
  if (value === null) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "string" || typeof value === "number") return JSON.stringify(value);
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return `[\n${value.map((v) => inner + py(v, inner)).join(",\n")},\n${indent}]`;
  }
  const entries = Object.entries(value);
  if (!entries.length) return "{}";
  return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${py(v, inner)}`).join(",\n")},\n${indent}}`;
}

export function python(body, toolsText) {
  const lines = [
    "import anthropic",
    "",
    `client = anthropic.Anthropic(base_url=${JSON.stringify(baseUrl())})  # the key: ANTHROPIC_API_KEY`,
    "with client.messages.stream(",
  ];
  for (const [key, value] of Object.entries(body)) {
    if (key === "stream") continue;
    lines.push(`    ${key}=${py(value, "    ")},`);
  }
  if (toolsText !== null) {
    lines.push("    # not valid JSON, as typed:");
    lines.push(...toolsText.trim().split("\n").map((l) => `    # ${l}`));
  }
  lines.push(
    ") as stream:",
    "    for event in stream:",
    "        if event.type == \"text\":",
    "            print(event.text, end=\"\", flush=True)",
    "    message = stream.get_final_message()",
    "print()",
    "print(message.stop_reason, message.usage)",
  );
  return lines.join("\n");
}
