# SPDX-License-Identifier: Apache-2.0
"""Generated protobuf modules for the Lance format (see ``protos/``).

Do not edit the ``*_pb2`` files by hand: change ``protos/*.proto`` and rerun
``python scripts/gen_protos.py``.
"""
