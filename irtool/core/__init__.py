"""The bottom layer every other package may import: source locations (`span`) and located
diagnostics with the source registry (`diagnostics`). It imports nothing else of irtool."""
