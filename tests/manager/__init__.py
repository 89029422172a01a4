"""Tests of the Manager, server configs, config files and the secrets handed to servers."""
