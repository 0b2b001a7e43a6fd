"""Is the demo's v2 a regression on a GPU? (issue 39, item 8) A stand-in measured with PyTorch, for GPU machines
without TensorFlow: torchvision's MobileNetV2 at the demo's widths and input (v1: width 0.35, v2: width 0.75, 96x96x3,
10 classes, batch 16), one SGD training step, timed by our timer (``time.perf_counter``) after ``synchronize``, plus
candidate v2 variants. Prints the median step time of each and its ratio to v1 (20 warm-up steps, 200 timed).

It is evidence for choosing the demo's variant, not perfwatch's figure: TensorFlow's kernels and launch overhead
differ from PyTorch's. On a host without CUDA it says so and exits 0::

    python bench/gpu_demo_variants.py
"""

from __future__ import annotations

import os
import statistics
import time


def main() -> int:
    try:
        import torch
        import torchvision
    except ImportError as e:
        print(f"not run: PyTorch/torchvision not importable ({e})")
        return 0
    if not torch.cuda.is_available():
        print("not run: PyTorch sees no CUDA device")
        return 0
    dev = torch.device("cuda:0")
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, 1-min load {os.getloadavg()[0]:.2f}")
    variants = {
        "v1 w0.35 96px": (0.35, 96),
        "v2 w0.75 96px (today's demo v2)": (0.75, 96),
        "w1.4 96px": (1.4, 96),
        "w0.35 192px": (0.35, 192),
        "w0.75 192px": (0.75, 192),
    }
    base = None
    for name, (width, px) in variants.items():
        model = torchvision.models.mobilenet_v2(width_mult=width, num_classes=10).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(16, 3, px, px, device=dev)
        y = torch.randint(0, 10, (16,), device=dev)

        def step(model=model, opt=opt, x=x, y=y) -> float:  # this variant's, bound now
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) * 1000

        for _ in range(20):
            step()
        med = statistics.median(step() for _ in range(200))
        base = base or med
        print(f"{name:34s} median step {med:7.3f} ms  x{med / base:.2f} of v1")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
