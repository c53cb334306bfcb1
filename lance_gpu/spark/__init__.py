# SPDX-License-Identifier: Apache-2.0
"""Spark integration of lance_gpu (needs PySpark 4.1+, the ``spark`` extra).

Two ways to read a Lance dataset into a Spark DataFrame:

* the Python data source, format ``"lance"``::

      import lance_gpu.spark
      lance_gpu.spark.register(spark)                       # or spark.dataSource.register(LanceDataSource)
      df = spark.read.format("lance").option("columns", "id,text").load(uri)

* :func:`read_lance`, a ``mapInArrow`` over fragment row ranges, which the RAPIDS
  Accelerator runs as a GPU exec (its output lands on the GPU without a row conversion)::

      df = lance_gpu.spark.read_lance(spark, uri, columns=["id", "text"], filter="id > 10")

``import lance_gpu`` never imports this package (nor PySpark).
"""

from __future__ import annotations

try:
    import pyspark
except ImportError as exc:  # pragma: no cover - exercised without pyspark only
    msg = "lance_gpu.spark needs PySpark 4.1 or newer: pip install 'lance-gpu[spark]'"
    raise ImportError(msg) from exc

_MAJOR_MINOR = tuple(int(p) for p in pyspark.__version__.split(".")[:2] if p.isdigit())
if _MAJOR_MINOR < (4, 0):  # pragma: no cover - depends on the installed pyspark
    msg = f"lance_gpu.spark needs PySpark 4.1 or newer (Python data sources), found {pyspark.__version__}"
    raise ImportError(msg)

from lance_gpu.spark._gpu import MAX_DECODES_ENV  # noqa: E402
from lance_gpu.spark._map_in_arrow import read_lance  # noqa: E402
from lance_gpu.spark._options import LanceSparkOptionError  # noqa: E402
from lance_gpu.spark._types import to_spark_schema, to_spark_type  # noqa: E402
from lance_gpu.spark.datasource import LanceDataSource, register  # noqa: E402

__all__ = [
    "MAX_DECODES_ENV",
    "LanceDataSource",
    "LanceSparkOptionError",
    "read_lance",
    "register",
    "to_spark_schema",
    "to_spark_type",
]
