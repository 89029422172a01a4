"""Tests of the session engine (mcpsync.session) against real peer processes."""
