"""Tests of the package layout: the import layers and the public names."""
