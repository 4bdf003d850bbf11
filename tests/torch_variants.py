"""Problem files rewritten the way people write them for the GPU, shared by the CPU import tests and the
GPU tests (tests/pytorch/test_torch_import.py, tests/gpu/test_torch_import_gpu.py)."""

from __future__ import annotations


def written_for_the_gpu(plain: str, inputs: str) -> str:
    """``plain`` with the CUDA calls problem files written for the GPU make: a default device of "cuda"
    at the top, a device chosen and waited for in get_inputs, the expression ``inputs`` (a tensor
    get_inputs makes) made with ``device="cuda"`` and moved with ``.cuda()`` and ``.to("cuda:0")``, a
    tensor moved to the GPU in the module's constructor."""
    steps = [
        ("import torch\n", 'import torch\ntorch.set_default_device("cuda")\n'),
        ("def get_inputs():\n", "def get_inputs():\n    torch.cuda.set_device(torch.cuda.current_device())\n"
                                "    torch.cuda.synchronize()\n"),
        (inputs, inputs[:-1] + ', device="cuda").cuda().to("cuda:0")'),
        ("        super().__init__()\n", "        super().__init__()\n        torch.zeros(1).cuda()\n"),
    ]
    for old, new in steps:
        assert old in plain, old
        plain = plain.replace(old, new, 1)
    return plain
