"""Transports: how mcpsync moves frames to and from a server (stdio subprocess, HTTP)."""
