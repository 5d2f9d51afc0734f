"""One answer: the conversation, its prompt rendering, stop sequences and the stream of API events."""
