"""torchtitan imports torch.utils.tensorboard unconditionally; the bench runs it with
tensorboard off, so a no-op writer stands in where the tensorboard package is missing."""

import importlib.util
import sys
import types

if importlib.util.find_spec("tensorboard") is None:

    class SummaryWriter:  # the calls torchtitan makes, doing nothing
        def __init__(self, *args, **kwargs):
            pass

        def add_scalar(self, *args, **kwargs):
            pass

        def flush(self):
            pass

        def close(self):
            pass

    _m = types.ModuleType("torch.utils.tensorboard")
    _m.SummaryWriter = SummaryWriter
    sys.modules["torch.utils.tensorboard"] = _m
