#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The steps of a session on a lent GPU machine (one that reaches no package index), each a
# short call, so that a limited lease is spent on measuring rather than on setup.
#
# PLAN for a 15-minute lease (start-up ~3-4 min; each call adds seconds of transfer):
#   Here, before asking for the machine (no device time):
#     bash ../shared/tools/cudf-carry.sh 58 && bash benchmarks/device_session.sh pack cudf .carry/wheels 58
#                                            # cuDF 26.10 wheels -> .carry/cudf/part-NN + sha256 (~6 parts)
#     (pylance, numpy ... the same way: pip download into a folder, then `pack BUNDLE FOLDER 58`)
#     bash benchmarks/device_session.sh pack-nsys-libs   # Debian's libdw1 + libelf1 -> .carry/nsyslibs (~2 MB)
#     bash benchmarks/device_session.sh check            # bash -n, the Python parts' --help, the timeouts' sum
#   There, one call per part (carry=[".carry/B/part-NN", ".carry/B/sha256"], timeout_s 60), back to back:
#     bash benchmarks/device_session.sh receive B NN
#   then one call (carry=[".carry/nsyslibs"], ~30 s):   bash benchmarks/device_session.sh install cudf OTHER... nsyslibs
#   then ONE call (timeout_s 600) that runs everything:  bash benchmarks/device_session.sh all
#   `all` = compile, data, bench (end to end first, then kernels), tests (cuDF hand-off, the pipeline
#   on the device, the other gpu-marked tests), nsys; each under its own timeout (ALL_STEPS), summing to
#   525 s (under 540): the call ends by ~9 minutes, leaving a short rerun
#   (e.g. `verify`, or one step) inside the lease.  Results: $OUT/all.txt (each step's outcome
#   and seconds), gpu_<device>.md (end to end, phases, checks), gpu_<device>_kernels.md,
#   tests.log, nsys.txt, raw.tgz (logs, JSON, the profile's SQLite export): 6 files (8 come back).
#
# Steps (here: pack, pack-nsys-libs, check; there: the rest):
#   probe                 GPU, driver, glibc, packages, nsys and what its importer lacks
#   receive B NN          copy .carry/B/part-NN (carried with this call) to /tmp/parts/B
#   install B...          check, unpack; wheels -> pip install --target /tmp/site, libraries -> /tmp/nsyslibs
#   bench                 bench_gpu.py end to end + kernels (this code), and .carry/baseline's end to end if carried
#   tests                 cuDF hand-off (tests/test_gpu_cudf.py), the pipeline on the device, pytest -m gpu
#   more                  search (issue 27), index build on the device, GPU write (issue 28), the host planner
#   nsys                  Nsight Systems: profile_read.py over the mixed and nested tables; nsys stats
#                         (cuda_gpu_kern_sum, cuda_api_sum, nvtx_sum), else nsys export + nsys_summary.py
#   verify                a short second look: some end-to-end rows + the pipeline
#   all                   compile, data, bench, tests, nsys (see PLAN)
set -uo pipefail
SELF=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
DATA=${DATA:-/tmp/bench-data}
REPEAT=${REPEAT:-3}
# extra bench_gpu.py arguments for the data, end-to-end, baseline and verify runs (e.g. smaller
# tables when time is short: BENCH_ARGS="--rows 1000000 --nested-rows 200000")
read -r -a BENCH_ARGS <<< "${BENCH_ARGS:-}"
NSYSLIBS=/tmp/nsyslibs
step=${1:?probe | receive B NN | install B... | bench | tests | more | nsys | verify | all | pack B DIR [MB] | pack-nsys-libs | check}
shift

# Timeouts of `all`, seconds (each can be set in the environment); their sum is checked against 540.
ALL_STEPS=(COMPILE_TIMEOUT=60 DATA_TIMEOUT=45 E2E_TIMEOUT=120 KERNEL_TIMEOUT=55 CUDF_TIMEOUT=55 PIPE_TIMEOUT=65
           TEST_TIMEOUT=40 NSYS_TIMEOUT=45 STATS_TIMEOUT=25 EXPORT_TIMEOUT=15)

