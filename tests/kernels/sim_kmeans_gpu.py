"""k-means on the GPU (``cuda_kernels.kmeans``, ``create_index(accelerator="cuda")``) against
the CPU, on tiny inputs.

Not collected by a plain ``pytest tests/`` run; ``tests/test_vector_index.py`` runs it in a
subprocess with ``NUMBA_ENABLE_CUDASIM=1``.  On a machine with a GPU it runs directly::

    python -m pytest tests/kernels/sim_kmeans_gpu.py -q
"""

import numpy as np
import pyarrow as pa
import pytest
from numba import cuda

from cuda_kernels import _device
from cuda_kernels.kmeans import assign_nearest, assign_nearest_gpu, cluster_sums_gpu

if not cuda.is_available():
    pytest.skip("needs a CUDA GPU or NUMBA_ENABLE_CUDASIM=1", allow_module_level=True)


@pytest.mark.parametrize("dot", [False, True])
def test_assign_matches_cpu(dot):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 5)).astype(np.float32)
    c = rng.standard_normal((6, 5)).astype(np.float32)
    labels, dists = assign_nearest(x, c, dot=dot)
    g_labels, g_dists = assign_nearest_gpu(x, c, dot=dot)
    assert _device.to_host(g_labels).tolist() == labels.tolist()
    np.testing.assert_allclose(_device.to_host(g_dists), dists, rtol=1e-6, atol=1e-6)
    ref = 1 - x @ c.T if dot else ((x[:, None, :] - c[None]) ** 2).sum(-1)
    assert labels.tolist() == ref.argmin(axis=1).tolist()


def test_cluster_sums():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((50, 3)).astype(np.float32)
    labels = rng.integers(0, 4, 50)
    sums, counts = cluster_sums_gpu(x, labels, 4)
    assert _device.to_host(counts).tolist() == np.bincount(labels, minlength=4).tolist()
    want = np.stack([x[labels == j].sum(axis=0, dtype=np.float64) for j in range(4)])
    np.testing.assert_allclose(_device.to_host(sums), want, rtol=1e-9, atol=1e-9)


def test_kmeans_device_equals_cpu():
    from lance_gpu.ops.vector_index import kmeans

    rng = np.random.default_rng(2)
    x = (rng.standard_normal((60, 4)) + np.repeat(np.eye(4) * 6, 15, axis=0)).astype(np.float32)
    cpu, cpu_loss = kmeans(x, 4, np.random.default_rng(3))
    gpu, gpu_loss = kmeans(x, 4, np.random.default_rng(3), device=True)
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-5)
    assert gpu_loss == pytest.approx(cpu_loss, rel=1e-5)


def test_create_index_on_the_device_used_by_pylance(tmp_path):
    lance = pytest.importorskip("lance")
    import lance_gpu

    rng = np.random.default_rng(4)
    centres = rng.standard_normal((4, 8)).astype(np.float32) * 4
    x = (centres[rng.integers(0, 4, 200)] + rng.standard_normal((200, 8))).astype(np.float32)
    path = str(tmp_path / "d")
    lance.write_dataset(pa.table({"id": np.arange(200), "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 8)}), path)
    ds = lance_gpu.dataset(path)
    ds.create_index("vec", "IVF_FLAT", num_partitions=4, accelerator="cuda", seed=0)
    cpu_path = str(tmp_path / "c")
    lance.write_dataset(pa.table({"id": np.arange(200), "vec": pa.FixedSizeListArray.from_arrays(pa.array(x.ravel()), 8)}), cpu_path)
    lance_gpu.dataset(cpu_path).create_index("vec", "IVF_FLAT", num_partitions=4, seed=0)
    q = x[3] + 0.1
    nearest = {"column": "vec", "q": q, "k": 5, "nprobes": 1}
    on_device = lance.dataset(path).to_table(nearest=nearest, columns=["id"])["id"].to_pylist()
    on_cpu = lance.dataset(cpu_path).to_table(nearest=nearest, columns=["id"])["id"].to_pylist()
    assert on_device == on_cpu and 3 in on_device
