"""Built-in behaviour, registered as plugins (so a plugin can replace it)."""
