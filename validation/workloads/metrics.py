"""Every metric the workloads emit (merged into validation.metrics)."""

from __future__ import annotations

from validation.metric import Metric
from validation.metric import metric as _m

WORKLOAD_METRICS: list[Metric] = [
    # collectives (torch.distributed over NCCL, and nccl-tests where installed)
    _m(
        "nccl.busbw",
        "GB/s",
        "collective bus bandwidth, nccl-tests factors (labels op, size_bytes, impl)",
        "higher",
    ),
    _m("nccl.algbw", "GB/s", "collective algorithm bandwidth: size / time", "higher", judged=False),
    _m("nccl.correct", "", "collective result exactly right on every rank", "equal"),
    _m("nccl.torch_version", "", "NCCL version PyTorch loaded (torch.cuda.nccl.version())",
       "equal"),
    # judged where the site pins it (validation_tools_nccl_tests_version)
    _m("nccl_tests.version", "", "nccl-tests release that ran (its output's version line)",
       "equal", judged=False),
    _m(
        "nccl.pair_busbw",
        "GB/s",
        "one-way send bandwidth between one ordered GPU pair, alone",
        "higher",
    ),
    # GEMM burn-in
    _m(
        "gemm.tflops",
        "TFLOP/s",
        "sustained matrix-product rate after ramp-up, median of intervals",
        "higher",
    ),
    _m(
        "gemm.interval_tflops",
        "TFLOP/s",
        "matrix-product rate in one interval",
        "higher",
        judged=False,
    ),
    _m(
        "gemm.interval_power_w",
        "W",
        "mean board power in one interval (NVML)",
        "higher",
        judged=False,
    ),
    _m(
        "gemm.interval_sm_clock_mhz",
        "MHz",
        "mean SM clock in one interval (NVML)",
        "higher",
        judged=False,
    ),
    _m(
        "gemm.interval_temp_c",
        "C",
        "highest GPU temperature in one interval (NVML)",
        "lower",
        judged=False,
    ),
    _m(
        "gemm.power_fraction",
        "",
        "lowest interval power after ramp-up over the enforced power limit",
        "higher",
    ),
    _m(
        "gemm.power_fraction_median",
        "",
        "median interval power after ramp-up over the power limit",
        "higher",
        judged=False,
    ),
    _m(
        "gemm.power_limit_w",
        "W",
        "enforced power limit during the burn-in (NVML)",
        "equal",
        judged=False,
    ),
    _m(
        "gemm.clock_event_reasons",
        "",
        "OR of NVML clock event reasons seen during the burn-in",
        "equal",
        judged=False,
    ),
    _m(
        "gemm.sdc_mismatches",
        "count",
        "elements that differed across GPUs or repeats of a seeded product",
        "lower",
    ),
    # clocks held under load (validation/workloads/load_clocks.py)
    _m("gemm.load_sm_clock_mhz", "MHz", "median SM clock over the steady burn-in intervals",
       "higher"),
    _m("gemm.load_clock_event", "", "a HW slowdown/thermal/power-brake reason seen under load "
       "(label reason)", "equal"),
    _m("gemm.slowdown_margin_c", "C", "NVML's slowdown temperature less the hottest burn-in "
       "interval", "higher"),
    _m("gemm.telemetry_ok", "", "NVML telemetry could be sampled during the burn-in", "equal"),
    _m("gemm.fp8_supported", "", "the GPU runs fp8 matrix products", "equal", judged=False),
    # HBM
    _m("hbm.bandwidth", "GB/s", "device copy bandwidth, bytes read plus written", "higher"),
    _m("hbm.pattern_errors", "count", "wrong 64-bit words over all patterns", "lower"),
    _m(
        "hbm.pattern_bytes",
        "B",
        "bytes of device memory the pattern test covered",
        "higher",
        judged=False,
    ),
    # host transfers and P2P
    _m("host.h2d_bandwidth", "GB/s", "pinned host-to-device copy, GPU's NUMA node", "higher"),
    _m("host.d2h_bandwidth", "GB/s", "pinned device-to-host copy, GPU's NUMA node", "higher"),
    _m("host.bidir_bandwidth", "GB/s", "both directions at once, bytes of both", "higher"),
    _m("p2p.bandwidth", "GB/s", "device-to-device copy between a GPU pair", "higher"),
    # storage
    _m("storage.fio_read", "GB/s", "fio sequential read, 1 MiB blocks, direct I/O", "higher"),
    _m("storage.fio_write", "GB/s", "fio sequential write, 1 MiB blocks, direct I/O", "higher"),
    _m(
        "storage.ckpt_write",
        "GB/s",
        "parallel large-file write with fsync (checkpoint-shaped)",
        "higher",
    ),
    _m(
        "storage.ckpt_read",
        "GB/s",
        "parallel large-file read after dropping the files from the page cache",
        "higher",
    ),
    # reference FSDP training job
    _m("fsdp.plan", "", "the shape the node's GPUs can hold, chosen before the job (labels: "
       "world, GPU memory, headroom, reason); none: no shape fits", "equal", judged=False),
    _m("fsdp.plan_estimate_gib", "GiB", "estimated peak memory per GPU of one candidate shape "
       "(labels shape, world, fits)", "lower", judged=False),
    _m(
        "fsdp.tokens_per_s_per_gpu",
        "tokens/s",
        "training throughput per GPU, median step",
        "higher",
    ),
    _m(
        "fsdp.mfu",
        "",
        "model FLOPs utilisation (torchtitan's count) over fsdp.peak_tflops",
        "higher",
    ),
    _m(
        "fsdp.peak_tflops",
        "TFLOP/s",
        "dense bf16 peak per GPU used for MFU (from the profile)",
        "equal",
        judged=False,
    ),
    _m(
        "fsdp.flops_per_token",
        "FLOP",
        "training FLOPs per token from the model shape",
        "equal",
        judged=False,
    ),
    _m("fsdp.step_time_s", "s", "median step time", "lower", judged=False),
    _m(
        "fsdp.step_time_spread",
        "",
        "(slowest - fastest) / median of per-rank median step times",
        "lower",
    ),
    _m("fsdp.peak_memory_gib", "GiB", "peak allocated GPU memory per rank", "lower", judged=False),
    _m("fsdp.peak_reserved_gib", "GiB", "peak reserved GPU memory per rank (torchtitan's figure)",
       "lower", judged=False),
    _m("fsdp.loss", "", "training loss at a step (label step)", "equal", judged=False),
    _m("fsdp.grad_norm", "", "total gradient norm before clipping, at a step", "lower",
       judged=False),
    _m("fsdp.run_config", "", "the reference job's settings its loss curve depends on (labels)",
       "equal", judged=False),
    _m("fsdp.lr", "", "learning rate at a step (warm-up then decay)", "equal", judged=False),
    _m("fsdp.loss_window_mean", "", "mean loss over one logged window (label step: its last)",
       "lower", judged=False),
    _m(
        "fsdp.loss_window_rise",
        "",
        "largest rise of a window's mean loss over the window before (< 0: falls at every window)",
        "lower",
    ),
    _m(
        "fsdp.loss_rack_deviation",
        "",
        "largest |loss - the rack's median| at a step, same profile and seed (the controller's "
        "fleet verdict, limit: the profile's fsdp.loss_deviation)",
        "lower",
        judged=False,
    ),
    _m(
        "fsdp.resumed_loss",
        "",
        "loss at a step after restoring the checkpoint",
        "equal",
        judged=False,
    ),
    _m(
        "fsdp.loss_deviation",
        "",
        "largest |loss - golden| over the profile's golden steps",
        "lower",
    ),
    _m(
        "fsdp.ckpt_resume_max_abs_diff",
        "",
        "largest |resumed - uninterrupted| loss after restore",
        "lower",
    ),
    _m(
        "fsdp.ckpt_resume_bitwise",
        "",
        "resumed losses equal the uninterrupted run's bit for bit",
        "equal",
        judged=False,
    ),
    _m("fsdp.ckpt_bytes", "B", "size of the distributed checkpoint", "equal", judged=False),
    _m("fsdp.ckpt_write_gbps", "GB/s", "torch.distributed.checkpoint save throughput", "higher"),
    _m("fsdp.ckpt_read_gbps", "GB/s", "torch.distributed.checkpoint load throughput", "higher"),
    # rack-level step (rackready.decide.rack, validation.workloads.rack_nccl)
    # Measured across nodes on one fabric and judged on the controller, never by a node.
    _m("rack.pair_busbw", "GB/s",
       "one rail between two nodes: sendrecv bandwidth each way at once (labels node_a, "
       "node_b, rail, nic_a, nic_b)", "higher"),
    _m("rack.pair_busbw_vs_median", "",
       "a pair's rail bandwidth over the median of every pair and rail of its fabric",
       "higher"),
    _m("rack.allreduce_busbw", "GB/s",
       "all_reduce bus bandwidth across every node of one fabric (nccl-tests factors)",
       "higher"),
    _m("rack.allreduce_correct", "", "the cross-node all_reduce summed exactly on every rank",
       "equal"),
]
