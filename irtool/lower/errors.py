"""The error a compute rule raises; the lowering locates it at the operator call."""


class LoweringError(Exception):
    """A rule cannot lower this call; the message completes "`<op>` ..."."""
