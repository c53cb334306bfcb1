# SPDX-License-Identifier: Apache-2.0
"""Compressive encodings of file versions 2.1 and 2.2 (``lance.encodings21``).

One home per encoding: a module, or a package holding the encoding's CPU decoder and CPU
encoder (``__init__``), its device encoder (``device.py``, numba-cuda kernels), its compiled
CPU loops (``_native.py`` / ``_encoder.py``), the host side of its device decoding
(``gpu_plan.py``: which of its forms the device decodes, where its blocks / runs /
offsets lie in the staged chunk bytes, and the work rows of its page kinds, functions over
protobufs, NumPy arrays and a read unit's work lists (``base.DeviceUnit``), for
:mod:`lance_gpu.gpu.plan`) and the device decoding kernels that know its bytes
(``decode_kernels.py``, numba-cuda, launched by :mod:`lance_gpu.gpu.decode`).  This module registers them in **one** place, :data:`ENCODINGS`:
per ``CompressiveEncoding`` oneof field, its home, its CPU decoders, its device planning,
the device kernels that decode it and its encoders.  From it:

* the CPU decoders go into the tables of :mod:`~lance_gpu.file.encodings.dispatch`, whose
  :func:`decode_miniblock`, :func:`decode_block` and :func:`fixed_bits` this module hands
  on (anything not registered raises :class:`~lance_gpu.errors.UnsupportedEncodingError`
  naming it);
* the GPU planner asks :func:`device_value_form`, :func:`device_level_form` and
  :func:`device_full_zip_form` how the device decodes a page's values, levels and full-zip
  values (and :func:`device_level_key` what a level emission reads of its encoding) (the dispatch on the oneof: anything not registered is read on the CPU,
  :class:`~lance_gpu.file.encodings.base.DeviceUnsupported` saying why), and
  :func:`device_value_emitter` (by kernel family, :attr:`Registration.families`) and
  :func:`device_level_emitter` (by encoding) what emits their work (the home's
  ``emit_values`` / ``emit_levels``, :data:`EMIT_FUNCTIONS`); what else an encoding gives
  (dictionary indices, FSST tables, block or run positions) it calls in that encoding's
  ``gpu_plan``;
* the device page writer (``lance_gpu.write.device_pages``) takes its device encoders from
  :data:`ENCODERS` by name (tests swap them there); the CPU page writer
  (``lance_gpu.file.writer.pages``) calls each encoding's encoder directly, beside the same
  encoding's size estimators it chooses by (run counts, bit widths, inline sizes), which
  are not encoders and have no place in a registry.

=========================  ===========================================================
field                      home; device planning (families it emits); device kernels
=========================  ===========================================================
``flat``                   :mod:`.flat`; ``flat.gpu_plan`` (``flat``, Flat16 levels);
                           batched copy, bits to bytes
``fixed_size_list``        :mod:`.fixed_size_list`; ``fixed_size_list.gpu_plan`` (Flat
                           items, emitted as ``flat``; layers of item validity (nested
                           too), ``fsl_valid``: their bits spread, the items as Flat's); batched
                           copy, bits to bytes (booleans, item validity), full-zip walk
                           (item validity split from each row)
``variable``               :mod:`.variable`; ``variable.gpu_plan`` (``var``); variable
                           spans, full-zip walk
``fsst``                   :mod:`.fsst`; ``fsst.gpu_plan`` (as ``var``; symbol tables,
                           FSST segments); variable spans, FSST lengths / decode
``inline_bitpacking``      :mod:`.bitpacking`; ``bitpacking.gpu_plan``
                           (``inline_bitpacking``, levels); scatter unpack
``out_of_line_bitpacking`` :mod:`.bitpacking`; ``bitpacking.gpu_plan`` (levels);
                           scatter unpack, batched copy (tails)
``rle``                    :mod:`.rle`; ``rle.gpu_plan`` (``rle``, levels); RLE chunks
``dictionary``             :mod:`.dictionary`; ``dictionary.gpu_plan`` (page
                           dictionaries, a layout feature: indices, items); dictionary
                           spans
``constant``               :mod:`.constant`; CPU only (``cpu_only``: a block form; pylance's
                           constant pages are ConstantLayout, filled on the device)
``byte_stream_split``      :mod:`.byte_stream_split`; CPU only (no un-split kernel)
``general``                :mod:`.general`; CPU only (zstd / LZ4: no device
                           decompressor; compressed page dictionaries are decompressed
                           on the host while planning)
``packed_struct``          :mod:`.packed_struct`; CPU only (no kernel for packed rows)
=========================  ===========================================================

A page whose values use a CPU-only encoding is read by the CPU reader (each registration
says why in :attr:`Registration.cpu_only`); where the planner decodes blocks on the host
(page dictionaries, constant-page levels) it uses every registered CPU decoder;
``variable_packed_struct`` has no decoder (it raises as unsupported).  The planning modules are named, not imported, here
(:attr:`Registration.gpu_plan`, imported by :func:`gpu_plan` on the GPU planner's first
use, so a CPU read loads none), and so are the device kernels, as ``"module:function"``
(:attr:`Registration.kernels`): the ones that know an encoding's bytes in its package's
``decode_kernels``, the full-zip walk in the layout's home (``lance_gpu.file.v2_1.fullzip_kernels``),
the format-agnostic ones in ``cuda_kernels`` (numba loads on first use).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, NamedTuple

from lance_gpu.file.encodings import (
    bitpacking,
    byte_stream_split,
    constant,
    dictionary,
    fixed_size_list,
    flat,
    fsst,
    general,
    packed_struct,
    rle,
    variable,
)
from lance_gpu.file.encodings.base import ChunkBuffers, DecodeContext, DeviceLeaf, DeviceUnsupported, one_chunk_buffer, refuse_values
from lance_gpu.file.encodings.bitpacking import device as bitpacking_device
from lance_gpu.file.encodings.dictionary import device as dictionary_device
from lance_gpu.file.encodings.dispatch import decode_block, decode_miniblock, fixed_bits, register
from lance_gpu.file.encodings.fsst import device as fsst_device
from lance_gpu.file.encodings.rle import device as rle_device
from lance_gpu.file.encodings.variable import device as variable_device


class Encoder(NamedTuple):
    """An encoding's encoders: ``cpu`` takes host arrays, ``device`` device arrays; both
    give the same bytes (None: that side has none, the page encoder does the work)."""

    cpu: Callable[..., Any] | None
    device: Callable[..., Any] | None


@dataclass(frozen=True, slots=True)
class Registration:
    """One ``CompressiveEncoding`` oneof field: everything of it, named in one place.

    * ``home``: the module or package holding its CPU decoder (and CPU encoder);
    * ``miniblock`` / ``block`` / ``fixed_bits``: its CPU decoders (mini-block chunks, one
      buffer, bits per value of a full-zip page), as :func:`dispatch.register` takes them;
      ``selecting``: ``miniblock`` takes ``select=``;
    * ``gpu_plan``: the module of its device planning (host side; its name under this
      package, imported on the planner's first use, :func:`gpu_plan`, so that a CPU read
      loads none), None where the device does not decode it; ``plans``: which of its forms
      the planner's dispatch asks it for this field -- ``"values"`` (``value_form``,
      :func:`device_value_form`), ``"levels"`` (``level_form``, :func:`device_level_form`),
      ``"full_zip"`` (``full_zip_form``, :func:`device_full_zip_form`);
    * ``families``: the kernel families of value forms (the first item of a form,
      :func:`device_value_form`) whose work its ``gpu_plan`` emits (``emit_values``,
      :func:`device_value_emitter`; one registration per family); its ``"levels"`` plan
      comes with ``emit_levels`` (:func:`device_level_emitter`);
    * ``kernels``: the device kernels that decode it, ``"module:function"``;
    * ``encoders``: its encoders by the name the writers ask for (:data:`ENCODERS`);
    * ``cpu_only``: why the device does not decode it (None: it does, ``gpu_plan`` says
      which of its forms); every registration has a ``gpu_plan`` or this reason.
    """

    home: ModuleType
    miniblock: Callable[..., Any] | None = None
    block: Callable[..., Any] | None = None
    selecting: bool = False
    fixed_bits: Callable[[Any, DecodeContext], int] | None = None
    gpu_plan: str | None = None
    plans: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    encoders: dict[str, Encoder] = field(default_factory=dict)
    cpu_only: str | None = None


#: the function of a planning module that gives each form (:attr:`Registration.plans`)
FORM_FUNCTIONS = {"values": "value_form", "levels": "level_form", "full_zip": "full_zip_form"}
#: the function of a planning module that emits the work of each form it plans: its value
#: families' (:attr:`Registration.families`) and its levels' (:attr:`Registration.plans`)
EMIT_FUNCTIONS = {"values": "emit_values", "levels": "emit_levels"}
#: the function of a level planning module (``"levels"`` in :attr:`Registration.plans`)
#: giving what its ``emit_levels`` reads of a level encoding beyond its form
#: (:func:`device_level_key`); a module without it reads nothing more
LEVEL_KEY_FUNCTION = "level_key"
_COPY = ("cuda_kernels.segments:copy_ranges_gpu",)
_UNPACK = ("cuda_kernels.bitunpack:unpack_blocks_scatter_gpu",)
_VARIABLE_SPANS = "lance_gpu.file.encodings.variable.decode_kernels:variable_spans"

#: Every encoding, by ``CompressiveEncoding`` field (see the module docstring).
ENCODINGS: dict[str, Registration] = {
    "flat": Registration(
        flat, flat.decode_miniblock, flat.decode_block, selecting=True,
        fixed_bits=lambda enc, ctx: int(enc.bits_per_value),
        gpu_plan="flat.gpu_plan", plans=("values", "levels", "full_zip"), families=("flat",),
        kernels=(*_COPY, "cuda_kernels.segments:bits_to_bytes_gpu"),
        # Flat chunks are slices of the values' bytes, host or device alike
        encoders={"flat": Encoder(flat.encode_miniblock, flat.encode_miniblock)},
    ),
    "fixed_size_list": Registration(
        fixed_size_list, fixed_size_list.decode_miniblock, fixed_size_list.decode_block, selecting=True,
        fixed_bits=fixed_size_list.item_bits,
        gpu_plan="fixed_size_list.gpu_plan", plans=("values", "full_zip"), families=("fsl_valid",),
        kernels=(*_COPY, "cuda_kernels.segments:bits_to_bytes_gpu"),
    ),
    "variable": Registration(
        variable, variable.decode_miniblock, variable.decode_block, selecting=True,
        gpu_plan="variable.gpu_plan", plans=("values", "full_zip"), families=("var",),
        kernels=(_VARIABLE_SPANS, "lance_gpu.file.v2_1.fullzip_kernels:fullzip_walk"),
        encoders={"variable": Encoder(variable.variable_chunks, variable_device.variable_chunks)},
    ),
    "fsst": Registration(
        fsst, fsst.decode_miniblock, fsst.decode_block, selecting=True,
        gpu_plan="fsst.gpu_plan", plans=("values", "full_zip"),
        kernels=(_VARIABLE_SPANS, "cuda_kernels.fsst:fsst_lengths_segments_gpu",
                 "cuda_kernels.fsst:fsst_decode_segments_gpu"),
        encoders={"fsst": Encoder(fsst.compress_strings, fsst_device.compress_strings)},
    ),
    "inline_bitpacking": Registration(
        bitpacking, bitpacking.decode_miniblock, bitpacking.decode_inline_block, selecting=True,
        gpu_plan="bitpacking.gpu_plan", plans=("values", "levels"), families=("inline_bitpacking",),
        kernels=_UNPACK,
        encoders={"inline_bitpacking": Encoder(bitpacking.encode_miniblock, bitpacking_device.encode_miniblock)},
    ),
    "out_of_line_bitpacking": Registration(
        bitpacking, None, bitpacking.decode_block,
        gpu_plan="bitpacking.gpu_plan", plans=("levels",),
        kernels=(*_UNPACK, *_COPY),  # whole blocks unpacked, raw tails copied
        encoders={"out_of_line_bitpacking": Encoder(bitpacking.encode_level_chunks, bitpacking_device.encode_level_chunks)},
    ),
    "rle": Registration(
        rle, rle.decode_miniblock, rle.decode_block,
        gpu_plan="rle.gpu_plan", plans=("values", "levels"), families=("rle",),
        kernels=("lance_gpu.file.encodings.rle.decode_kernels:rle_chunks",),
        encoders={"rle": Encoder(rle.encode_miniblock, rle_device.encode_miniblock)},
    ),
    "dictionary": Registration(
        dictionary, dictionary.decode_miniblock, dictionary.decode_block,
        # page dictionaries (a mini-block layout feature; the planner calls dictionary_plan)
        gpu_plan="dictionary.gpu_plan",
        kernels=("lance_gpu.file.encodings.dictionary.decode_kernels:dictionary_spans",),
        # the CPU page dictionary is built by lance_gpu.file.writer.pages (Arrow's dictionary_encode)
        encoders={
            "dictionary": Encoder(None, dictionary_device.dictionary_of_sample),
            "dictionary_strings": Encoder(None, dictionary_device.string_dictionary_of_sample),
        },
    ),
    # decoded on the host only: where the GPU planner meets them in what it decodes on the host
    # (page dictionaries, constant-page levels) it uses these CPU decoders; a page whose
    # values use them is read by the CPU reader (DeviceUnsupported says which)
    "constant": Registration(
        constant, constant.decode_miniblock, constant.decode_block,
        cpu_only="one repeated value, a block form (pylance writes constant pages as ConstantLayout, "
                 "which the device fills); no device emission for it as a chunk's values",
    ),
    "byte_stream_split": Registration(
        byte_stream_split, byte_stream_split.decode_miniblock, byte_stream_split.decode_block,
        cpu_only="no device kernel un-splits its byte streams",
    ),
    "general": Registration(
        general, general.decode_miniblock, general.decode_block,
        cpu_only="zstd / LZ4 compressed buffers: no device decompressor (compressed page "
                 "dictionaries are decompressed on the host while planning)",
    ),
    "packed_struct": Registration(
        packed_struct, packed_struct.decode_miniblock,
        cpu_only="no device kernel unpacks its rows of struct fields",
    ),
}

#: Encoders by the name the writers ask for (levels: ``out_of_line_bitpacking``; the
#: dictionary of a string page: ``dictionary_strings``), from :data:`ENCODINGS`.
ENCODERS: dict[str, Encoder] = {name: enc for reg in ENCODINGS.values() for name, enc in reg.encoders.items()}

for _kind, _reg in ENCODINGS.items():
    register(_kind, miniblock=_reg.miniblock, block=_reg.block, selecting=_reg.selecting, fixed_bits=_reg.fixed_bits)


def gpu_plan(kind: str) -> ModuleType | None:
    """The device planning module of the encoding ``kind`` (imported now if it is not yet),
    None where it has none."""
    reg = ENCODINGS.get(kind)
    if reg is None or reg.gpu_plan is None:
        return None
    return importlib.import_module(f"{__name__}.{reg.gpu_plan}")


_forms: dict[tuple[str, str], Callable[..., Any] | None] = {}


def _planned(name: str, what: str, function: str) -> Callable[..., Any] | None:
    """``function`` of the planning of the encoding ``name`` where its registration plans
    ``what`` (None where it does not), looked up once."""
    key = (name, function)
    if key not in _forms:
        reg = ENCODINGS.get(name)
        module = gpu_plan(name) if reg is not None and what in reg.plans else None
        _forms[key] = None if module is None else getattr(module, function)
    return _forms[key]


def _form(enc: Any, what: str) -> tuple[str, Callable[..., Any] | None]:
    """The oneof field of ``enc`` and the function of its planning that gives form ``what``
    (None where its registration does not plan it)."""
    name = enc.WhichOneof("compression")
    return name, _planned(name, what, FORM_FUNCTIONS[what])


def device_value_form(enc: Any, leaf: DeviceLeaf, nbuf: int) -> tuple:
    """How the device decodes the values of a mini-block page encoded ``enc`` (its
    ``value_compression``, without a page dictionary; ``nbuf`` chunk buffers) for ``leaf``:
    the form its encoding's planning gives (``("flat", (items, bits))``, ``("fsl_valid",
    (items, bits, valid))``, ``("var", offset bytes)``, ``("inline_bitpacking", bits)``, ``("rle",
    bits)``), which names the kernel
    family and is the page's group key.  Raises :class:`DeviceUnsupported` (why) where the
    device does not decode them."""
    name, fn = _form(enc, "values")
    if fn is None:
        one_chunk_buffer(nbuf)
        raise refuse_values(name, leaf)
    form: tuple = fn(enc, leaf, nbuf)
    return form


def device_level_form(enc: Any) -> str:
    """How the device decodes repetition / definition levels encoded ``enc`` (u16 levels,
    per chunk): ``"flat"``, ``"inline_bitpacking"``, ``"out_of_line_bitpacking"`` or
    ``"rle"``; raises :class:`DeviceUnsupported` for another encoding."""
    name, fn = _form(enc, "levels")
    form: str | None = None if fn is None else fn(enc)
    if form is None:
        raise DeviceUnsupported(f"{name} repetition/definition levels")
    return form


def device_level_emitter(enc: Any) -> Callable[..., None]:
    """The function emitting the work of per-chunk levels encoded ``enc`` (whose
    :func:`device_level_form` is ``form``): ``emit_levels(unit, form, enc, starts, sizes,
    nlevels, dst, ctx, blocks, runs)`` of its encoding's planning; raises
    :class:`DeviceUnsupported` where no registration plans them."""
    name = enc.WhichOneof("compression")
    fn = _planned(name, "levels", EMIT_FUNCTIONS["levels"])
    if fn is None:
        raise DeviceUnsupported(f"{name} repetition/definition levels")
    return fn


_level_keys: dict[str, Callable[[Any], tuple] | None] = {}


def device_level_key(enc: Any) -> tuple:
    """What the emission of per-chunk levels encoded ``enc`` reads of ``enc``: its
    :func:`device_level_form`, then what its planning's ``level_key`` adds
    (:data:`LEVEL_KEY_FUNCTION`; OutOfLineBitpacking: the packed width).  Level sections
    whose keys are equal are emitted together (the planner's group keys); raises
    :class:`DeviceUnsupported` where the device does not decode them."""
    form = device_level_form(enc)
    name = enc.WhichOneof("compression")
    if name not in _level_keys:
        _level_keys[name] = getattr(gpu_plan(name), LEVEL_KEY_FUNCTION, None)
    fn = _level_keys[name]
    return (form,) if fn is None else (form, *fn(enc))


_value_emitters: dict[str, Callable[..., None]] = {}


def device_value_emitter(family: str) -> Callable[..., None]:
    """The function emitting the work of mini-block values of kernel family ``family`` (the
    first item of their :func:`device_value_form`): ``emit_values(unit, enc, arg, chunks,
    dst, ctx)`` of the planning of the encoding registered as emitting it
    (:attr:`Registration.families`), looked up once; raises KeyError where none is."""
    fn = _value_emitters.get(family)
    if fn is None:
        kind = next((k for k, reg in ENCODINGS.items() if family in reg.families), None)
        module = None if kind is None else gpu_plan(kind)
        if module is None:
            raise KeyError(f"no encoding emits {family!r} values")
        fn = _value_emitters[family] = getattr(module, EMIT_FUNCTIONS["values"])
    return fn


def device_full_zip_form(enc: Any) -> tuple | None:
    """How the device decodes full-zip values encoded ``enc``: ``("flat", (items, bits))``
    (fixed width, copied), ``("fsl_valid", (items, bits))`` (fixed-size lists with item
    validity: each row's validity bits then its items, split by the walk), ``("var",)``
    (walked: Variable and FSST strings), None where it does not (the planner says why)."""
    _name, fn = _form(enc, "full_zip")
    form: tuple | None = None if fn is None else fn(enc)
    return form


__all__ = [
    "EMIT_FUNCTIONS", "ENCODERS", "ENCODINGS", "FORM_FUNCTIONS", "LEVEL_KEY_FUNCTION", "ChunkBuffers", "DecodeContext", "DeviceUnsupported",
    "Encoder", "Registration", "decode_block", "decode_miniblock", "device_full_zip_form", "device_level_emitter", "device_level_form",
    "device_level_key", "device_value_emitter",
    "device_value_form", "fixed_bits", "gpu_plan",
]
