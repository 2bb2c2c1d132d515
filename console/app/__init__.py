"""The interactive Textual console (the only package that imports textual)."""
