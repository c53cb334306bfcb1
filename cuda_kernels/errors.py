"""Errors raised by the decode primitives, and the device-side error flag.

The primitives know nothing about files: they raise :class:`CorruptInputError`
(a ``ValueError``) when their input cannot be decoded without reading or
writing out of bounds.  The Lance layer catches it and re-raises its own error
with the file name attached.

On the GPU a kernel cannot raise.  Kernels instead OR an error code into a
one-element ``int32`` device array (the *error flag*); the host wrapper reads
it back once after the launch (a single 4-byte copy, done anyway when the
wrapper needs the output size) and raises :class:`CorruptInputError`.
"""

import numpy as np

__all__ = [
    "CorruptInputError",
    "ERR_OUT_OF_BOUNDS",
    "ERR_BAD_CODE",
    "ERR_TRUNCATED",
    "ERR_BAD_LEVEL",
    "ERR_BAD_UTF8",
    "new_error_flag",
    "raise_if_flagged",
    "describe_error_code",
]

# Error codes OR-ed into the device flag (one bit each, so several kernels or
# several failing threads can report at once without losing information).
ERR_OUT_OF_BOUNDS = 1  # an index or an offset points outside its buffer
ERR_BAD_CODE = 2  # an FSST code refers to a symbol that does not exist
ERR_TRUNCATED = 4  # an FSST escape byte is the last byte of a string
ERR_BAD_LEVEL = 8  # a repetition/definition level is out of range
ERR_BAD_UTF8 = 16  # string bytes are not well-formed UTF-8

_CODE_NAMES = {
    ERR_OUT_OF_BOUNDS: "index or offset out of bounds",
    ERR_BAD_CODE: "code refers to a symbol beyond the symbol table",
    ERR_TRUNCATED: "input ends in the middle of an escape sequence",
    ERR_BAD_LEVEL: "repetition or definition level out of range",
    ERR_BAD_UTF8: "invalid utf-8 sequence",
}


class CorruptInputError(ValueError):
    """The input of a decode primitive is inconsistent (corrupt data).

    ``code`` holds the OR of the ``ERR_*`` bits that were detected (0 when the
    CPU path raised without a code).
    """

    def __init__(self, message, code=0):
        super().__init__(message)
        self.code = int(code)


def describe_error_code(code):
    """Return a human readable description of an OR of ``ERR_*`` bits."""
    names = [name for bit, name in _CODE_NAMES.items() if code & bit]
    unknown = code & ~sum(_CODE_NAMES)
    if unknown:
        names.append(f"unknown error bits 0x{unknown:x}")
    return "; ".join(names) if names else "no error"


def new_error_flag():
    """A zeroed one-element ``int32`` device array used as error flag (from CuPy's pool
    when CuPy is in use, so that a launch does not pay a ``cudaMalloc``)."""
    from . import _device

    return _device.device_zeros(1, np.int32)


def raise_if_flagged(flag, what):
    """Copy the device error flag back and raise if any bit is set.

    :param flag: the one-element device array filled by a kernel.
    :param what: the name of the primitive, used in the message.
    """
    code = int(flag.copy_to_host()[0])
    if code:
        msg = f"{what}: corrupt input ({describe_error_code(code)})"
        raise CorruptInputError(msg, code)
