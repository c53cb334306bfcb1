# SPDX-License-Identifier: Apache-2.0
"""Dataset operations built on the table layer (cleanup of old versions, housekeeping,
sorted scans, ...).  Importing the package registers the auto cleanup that runs after
commits (:mod:`lance_gpu.ops.housekeeping`)."""

from lance_gpu.ops import housekeeping as housekeeping  # registers the post-commit auto cleanup
