"""Tests of the Textual console (pilot-driven, 120x36)."""
