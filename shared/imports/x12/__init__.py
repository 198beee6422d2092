"""The X12 834 reader, one module per concern (lower modules first; each imports only those
above it in this list, and none imports `acks`, the importer or anything that does):

    _pyx12     every pyx12 internal the reader reads or replaces, each with a fallback
    errors     the error list handed to pyx12 (`SegmentErrors`), masked messages
    speedups   faster equivalents of three pyx12 internals: `install()`, never on import
    stream     segments from a text stream; resume points, resuming mid-file
    members    what a member loop means: `MemberLoop` -> `Change`; `FileFacts`
    families   member ids within a family, the family and loop caps (`ReadLimits`)
    reader     the two passes: `check_envelope` / `scan_envelope`, `read_834`

docs/imports.md describes what is read and how; this package imports nothing on import.
"""
