"""Pydantic models of the Messages API at the protocol edge."""
