"""The ``missive`` command line."""
