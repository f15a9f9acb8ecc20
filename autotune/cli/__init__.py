"""Command-line entry points (scripts/ and the console scripts call these)."""
