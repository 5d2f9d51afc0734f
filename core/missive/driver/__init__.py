"""The driver contract: the interface a backend implements, its events and its capabilities."""
