"""Interpreters: the numpy reference semantics."""
