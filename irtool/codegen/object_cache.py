"""An opt-in on-disk cache of compiled kernel objects (`irtool.build(..., cache_dir=...)`).

The unit is what the build compiles in a worker process: one LLVM module text of kernels
(`GeneratedModule.chunk_irs`). Its key is a SHA-256 of that text, which is a function of the
kernels' TIR, with the target (triple, CPU, features, as resolved on this host), the options,
the cache format and the llvmlite and LLVM versions: a changed kernel, target or toolchain is a
miss, never a stale hit. An entry is a magic line, the SHA-256 of the object and the object. It
is written to a temporary file in the cache directory and renamed over the entry, so concurrent
builds see a whole entry or none; an entry that does not read back whole (truncated, altered) is
ignored, compiled again and replaced.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

from irtool.core.diagnostics import DiagnosticError
from irtool.target import TargetOptions

MAGIC = b"irtool-object-cache 1\n"
DIGEST = hashlib.sha256().digest_size


class ObjectCache:
    """Compiled objects under `directory` (created when missing), for one `TargetOptions`."""

    def __init__(self, directory: str | os.PathLike[str], options: TargetOptions) -> None:
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DiagnosticError(f"cannot use `{directory}` as the compile cache: {exc.strerror}") from None
        self.salt = repr((MAGIC, llvmlite.__version__, llvm.llvm_version_info, options.resolved(), options)).encode()

    def path(self, text: str) -> Path:
        key = hashlib.sha256(self.salt + b"\0" + text.encode()).hexdigest()
        return self.directory / f"{key}.o"

    def load(self, text: str) -> bytes | None:
        """The object compiled from `text` before, or None (no entry, or one that is not whole)."""
        try:
            data = self.path(text).read_bytes()
        except OSError:
            return None
        head, body = data[:len(MAGIC) + DIGEST], data[len(MAGIC) + DIGEST:]
        if head != MAGIC + hashlib.sha256(body).digest():
            return None
        return body

    def store(self, text: str, obj: bytes) -> None:
        """Writes the entry atomically; a cache that cannot be written leaves the build as it is."""
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.directory)
        except OSError:
            return
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(obj).digest() + obj)
            os.replace(tmp, self.path(text))
        except OSError:
            Path(tmp).unlink(missing_ok=True)
