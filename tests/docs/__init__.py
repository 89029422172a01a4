"""The docs and examples run as written, and the project refers only to what it ships."""
