"""torchtitan v0.2.2's trainer with a llama3 flavor "1B" at the reference job's llama3-1b
shape (validation/workloads/shapes.py: dim 2048, 16 layers, 32 query and 8 kv heads,
SwiGLU hidden 8192, vocab 128256, rope theta 500000), which torchtitan does not ship.

    cd bench/.sources/torchtitan && PYTHONPATH=.:<deps> python3 -m torch.distributed.run \\
        --standalone --nproc-per-node 1 ../../titan_shims/titan_1b.py \\
        --job.config_file torchtitan/models/llama3/train_configs/llama3_8b.toml \\
        --model.flavor 1B ...

Only the flavor table gains an entry; the model, its training loop, compile, activation
checkpointing and the single-device mixed precision are torchtitan's own.
"""

from torchtitan.models import llama3
from torchtitan.models.llama3.model.args import TransformerModelArgs

# hidden = multiple_of-rounded(1.5 * int(2 * 4 * dim / 3)) = 8192, as Llama 3.2 1B
llama3.llama3_args["1B"] = TransformerModelArgs(
    dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_dim_multiplier=1.5, multiple_of=256,
    rope_theta=500000,
)

if __name__ == "__main__":
    from torchtitan.train import Trainer, main

    main(Trainer)
