"""Reusable widgets of the console (log panes, fleet tables)."""
