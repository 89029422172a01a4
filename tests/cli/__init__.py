"""Tests of the mcpsync command, run as a real subprocess."""
