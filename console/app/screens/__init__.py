"""The console's screens (Textual)."""
