# SPDX-License-Identifier: Apache-2.0
"""The Lance v2 file container (footer, column and page metadata, buffers) and its page
encodings: :mod:`.container` and :mod:`.reader` read files, :mod:`.encodings`, :mod:`.v2_0`
and :mod:`.v2_1` decode their pages on the CPU, :mod:`.arrow` assembles Arrow arrays."""

#: The file format version written when none is asked for (pylance 14.0.2's "stable").
STABLE_VERSION = "2.2"


def stable_version() -> str:
    """The file format version new datasets get by default (pylance's
    ``lance.file.stable_version``): ``"2.2"``."""
    return STABLE_VERSION


#: pylance's single-file API (``lance.file.LanceFileReader`` / ``LanceFileWriter``...), which
#: lives in :mod:`lance_gpu.file.single_file`.
_SINGLE_FILE_API = frozenset({
    "LanceBufferDescriptor", "LanceColumnMetadata", "LanceColumnStatistics", "LanceFileMetadata",
    "LanceFileReader", "LanceFileSession", "LanceFileStatistics", "LanceFileWriter", "LancePageMetadata", "ReaderResults",
})


def __getattr__(name: str) -> object:
    """``lance_gpu.file.LanceFileReader`` etc. (pylance's ``lance.file`` names), loaded on
    first use from :mod:`lance_gpu.file.single_file` (whose writer and reader would load the
    page encoders and decoders with this package)."""
    if name in _SINGLE_FILE_API:
        from lance_gpu.file import single_file

        return getattr(single_file, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
