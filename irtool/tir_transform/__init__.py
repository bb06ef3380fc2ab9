"""TIR-to-TIR transformations: the rewriting walk, the arithmetic simplifier, buffer
flattening and loop transformations that the `tir-*` passes (and later scheduling) use."""
