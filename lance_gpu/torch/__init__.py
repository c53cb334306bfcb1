# SPDX-License-Identifier: Apache-2.0
"""PyTorch data loading over Lance datasets (imports torch; ``import lance_gpu`` does not).

``lance_gpu.torch.LanceDataset`` takes pylance's ``lance.torch.data.LanceDataset`` arguments
(a training script changes only its import) plus ``shuffle``, ``seed``, ``drop_last``,
``device`` and ``set_epoch``; ``LanceMapDataset`` gives random access for map-style loaders.
Samplers, worker sharding and ordering: :mod:`lance_gpu.torch.sampler`; tensor rules:
:mod:`lance_gpu.torch.tensors`; every read goes through :mod:`lance_gpu.torch._source`.
"""

from __future__ import annotations

from lance_gpu.torch.data import LanceDataset, LanceMapDataset, SafeLanceDataset, get_safe_loader, identity_collate
from lance_gpu.torch.sampler import (
    FullScanSampler,
    Sampler,
    ShardedBatchSampler,
    ShardedFragmentSampler,
)
from lance_gpu.torch.tensors import NoTensorRuleError, NullValueError, to_tensor

__all__ = [
    "FullScanSampler",
    "LanceDataset",
    "LanceMapDataset",
    "NoTensorRuleError",
    "NullValueError",
    "SafeLanceDataset",
    "Sampler",
    "ShardedBatchSampler",
    "ShardedFragmentSampler",
    "get_safe_loader",
    "identity_collate",
    "to_tensor",
]
