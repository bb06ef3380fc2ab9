"""Named passes and the pass manager (installed as `irtool.passes`)."""