nsys_bin() {
    command -v nsys 2>/dev/null || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/bin/nsys \
        /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1
}

importer_bin() {  # nsys's QdstrmImporter (turns the .qdstrm it records into a .nsys-rep)
    local nsys=$1
    ls "$(dirname "$nsys")/QdstrmImporter" 2>/dev/null ||
        find /opt/nvidia /usr/local/cuda* -name QdstrmImporter -type f 2>/dev/null | head -1
}

nsys_libs() {
    # Debian's libdw.so.1 / libelf.so.1 for the QdstrmImporter, where the machine lacks them: from
    # /tmp/nsyslibs (install nsyslibs), or .carry/nsyslibs carried with this call; of their own
    # needs (extra/: liblzma, libbz2, libzstd) only those the machine lacks too.
    if ldconfig -p | grep -q "libdw.so.1 " && ldconfig -p | grep -q "libelf.so.1 "; then
        echo "nsys libs: the machine has libdw and libelf"
        return 0
    fi
    if [ ! -e "$NSYSLIBS/lib/libdw.so.1" ] && [ -e .carry/nsyslibs/part-00 ]; then
        (cd .carry/nsyslibs && sha256sum -c --quiet sha256) && mkdir -p "$NSYSLIBS" &&
            cat .carry/nsyslibs/part-* | tar -xf - -C "$NSYSLIBS"
    fi
    if [ ! -e "$NSYSLIBS/lib/libdw.so.1" ]; then
        echo "nsys libs: none carried (pack-nsys-libs here, then carry .carry/nsyslibs)"
        return 0
    fi
    local f
    for f in "$NSYSLIBS"/extra/*; do
        LD_LIBRARY_PATH=$NSYSLIBS/lib ldd "$NSYSLIBS/lib/libdw.so.1" "$NSYSLIBS/lib/libelf.so.1" 2>/dev/null |
            grep -q "$(basename "$f") => not found" && cp -P "$f" "$NSYSLIBS/lib/"
    done
    export LD_LIBRARY_PATH=$NSYSLIBS/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    echo "nsys libs: $(ls "$NSYSLIBS/lib" | tr '\n' ' ')"
}

bounded() {  # bounded SECONDS LOG CMD...: run CMD under a timeout, output appended to LOG; note the outcome
    local limit=$1 log=$2 t0=$SECONDS rc
    shift 2
    echo "### $* (timeout ${limit}s)" >> "$log"
    timeout -k 2 "$limit" "$@" >> "$log" 2>&1
    rc=$?
    echo "$(printf '%-12s' "${STEP_NAME:-step}") rc=$rc $((SECONDS - t0))s/${limit}s  $*" | tee -a "$OUT/all.txt"
    return $rc
}

step_compile() {  # the CPU kernels into the cache (a read's host work); COMPILE_ARGS=--no-aot skips the C build
    read -r -a extra <<< "${COMPILE_ARGS:-}"
    STEP_NAME=compile bounded "${COMPILE_TIMEOUT:-120}" "$OUT/bench.log" python3 -m lance_gpu compile --quiet ${extra[@]+"${extra[@]}"}
}

step_data() {
    STEP_NAME=data bounded "${DATA_TIMEOUT:-120}" "$OUT/bench.log" python3 benchmarks/bench_gpu.py --data-only --data "$DATA" \
        ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"} || rm -rf "$DATA"  # never half-written tables (bench_gpu.py writes what is absent)
}

step_bench() {
    STEP_NAME=e2e bounded "${E2E_TIMEOUT:-200}" "$OUT/bench.log" python3 benchmarks/bench_gpu.py --e2e-only --repeat "$REPEAT" \
        --data "$DATA" --results-dir "$OUT" ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
    STEP_NAME=kernels bounded "${KERNEL_TIMEOUT:-150}" "$OUT/bench.log" python3 benchmarks/bench_gpu.py --kernels-only \
        --repeat "$REPEAT" --tag kernels --results-dir "$OUT"
    if [ -d .carry/baseline ] && [ "${BASE_TIMEOUT:-150}" -gt 0 ]; then
        STEP_NAME=baseline bounded "${BASE_TIMEOUT:-150}" "$OUT/bench.log" python3 benchmarks/bench_gpu.py --e2e-only \
            --repeat "$REPEAT" --data "$DATA" --code .carry/baseline --tag baseline --results-dir "$OUT" ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"}
    fi
    grep -E "^  \S+ +\S+ / \S+: |equals pylance|phases of|FAILED|failed" "$OUT/bench.log" | tail -40
}

step_tests() {
    # cuDF hand-off first (equal to cudf.read_parquet, zero copy, RMM pool), then the pipeline's
    # page kinds on the device, then the rest of the gpu-marked tests while time lasts
    STEP_NAME=cudf-tests bounded "${CUDF_TIMEOUT:-90}" "$OUT/tests.log" python3 -m pytest tests/test_gpu_cudf.py -m gpu -q -rs \
        -p no:cacheprovider
    STEP_NAME=pipeline bounded "${PIPE_TIMEOUT:-120}" "$OUT/tests.log" python3 -m pytest tests/gpu/sim_pipeline.py -q -rs \
        -p no:cacheprovider -o addopts= --noconftest -k "not s3"
    STEP_NAME=gpu-tests bounded "${TEST_TIMEOUT:-150}" "$OUT/tests.log" python3 -m pytest -m gpu -q -p no:cacheprovider \
        --deselect tests/test_gpu_simulated.py::test_gpu_pipeline_on_the_device --ignore tests/test_gpu_cudf.py
    grep -E "^(FAILED|ERROR)|passed|failed|error" "$OUT/tests.log" | tail -30
}

step_nsys() {
    local nsys imp sets stats_rc rep=/tmp/prof.nsys-rep log=$OUT/nsys.txt
    nsys=$(nsys_bin)
    if [ -z "$nsys" ]; then
        echo "no nsys on this machine" | tee -a "$log"
        return 0
    fi
    nsys_libs >> "$log" 2>&1  # (not in a pipeline: it exports LD_LIBRARY_PATH)
    grep "^nsys libs" "$log" | tail -1
    imp=$(importer_bin "$nsys")
    echo "nsys: $nsys; importer: ${imp:-none}; libraries it lacks: $( [ -n "$imp" ] && ldd "$imp" 2>&1 | grep "not found" | tr -s ' \t\n' ' ')" \
        | tee -a "$log"
    sets=$(ls -d "$DATA"/mixed_*.lance "$DATA"/nested_*.lance 2>/dev/null | tr '\n' ' ')
    if [ -z "$sets" ]; then
        echo "no datasets under $DATA (run the data or bench step first)" | tee -a "$log"
        return 0
    fi
    rm -f /tmp/prof.*
    # shellcheck disable=SC2086  # $sets: one word per dataset
    STEP_NAME=nsys-profile bounded "${NSYS_TIMEOUT:-90}" "$log" "$nsys" profile -t cuda,nvtx -s none --cpuctxsw none -o /tmp/prof \
        --force-overwrite true python3 benchmarks/profile_read.py $sets --engine "${ENGINE:-scan_device}" --reads "${NSYS_READS:-3}"
    if [ ! -e "$rep" ] && [ -e /tmp/prof.qdstrm ] && [ -n "$imp" ]; then  # the importer by hand: its own error, if any
        STEP_NAME=nsys-import bounded 30 "$log" "$imp" -i /tmp/prof.qdstrm
    fi
    if [ ! -e "$rep" ]; then
        echo "no report: $(ls /tmp/prof.* 2>/dev/null | tr '\n' ' ')" | tee -a "$log"
        return 1
    fi
    STEP_NAME=nsys-stats bounded "${STATS_TIMEOUT:-60}" "$log" "$nsys" stats -r cuda_gpu_kern_sum,cuda_api_sum,nvtx_sum,cuda_gpu_mem_time_sum \
        --force-export true "$rep"
    stats_rc=$?
    if [ ! -s /tmp/prof.sqlite ]; then
        STEP_NAME=nsys-export bounded "${EXPORT_TIMEOUT:-30}" "$log" "$nsys" export --type sqlite --force-overwrite true \
            -o /tmp/prof.sqlite "$rep"
    fi
    if [ -s /tmp/prof.sqlite ]; then  # our own summary (also copies by kind), whatever nsys stats did
        STEP_NAME=nsys-summary bounded 20 "$log" python3 benchmarks/nsys_summary.py /tmp/prof.sqlite
        gzip -c /tmp/prof.sqlite > "$OUT/prof.sqlite.gz"
        [ "$(stat -c %s "$OUT/prof.sqlite.gz")" -lt 15000000 ] || rm -f "$OUT/prof.sqlite.gz"
    fi
    [ $stats_rc -eq 0 ] && echo "nsys stats: ok" || echo "nsys stats: rc=$stats_rc (see nsys.txt; nsys_summary.py's tables follow it)"
    grep -A12 -E "^== CUDA kernels|cuda_gpu_kern_sum" "$log" | head -30
}

case $step in
pack)
    # here: pack FOLDER's files as bundle B, tar parts of MB megabytes: .carry/B/part-NN + .carry/B/sha256
    bundle=${1:?bundle} dir=${2:?folder} mb=${3:-58}
    git check-ignore -q .carry/x || { echo "pack: .carry/ is not ignored by git"; exit 1; }
    rm -rf ".carry/$bundle" && mkdir -p ".carry/$bundle"
    tar -C "$dir" -cf - . | split -b "${mb}M" -d - ".carry/$bundle/part-"
    (cd ".carry/$bundle" && sha256sum part-* > sha256)
    ls -la ".carry/$bundle"
    ;;
pack-nsys-libs)
    # here (Debian 12, x86-64): libdw1 + libelf1 as bundle nsyslibs: lib/ the two sonames, extra/ the
    # libraries they need that an image may lack (used there only where it does)
    tmp=$(mktemp -d)
    mkdir -p "$tmp/lib" "$tmp/extra"
    for so in libdw.so.1 libelf.so.1; do
        src=$(dpkg -L libdw1 libelf1 2>/dev/null | grep "/$so\$" | head -1)
        [ -n "$src" ] || { echo "$so: not installed here (apt-get install libdw1 libelf1)"; exit 1; }
        cp -L "$src" "$tmp/lib/$so"
    done
    for so in liblzma.so.5 libbz2.so.1.0 libzstd.so.1; do
        src=$(ldconfig -p | awk -v so="$so" '$1 == so && /x86-64/ {print $NF; exit}')
        [ -n "$src" ] && cp -L "$src" "$tmp/extra/$so"
    done
    dpkg -l libdw1 libelf1 | tail -2 > "$tmp/VERSIONS"
    bash "$SELF" pack nsyslibs "$tmp" 58
    rm -rf "$tmp"
    ;;
check)
    # here: what can be checked without a GPU
    bash -n "$SELF" && echo "bash -n: ok"
    if command -v shellcheck > /dev/null; then shellcheck -S warning "$SELF" && echo "shellcheck: ok"; else echo "shellcheck: absent"; fi
    for py in bench_gpu profile_read nsys_summary; do
        python3 "benchmarks/$py.py" --help > /dev/null && echo "$py.py --help: ok"
    done
    sum=0
    for kv in "${ALL_STEPS[@]}"; do sum=$((sum + ${kv#*=})); done
    echo "all: timeouts sum to ${sum}s (limit 540)"
    [ "$sum" -lt 540 ]
    ;;
probe)
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
    uname -r; nproc; python3 --version; ldd --version | head -1
    python3 -m pip list 2>/dev/null | grep -iE "^(numpy|numba|numba-cuda|cupy|pyarrow|pandas|cuda-python|nvtx|protobuf|tqdm) "
    nsys=$(nsys_bin)
    echo "nsys: $nsys"
    if [ -n "$nsys" ]; then
        imp=$(importer_bin "$nsys")
        echo "importer: ${imp:-none}${imp:+; lacks: $(ldd "$imp" | grep "not found" | tr -s ' \t\n' ' ')}"
    fi
    ;;
receive)
    bundle=$1 part=$2
    mkdir -p "/tmp/parts/$bundle"
    cp ".carry/$bundle/part-$part" ".carry/$bundle/sha256" "/tmp/parts/$bundle/" && ls -la "/tmp/parts/$bundle"
    ;;
install)
    for bundle in "$@"; do
        src=/tmp/parts/$bundle
        [ -e "$src/sha256" ] || src=.carry/$bundle  # a small bundle carried with this call
        (cd "$src" && sha256sum -c --quiet sha256) || exit 1
        mkdir -p "/tmp/whl/$bundle" && cat "$src"/part-* | tar -xf - -C "/tmp/whl/$bundle" || exit 1
        if ls /tmp/whl/"$bundle"/*.whl > /dev/null 2>&1; then
            python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site /tmp/whl/"$bundle"/*.whl || exit 1
        fi
        if [ -d "/tmp/whl/$bundle/lib" ]; then  # libraries (nsyslibs): used by the nsys step
            mkdir -p "$NSYSLIBS" && cp -a /tmp/whl/"$bundle"/* "$NSYSLIBS"/ && echo "libraries: $(ls "$NSYSLIBS"/lib | tr '\n' ' ')"
        fi
    done
    python3 -c 'import numpy, numba, pyarrow, lance, lance_gpu; print("numpy", numpy.__version__, "numba", numba.__version__, "pyarrow", pyarrow.__version__, "pylance", lance.__version__)'
    python3 -c 'import cudf; print("cudf", cudf.__version__)' 2>&1 | tail -1
    python3 -c 'import rmm; print("rmm", rmm.__version__)' 2>&1 | tail -1
    ;;
bench)
    step_compile
    step_bench
    ;;
tests)
    step_tests
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
    timeout "${BENCH_TIMEOUT:-120}" python3 benchmarks/bench_gpu.py --e2e-only --repeat "$REPEAT" --data "$DATA" \
        --engines "${ENGINES:-scan_device,pylance_upload}" --tag "${TAG:-verify}" --results-dir "$OUT" ${BENCH_ARGS[@]+"${BENCH_ARGS[@]}"} 2>&1 | tee "$OUT/verify_bench.log" | tail -16
    timeout "${PIPE_TIMEOUT:-90}" python3 -m pytest tests/gpu/sim_pipeline.py -q -x -p no:cacheprovider -o addopts= --noconftest \
        -k "not s3" 2>&1 | tee "$OUT/verify_pipeline.log" | tail -3
    ;;
nsys)
    step_nsys
    ;;
all)
    for kv in "${ALL_STEPS[@]}"; do  # the environment's value wins
        name=${kv%%=*}
        export "$name=${!name:-${kv#*=}}"
        budget=$((${budget:-0} + ${!name}))
    done
    export BASE_TIMEOUT=${BASE_TIMEOUT:-0}  # no baseline inside `all` unless asked (and budgeted)
    export COMPILE_ARGS=${COMPILE_ARGS---no-aot}  # the ahead-of-time C build only speeds up first reads: not timed here
    budget=$((budget + BASE_TIMEOUT))
    echo "all: steps bounded by ${budget}s in all (limit 540); $(date -u +%H:%M:%S) UTC" | tee "$OUT/all.txt"
    [ "$budget" -lt 540 ] || { echo "all: over budget" | tee -a "$OUT/all.txt"; exit 2; }
    step_compile
    step_data
    step_bench
    step_tests
    step_nsys
    echo "all: done in ${SECONDS}s" | tee -a "$OUT/all.txt"
    # at most 8 files come back: the summaries stay, the rest travels as one archive
    # shellcheck disable=SC2046  # one word per file
    (cd "$OUT" && tar -czf raw.tgz --remove-files $(ls -- bench.log *.json prof.sqlite.gz 2>/dev/null))
    ls -la "$OUT"
    ;;
*)
    echo "unknown step $step" >&2
    exit 2
    ;;
esac
