"""GPU workloads: burn-in, HBM, collectives, host transfers, P2P, storage, FSDP.

Each worker module runs under torchrun (one process per GPU; `--device cpu`
uses gloo and tiny sizes so CI runs the same code) and writes JSON lines of
Measurement dicts that validation.checks.workload_checks reads back.
torch is imported only inside this package.
"""
