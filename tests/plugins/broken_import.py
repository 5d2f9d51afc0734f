"""A plugin that fails at import: the kernel must report it and load the rest."""

raise RuntimeError("this plugin is broken on purpose")
