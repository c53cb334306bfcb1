#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The steps of a session on a lent GPU machine (one that reaches no package index), each a
# short call, so that a limited lease is spent on measuring rather than on setup.
#
# Here, first:   wheels packed as tar parts under .carry/<bundle>/part-NN + sha256 (see
#                benchmarks/results/README.md, "GPU sessions"), and a baseline checkout in
#                .carry/baseline (git archive <commit> lance_gpu cuda_kernels | tar -x -C ...).
# There, in order, each call made right after the last (the machine is kept 30 s idle):
#   bash benchmarks/device_session.sh probe                 # GPU, driver, packages, nsys
#   bash benchmarks/device_session.sh receive A 00          # carry .carry/A/part-00 (one part a call)
#   ...
#   bash benchmarks/device_session.sh install A B           # check, unpack, pip install --target /tmp/site
#   bash benchmarks/device_session.sh bench                 # bench_gpu.py (this code) + the baseline's end to end
#   bash benchmarks/device_session.sh tests                 # cuDF hand-off, the pipeline on the device, pytest -m gpu
#   bash benchmarks/device_session.sh more                  # search (issue 27), index build on the device, GPU write (issue 28)
#   bash benchmarks/device_session.sh nsys                  # Nsight Systems summary of three reads (NVTX phases)
#   bash benchmarks/device_session.sh verify                # a short second look: some end-to-end rows + the pipeline
# Results land under $OUT (at most 8 files a call come back).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step=${1:?probe | receive BUNDLE PART | install BUNDLE... | bench | tests | more | nsys | verify}
shift

nsys_bin() {
    command -v nsys 2>/dev/null || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys \
        /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1
}

case $step in
probe)
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    uname -r; nproc; python3 --version
    python3 -m pip list 2>/dev/null | grep -iE "^(numpy|numba|numba-cuda|cupy|pyarrow|pandas|cuda-python|nvtx|protobuf|tqdm) "
    echo "nsys: $(nsys_bin)"
    ;;
receive)
    bundle=$1 part=$2
    mkdir -p "/tmp/parts/$bundle"
    cp ".carry/$bundle/part-$part" ".carry/$bundle/sha256" "/tmp/parts/$bundle/" && ls -la "/tmp/parts/$bundle"
    ;;
