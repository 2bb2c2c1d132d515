"""Test doubles, named fake (never shipped: the wheel carries ``console`` and ``remote`` only)."""
