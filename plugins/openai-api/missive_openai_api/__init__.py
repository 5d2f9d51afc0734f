"""OpenAI's Chat Completions API as a Missive front door (docs/clients/openai-sdk.md)."""
