# SPDX-License-Identifier: Apache-2.0
"""Dataset operations built on the table layer (cleanup of old versions, ...)."""
