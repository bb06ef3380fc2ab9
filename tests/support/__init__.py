"""Test support shared by the whole suite (hypothesis strategies in `strategies.py`)."""
