"""Lowering Relay to TIR: tensor expressions (`te`), per-family compute rules (`rules`), and the
lowering of one primitive function (`primitive`) and of a whole module (`module`)."""
