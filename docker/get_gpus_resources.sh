#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Spark GPU discovery script (spark.{driver,executor}.resource.gpu.discoveryScript): prints
# {"name": "gpu", "addresses": ["0", "1", ...]} for the GPUs this container can see.
set -euo pipefail
ADDRS=$(nvidia-smi --query-gpu=index --format=csv,noheader | sed -e 's/^ *//' -e 's/.*/"&"/' | paste -sd, -)
echo "{\"name\": \"gpu\", \"addresses\": [${ADDRS}]}"
