#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Run docker/example_job.py on a GPU: reads a Lance dataset with lance-gpu through both entry
# points (format "lance" and read_lance's mapInArrow), with the RAPIDS Accelerator enabled.
#
#   docker run --gpus all -v /data:/data lance-gpu-spark \
#     /opt/spark-scripts/spark-submit-example.sh /data/events.lance
#
# MASTER defaults to local[*] (one container); point it at a standalone/K8s/YARN master
# for a cluster. Executors need the same image (or the same jar, venv and settings).
set -euo pipefail

DATASET=${1:-/work/example.lance}
MASTER=${MASTER:-local[*]}
EXECUTOR_CORES=${EXECUTOR_CORES:-4}
RAPIDS_JAR=${RAPIDS_JAR:?set RAPIDS_JAR to the rapids-4-spark jar}

# GPU scheduling (standalone / YARN / Kubernetes): one GPU per executor, shared by its task slots.
# Local mode has a single process that simply uses the visible GPU.
RESOURCES=()
if [[ "${MASTER}" != local* ]]; then
  RESOURCES=(
    --conf spark.executor.cores="${EXECUTOR_CORES}"
    --conf spark.executor.resource.gpu.amount=1
    --conf spark.task.resource.gpu.amount="$(python -c "print(1 / ${EXECUTOR_CORES})")"
    --conf spark.executor.resource.gpu.discoveryScript=/opt/spark-scripts/get_gpus_resources.sh
  )
fi

exec spark-submit \
  --master "${MASTER}" \
  --jars "${RAPIDS_JAR}" \
  --py-files "${RAPIDS_JAR}" \
  --conf spark.plugins=com.nvidia.spark.SQLPlugin \
  "${RESOURCES[@]}" \
  --conf spark.rapids.sql.concurrentGpuTasks=2 \
  --conf spark.rapids.memory.gpu.allocFraction=0.5 \
  --conf spark.rapids.memory.gpu.maxAllocFraction=0.6 \
  --conf spark.rapids.sql.python.gpu.enabled=true \
  --conf spark.rapids.python.memory.gpu.pooling.enabled=false \
  --conf spark.rapids.python.concurrentPythonWorkers=2 \
  --conf spark.rapids.sql.exec.PythonMapInArrowExec=true \
  --conf spark.rapids.sql.explain=NOT_ON_GPU \
  --conf spark.executorEnv.PYTHONPATH="${RAPIDS_JAR}" \
  --conf spark.executorEnv.LANCE_GPU_MAX_CONCURRENT_DECODES="${LANCE_GPU_MAX_CONCURRENT_DECODES:-1}" \
  --conf spark.sql.python.filterPushdown.enabled=true \
  --conf spark.sql.execution.arrow.maxRecordsPerBatch=8192 \
  /opt/spark-scripts/example_job.py "${DATASET}"