install)
    for bundle in "$@"; do
        (cd "/tmp/parts/$bundle" && sha256sum -c --quiet sha256) || exit 1
        mkdir -p "/tmp/whl/$bundle" && cat /tmp/parts/"$bundle"/part-* | tar -xf - -C "/tmp/whl/$bundle" || exit 1
        python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site /tmp/whl/"$bundle"/*.whl || exit 1
    done
    python3 -c 'import numpy, numba, pyarrow, lance, lance_gpu; print("numpy", numpy.__version__, "numba", numba.__version__, "pyarrow", pyarrow.__version__, "pylance", lance.__version__)'
    python3 -c 'import cudf; print("cudf", cudf.__version__)' 2>&1 | tail -1
    ;;
bench)
    (time python3 -m lance_gpu compile) 2>&1 | tail -4
    timeout "${BENCH_TIMEOUT:-330}" python3 benchmarks/bench_gpu.py --repeat "${REPEAT:-3}" --data /tmp/bench-data \
        --results-dir "$OUT" 2>&1 | tee "$OUT/bench.log" | grep -vE "^\s+(unpack|gather|fsst|rle|levels|compact|segment)" 
    timeout "${BASE_TIMEOUT:-150}" python3 benchmarks/bench_gpu.py --e2e-only --repeat "${REPEAT:-3}" --data /tmp/bench-data \
        --code .carry/baseline --tag baseline --results-dir "$OUT" 2>&1 | tee "$OUT/bench_baseline.log" | tail -25
    ;;
tests)
    # cuDF hand-off first (zero copy), then the pipeline's page kinds on the device, then
    # the rest of the gpu-marked tests while time lasts
    timeout "${CUDF_TIMEOUT:-90}" python3 -m pytest tests/test_gpu_cudf.py -m gpu -q -p no:cacheprovider 2>&1 \
        | tee "$OUT/pytest_cudf.log" | tail -6
    timeout "${PIPE_TIMEOUT:-120}" python3 -m pytest tests/gpu/sim_pipeline.py -q -p no:cacheprovider -o addopts= --noconftest \
        -k "not s3" 2>&1 | tee "$OUT/pipeline_device.log" | tail -6
    timeout "${TEST_TIMEOUT:-150}" python3 -m pytest -m gpu -q -p no:cacheprovider \
        --deselect tests/test_gpu_simulated.py::test_gpu_pipeline_on_the_device --ignore tests/test_gpu_cudf.py 2>&1 \
        | tee "$OUT/pytest_gpu.log" | tail -8
    ;;
more)
    # the other GPU benchmarks, each bounded by a timeout (bench_gpu_write.py writes under benchmarks/results/: copy them to $OUT)
    timeout "${SEARCH_TIMEOUT:-150}" python3 benchmarks/bench_search.py --device gpu --rows "${SEARCH_ROWS:-1000000}" --dim 768 \
        --metrics l2 --rounds 3 --markdown "$OUT/search_gpu.md" 2>&1 | tee "$OUT/search_gpu.log" | tail -12
    timeout "${WRITE_TIMEOUT:-150}" python3 benchmarks/bench_gpu_write.py --repeat 3 2>&1 \
        | tee "$OUT/gpu_write.log" | tail -12
    cp benchmarks/results/gpu_write_*.md "$OUT"/ 2>/dev/null
    timeout "${INDEX_TIMEOUT:-120}" python3 benchmarks/bench_vector_index.py --accelerator cuda \
        --markdown "$OUT/vector_index_gpu.md" 2>&1 | tee "$OUT/vector_index_gpu.log" | tail -8
    # the host planner on this machine's CPU (warm and cold page layouts; no device work)
    timeout "${PLAN_TIMEOUT:-150}" python3 benchmarks/bench_gpu_plan.py --repeat 5 --data /tmp/plan-data \
        --out "$OUT/gpu_plan_device_cpu.md" 2>&1 | tail -8
    timeout "${PLAN_TIMEOUT:-150}" python3 benchmarks/bench_gpu_plan.py --repeat 5 --cold --data /tmp/plan-data \
        --out "$OUT/gpu_plan_device_cpu.md" 2>&1 | tail -8
    ;;
verify)
    # a short second look after a change: end-to-end rows (ENGINES) and the pipeline on the device
    timeout "${BENCH_TIMEOUT:-120}" python3 benchmarks/bench_gpu.py --e2e-only --repeat "${REPEAT:-3}" --data /tmp/bench-data \
        --engines "${ENGINES:-scan_device,pylance_upload}" --tag "${TAG:-verify}" --results-dir "$OUT" 2>&1 | tee "$OUT/verify_bench.log" | tail -12
    timeout "${PIPE_TIMEOUT:-90}" python3 -m pytest tests/gpu/sim_pipeline.py -q -x -p no:cacheprovider -o addopts= --noconftest \
        -k "not s3" 2>&1 | tee "$OUT/verify_pipeline.log" | tail -3
    ;;
nsys)
    nsys=$(nsys_bin)
    [ -n "$nsys" ] || { echo "no nsys on this machine"; exit 0; }
    timeout "${NSYS_TIMEOUT:-90}" "$nsys" profile -t cuda,nvtx -o /tmp/prof --force-overwrite true \
        python3 benchmarks/profile_read.py /tmp/bench-data/mixed_5000000.lance --engine "${ENGINE:-scan_device}" > "$OUT/nsys_run.log" 2>&1
    tail -5 "$OUT/nsys_run.log"
    timeout 60 "$nsys" stats -r nvtx_sum,cuda_api_sum,cuda_gpu_kern_sum,cuda_gpu_mem_time_sum /tmp/prof.nsys-rep \
        > "$OUT/nsys_summary.txt" 2>&1
    head -c 9000 "$OUT/nsys_summary.txt"
    ;;
*)
    echo "unknown step $step" >&2
    exit 2
    ;;
esac
