"""Tests of the user-facing client (mcpsync.Client and connect) against real servers."""
