"""Tests of mcpsync.Server: registry, schemas, validation, both eras, serve() on real pipes."""
