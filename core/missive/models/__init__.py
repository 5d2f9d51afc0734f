"""The served models: the table, residency, the default model, model references and commands."""
