"""Stream an answer from a running Missive server with the official SDK.

Start the server first (``./scripts/serve``), then::

    .venv/bin/python examples/quickstart.py "Why is the sky blue?"
"""

from __future__ import annotations

import os
import sys

import anthropic


def main() -> None:
    prompt = " ".join(sys.argv[1:]) or "Write a haiku about the sea."
    client = anthropic.Anthropic(
        base_url=os.environ.get("ANTHROPIC_BASE_URL", "http://127.0.0.1:8642"),
        api_key=os.environ.get("ANTHROPIC_API_KEY", "unused"),
    )
    with client.messages.stream(
        model=os.environ.get("MISSIVE_MODEL", "smollm2-135m"),
        max_tokens=200,
        messages=[{"role": "user", "content": prompt}],
    ) as stream:
        for text in stream.text_stream:
            print(text, end="", flush=True)
        final = stream.get_final_message()
    usage = final.usage
    print(
        f"\n\n[{final.stop_reason}; {usage.input_tokens} input tokens"
        f" (+{usage.cache_read_input_tokens} cached), {usage.output_tokens} output tokens]"
    )


if __name__ == "__main__":
    main()
