# SPDX-License-Identifier: Apache-2.0
import sys

from lance_gpu.cli import main

sys.exit(main())
