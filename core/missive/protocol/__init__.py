"""The wire: the Messages API's shapes, errors, ids, SSE framing and JSON at the edges."""
