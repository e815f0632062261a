"""Command-line interface: one thin module per command group, wired in ``main``."""
