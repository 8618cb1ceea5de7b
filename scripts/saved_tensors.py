"""What the saved-activation measurements share (scripts/measure_saved_activations.py and
scripts/measure_litgpt_saved_activations.py): a recorder of every tensor autograd saves, each untyped
storage counted once and parameters and buffers left out, and an emulation of bitsandbytes' 4-bit
matmul before 0.43.2, which kept its 16-bit input. Run in a throwaway venv with torch, never the
project's (the scripts import it from their own folder)."""

import torch


class Recorder:
    def __init__(self):
        self.modstack = []
        self.param_ptrs = set()
        self.reset()

    def watch(self, model):
        """Leave ``model``'s parameters and buffers out and start empty."""
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.param_ptrs |= {b.untyped_storage().data_ptr() for b in model.buffers()}

    def reset(self):
        self.seen = {}  # storage ptr -> (nbytes, module, shape, dtype, numel)
        self.keep = []

    def add(self, t, tag=None):
        if t is None or not isinstance(t, torch.Tensor):
            return
        st = t.untyped_storage()
        p = st.data_ptr()
        if p in self.param_ptrs or p == 0:
            return
        if p not in self.seen:
            mod = tag or (self.modstack[-1] if self.modstack else "<top>")
            self.seen[p] = (st.nbytes(), mod, tuple(t.shape), str(t.dtype).replace("torch.", ""), t.numel())
            self.keep.append(t)


REC = Recorder()


def pack(t):
    REC.add(t)
    return t


def unpack(t):
    return t


# --- emulation of bitsandbytes < 0.43.2 MatMul4Bit: keeps input A in
# ctx.tensors (not save_for_backward, so the hooks do not see it -> recorded manually) ---
class MatMul4BitEmu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, Bw, bias):
        out = torch.nn.functional.linear(A, Bw, bias)
        if any(ctx.needs_input_grad[:2]):
            ctx.tensors = (A, Bw)
            REC.add(A, tag=REC.modstack[-1] if REC.modstack else None)
        else:
            ctx.tensors = (None, None)
        return out

    @staticmethod
    def backward(ctx, g):
        _, weight = ctx.tensors
        return g @ weight, None, None


def emu4bit_forward(self, x):
    return MatMul4BitEmu.apply(x, self.weight, self.bias)


def breakdown(diff):
    """A per-tensor difference as (module, shape, dtype, bytes) rows, largest first, for the JSON."""
    return [(k[0], list(k[1]), k[2], v) for k, v in sorted(diff.items(), key=lambda x: -x[1])]
