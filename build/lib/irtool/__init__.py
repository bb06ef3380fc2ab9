"""irtool: a hackable Relay/TIR compiler toolchain in Python."""

__version__ = "0.1.0"
