"""Tests of the transports, one folder per transport."""
