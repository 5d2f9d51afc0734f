"""The HTTP server: the Quart app, routes, auth, admission, shutdown, workers, metrics, logs."""
