"""Helpers the tests share, imported as ``tests.support.<module>``."""
