"""irtool: a hackable Relay/TIR compiler toolchain in Python."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # `irtool.build` loads the build driver (and llvmlite, the code generator) only when first used.
    if name == "build":
        from irtool.driver import build
        return build
    raise AttributeError(f"module 'irtool' has no attribute {name!r}")
