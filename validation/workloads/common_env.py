"""Environment every workload process gets (importable without torch)."""

# NVLink multicast (NVLS) stays off everywhere: on shared hosts it can take
# the GPUs out of service, and the suite's references are measured with it off.
SAFE_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
