# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance.vector`` helpers that need no accelerator: :func:`vec_to_table`.

(Index training lives in :mod:`lance_gpu.ops.vector_index`, behind ``ds.create_index``.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from lance_gpu.errors import InvalidArgumentError, UnsupportedFeatureError

__all__ = ["vec_to_table"]


def _dimension(vectors: Sequence[Any] | np.ndarray, ndim: int | None) -> int:
    """The vectors' common length (``ndim`` if given); a vector of another length raises."""
    for v in vectors:
        if ndim is None:
            ndim = len(v)
        elif len(v) != ndim:
            raise InvalidArgumentError(f"Expected {ndim} dimensions but got {len(v)} for {v}")
    if ndim is None:
        raise InvalidArgumentError("vec_to_table: no vectors given")
    return ndim


def _fixed_size_vectors(vectors: Any, ndim: int | None) -> pa.FixedSizeListArray:
    """float32 ``FixedSizeList`` vectors of ``ndim`` values (the first vector's length if None)."""
    if ndim is None:
        ndim = len(next(iter(vectors)))
    values = np.asarray(vectors, dtype=np.float32).ravel()
    return pa.FixedSizeListArray.from_arrays(pa.array(values), ndim)


def vec_to_table(data: dict | list | np.ndarray, names: str | Sequence[str] | None = None, ndim: int | None = None,
                 check_ndim: bool = True) -> pa.Table:
    """A table of float32 fixed-size-list vectors (pylance's ``lance.vector.vec_to_table``).

    Parameters
    ----------
    data : dict, list or numpy.ndarray
        A dict maps ids to vectors (columns ``id`` and ``vector``); a list or a 2-D array is
        one vector per element / row (column ``vector``).
    names : str or list of str, optional
        Column names: two for a dict (default ``["id", "vector"]``), one otherwise
        (default ``"vector"``).
    ndim : int, optional
        The vectors' length (default: the first vector's).
    check_ndim : bool, default True
        Refuse vectors of another length (``ValueError``).

    Returns
    -------
    pyarrow.Table
    """
    if isinstance(data, dict):
        names = ["id", "vector"] if names is None else list(names)
        if len(names) != 2:
            raise InvalidArgumentError("If data is a dict, names must be a list or tuple of 2 strings")
        values = list(data.values())
        if check_ndim:
            ndim = _dimension(values, ndim)
        return pa.Table.from_arrays([pa.array(list(data.keys())), _fixed_size_vectors(values, ndim)], names=names)
    if isinstance(data, (list, np.ndarray)):
        names = ["vector"] if names is None else [names] if isinstance(names, str) else list(names)
        if len(names) != 1:
            raise InvalidArgumentError(f"names cannot be more than 1 got {len(names)}")
        if check_ndim:
            ndim = _dimension(data, ndim)
        return pa.Table.from_arrays([_fixed_size_vectors(data, ndim)], names=names)
    raise UnsupportedFeatureError(f"data must be dict, list, or ndarray, got {type(data)} instead")
