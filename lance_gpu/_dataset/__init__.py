# SPDX-License-Identifier: Apache-2.0
"""pylance's ``lance._dataset`` helpers: :class:`~lance_gpu._dataset.sharded_batch_iterator.ShardedBatchIterator`."""
