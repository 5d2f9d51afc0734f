"""Tool use: definitions the model sees, history checks, and tool call parsers."""
