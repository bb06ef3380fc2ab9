"""Editor support for `.relay`/`.tir` files: highlighting, formatting, a language server, graph pictures."""
