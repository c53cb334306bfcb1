# SPDX-License-Identifier: Apache-2.0
"""Structural page layouts of file versions 2.1 and 2.2 (``lance.encodings21.PageLayout``)."""
