"""Errors raised by the decode primitives, and the device-side error flag.

The primitives know nothing about files: they raise :class:`CorruptInputError`
(a ``ValueError``) when their input cannot be decoded without reading or
writing out of bounds.  The Lance layer catches it and re-raises its own error
with the file name attached.

On the GPU a kernel cannot raise.  Kernels instead OR an error code into a
one-element ``int32`` device array (the *error flag*); the host wrapper reads
it back once after the launch (a single 4-byte copy, done anyway when the
wrapper needs the output size) and raises :class:`CorruptInputError`.

Inside :func:`deferred_errors` the flags of every launch are slots of one
device array, zeroed once, and nothing is read back per launch: the block's
end reads every slot in one copy and raises for the first flagged launch, in
launch order.  A pipeline that launches many kernels then pays one blocking
copy instead of one per launch.  The kernels bound every read and write, so a
launch after a flagged one is safe; if the block raises anyway (an allocation
sized from corrupt data, say), the flags are read first and a flagged launch
is what is raised, the other exception chained.
"""

import contextlib
import threading

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
    "deferred_errors",
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

    #: the position of the value at fault, set only by raisers that know it
    #: (:func:`cuda_kernels.utf8.check_variable`); absent otherwise
    index: int
    #: the segment at fault, set by the batched (many-segment) raisers that know it
    #: (:func:`cuda_kernels.levels.unravel_segments_gpu`); absent otherwise
    segment: int
    #: True when the fault is an earlier launch's, settled by a later call (not that call's
    #: input: :func:`cuda_kernels.levels.unravel_segments_gpu`); absent otherwise
    earlier: bool

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


class _ErrorScope:
    """The error flags of the launches of one :func:`deferred_errors` block: slots of
    zeroed ``int32`` device arrays of :attr:`SLOTS` each, handed out in launch order."""

    SLOTS = 256

    def __init__(self):
        self.blocks = []  # device int32[SLOTS] arrays
        self.used = 0  # slots handed out
        self.names = {}  # slot -> primitive name (set by raise_if_flagged)
        self.explain = {}  # slot -> callable returning the exception to raise for it
        self.slot_of = {}  # id(flag view) -> slot
        self.flags = []  # the views handed out, kept alive so that their ids stay theirs
        self.settled = 0  # slots already read back (by :meth:`settle`)

    def take(self):
        from . import _device

        block, at = divmod(self.used, self.SLOTS)
        if block == len(self.blocks):
            self.blocks.append(_device.device_zeros(self.SLOTS, np.int32))
        flag = self.blocks[block][at : at + 1]
        self.slot_of[id(flag)] = self.used
        self.flags.append(flag)
        self.used += 1
        return flag

    def note(self, flag, what, explain=None):
        """Remember who launched with ``flag`` (and how to explain a flag); False if the
        flag is not this scope's."""
        slot = self.slot_of.get(id(flag))
        if slot is None:
            return False
        self.names[slot] = what
        if explain is not None:
            self.explain[slot] = explain
        return True

    def pending(self):
        """The flags not read back yet, when they are all in the first block: ``(device
        int32 view, count)`` for a wrapper that reads them back with its own results (then
        :meth:`settle`), else None."""
        if self.settled or not self.used or self.used > self.SLOTS:
            return None
        return self.blocks[0][: self.used], self.used

    def settle(self, codes):
        """``codes``: the first ``len(codes)`` slots, read back by a wrapper with its own
        results (:meth:`pending`); raise for the first flagged launch among them.  The
        block's end then reads only the slots handed out later."""
        self.settled = len(codes)
        self._raise_first(np.asarray(codes), 0)

    def _raise_first(self, codes, first_slot):
        hit = np.flatnonzero(codes)
        if hit.size:
            slot = first_slot + int(hit[0])
            code = int(codes[hit[0]])
            if slot in self.explain:
                raise self.explain[slot]()
            what = self.names.get(slot, "kernel")
            msg = f"{what}: corrupt input ({describe_error_code(code)})"
            raise CorruptInputError(msg, code)

    def check(self):
        """Read every slot handed out and not yet settled (one copy per block of slots)
        and raise for the first flagged launch."""
        from . import _device

        for k, block in enumerate(self.blocks):
            lo = max(self.settled - k * self.SLOTS, 0)
            hi = min(self.used - k * self.SLOTS, self.SLOTS)
            if hi <= lo:
                continue
            self._raise_first(_device.to_host(block[lo:hi]), k * self.SLOTS + lo)


_scopes = threading.local()


def _scope():
    stack = getattr(_scopes, "stack", None)
    return stack[-1] if stack else None


@contextlib.contextmanager
def deferred_errors():
    """Defer the error checks of the launches made in this thread inside the block to its
    end: one copy back for all of them (see the module docstring).  Nested blocks check at
    their own end.

    :raises CorruptInputError: at the end of the block, for the first flagged launch.
    """
    scope = _ErrorScope()
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    stack.append(scope)
    try:
        yield scope
    except BaseException as exc:
        stack.pop()
        if scope.used and not isinstance(exc, CorruptInputError):
            scope.check()  # a flagged launch explains the failure better (exc chained)
        raise
    stack.pop()
    if scope.used:
        scope.check()


def pending_flags():
    """In a :func:`deferred_errors` block, the flags of its launches so far when a wrapper
    may read them back with its own results: ``(device int32 view, count)``, else None;
    the wrapper passes what it read to :func:`settle_flags`."""
    scope = _scope()
    return None if scope is None else scope.pending()


def settle_flags(codes):
    """The flags :func:`pending_flags` gave, read back: raise for the first flagged launch
    (it explains a later failure best); the block's end reads only the later ones."""
    scope = _scope()
    if scope is not None:
        scope.settle(codes)


def new_error_flag():
    """A zeroed one-element ``int32`` device array used as error flag (from CuPy's pool
    when CuPy is in use, so that a launch does not pay a ``cudaMalloc``); inside
    :func:`deferred_errors`, the next slot of the block's flags."""
    scope = _scope()
    if scope is not None:
        return scope.take()
    from . import _device

    return _device.device_zeros(1, np.int32)


def raise_if_flagged(flag, what, explain=None):
    """Copy the device error flag back and raise if any bit is set (inside
    :func:`deferred_errors`: note the launch, checked at the block's end).

    :param flag: the one-element device array filled by a kernel.
    :param what: the name of the primitive, used in the message.
    :param explain: optional callable returning the exception to raise instead (it may
        read more back from the device: it only runs when the flag is set).
    """
    scope = _scope()
    if scope is not None and scope.note(flag, what, explain):
        return
    code = int(flag.copy_to_host()[0])
    if code and explain is not None:
        raise explain()
    if code:
        msg = f"{what}: corrupt input ({describe_error_code(code)})"
        raise CorruptInputError(msg, code)
